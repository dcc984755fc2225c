"""The toy task in TRL's terms: a character tokenizer, a tiny random Qwen2, plain-string prompts, a rule reward.

Everything is built in memory, offline: no hub access, no download. The task
is core's :mod:`dataflex_core.toy_task` (echo the letter of the prompt), so the
TRL and verl demos train on the same task. The demo, the tests and the
benchmark use these helpers; nothing here runs in a user's training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataflex_core import toy_task

#: Characters the tokenizer knows, one token each.
ALPHABET = toy_task.LETTERS + " :"
PAD, EOS = "<pad>", "<eos>"


@dataclass(frozen=True)
class TinyModelSpec:
    """Size of the random Qwen2 (defaults: ~70k parameters; a step of 32 completions in about a second)."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 32


def char_tokenizer():
    """A ``PreTrainedTokenizerFast`` with one token per character of :data:`ALPHABET` (decoding joins them)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate([PAD, EOS, *ALPHABET])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=PAD)


def tiny_model(tokenizer: Any, seed: int, spec: TinyModelSpec = TinyModelSpec()):
    """A randomly initialised (seeded) ``Qwen2ForCausalLM`` for ``tokenizer``'s vocabulary."""
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
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def toy_dataset(count: int, seed: int, domain_share: dict[str, float] | None = None, task: str = "echo"):
    """A ``datasets.Dataset`` of ``count`` rows: ``prompt``, ``answer``, ``domain`` and ``index`` (the row's id, for
    ``mechanism: curriculum``'s ``prompt_key``).

    :param task: ``echo`` (the letter to echo) or ``mixed`` (echo prompts beside prompts that are already solved
        or unsolvable, :func:`dataflex_core.toy_task.mixed_prompts`; rows carry their ``kind``).
    """
    from datasets import Dataset

    if task == "mixed":
        rows = [
            {"prompt": p.text, "answer": p.answer, "domain": p.domain, "kind": p.kind, "index": index}
            for index, p in enumerate(toy_task.mixed_prompts(count, seed))
        ]
        return Dataset.from_list(rows)
    if task != "echo":
        raise ValueError(f"task {task!r} is not one of echo, mixed")
    pairs = toy_task.prompts(count, seed, domain_share)
    return Dataset.from_list(
        [
            {"prompt": letter, "answer": letter, "domain": domain, "index": index}
            for index, (letter, domain) in enumerate(pairs)
        ]
    )


def echo_reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
    """TRL reward function: :func:`dataflex_core.toy_task.score` of each completion."""
    return [toy_task.score(completion, letter) for completion, letter in zip(completions, answer)]
