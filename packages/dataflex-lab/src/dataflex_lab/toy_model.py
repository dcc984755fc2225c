"""A character tokenizer and a tiny random Qwen2 for the toy task, built in memory: no hub, no download.

Both hosts' CPU demos, tests and benchmarks train on :mod:`dataflex_lab.toy_task`
with a model of a few tens of thousands of parameters, so a step takes seconds
on a CPU. Each host decides the vocabulary's extras (verl's agent loop wants
ChatML's markers and role names as single tokens and a chat template; TRL
takes plain-string prompts) and writes the objects where its framework reads
them. Needs ``transformers`` and ``tokenizers`` (requirements of ``dataflex-lab``, imported when
called): this module is for demos and tests, never for training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TinyModelSpec:
    """Size of the random Qwen2."""

    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 64
    #: Standard deviation of the initial weights (transformers' default 0.02). Larger values make the tied
    #: embeddings favour repeating the last token from the start (a reachable first reward on copy tasks).
    initializer_range: float = 0.02


#: The task families' model (:mod:`dataflex_lab.task_families`; the TRL demo's and the evidence campaign's): twice
#: the width, and initial weights large enough that a random model already repeats the prompt's last token
#: sometimes (a first reward on the copy task within reach).
FAMILY_MODEL = TinyModelSpec(hidden_size=64, intermediate_size=128, max_position_embeddings=32, initializer_range=0.1)


def char_tokenizer(
    alphabet: str,
    *,
    pad: str,
    eos: str,
    specials: Sequence[str] = (),
    words: Sequence[str] = (),
    chat_template: str | None = None,
) -> Any:
    """A ``PreTrainedTokenizerFast`` with one token per character of ``alphabet``; decoding joins them.

    The vocabulary is ``pad``, ``specials``, ``eos``, ``words``, then the characters, in that order. ``words``
    stay whole (e.g. role names a chat template renders); every other character is its own token.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokens = [pad, *specials, eos, *words, *alphabet]
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"the toy vocabulary repeats a token: {tokens}")
    core = Tokenizer(models.WordLevel(vocab={token: index for index, token in enumerate(tokens)}, unk_token=pad))
    pattern = "|".join([*words, "[\\s\\S]"])
    core.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    core.decoder = decoders.Fuse()  # characters join without separators
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=pad, eos_token=eos, unk_token=pad, chat_template=chat_template
    )
    if specials:
        tokenizer.add_special_tokens({"additional_special_tokens": [*specials, eos]})
    return tokenizer


def tiny_qwen2(tokenizer: Any, seed: int, spec: TinyModelSpec = TinyModelSpec(), *, bos: str | None = None) -> Any:
    """A randomly initialised (seeded) ``Qwen2ForCausalLM`` over ``tokenizer``'s vocabulary (tied embeddings)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        initializer_range=spec.initializer_range,
        bos_token_id=tokenizer.convert_tokens_to_ids(bos) if bos else tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)
