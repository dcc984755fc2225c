"""A tiny random causal LM and a character tokenizer, built on the spot: no hub, no download.

verl loads a model and a tokenizer from local folders like any HF checkpoint.
The model is a Qwen2 of ~20k parameters (verl's agent loop picks its
Qwen chat-token handling from ``model_type: qwen2``); the tokenizer maps each
character of a small alphabet to one token, with ChatML's markers and the
role names as single tokens, so a prompt is a handful of tokens and a step
takes seconds on a CPU.

The tokenizer lives in its own folder: transformers rebuilds a tokenizer that
sits next to a ``config.json`` of ``model_type: qwen2`` as a Qwen2Tokenizer,
which does not know this vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

#: Characters the tokenizer knows, one token each (``"\n"`` must be one token for verl's Qwen handling).
ALPHABET = "abcdefgh :\n"
#: Special tokens: padding, ChatML's turn markers (``<|im_end|>`` ends a response).
PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
#: Role names rendered by the chat template, one token each.
ROLES = ("system", "user", "assistant")
#: ChatML without a system prompt: ``<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n``.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Size of the random Qwen2 (defaults: ~20k parameters, a CPU step in seconds)."""

    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 64


def vocabulary() -> dict[str, int]:
    """Token -> id: special tokens first, then role names, then the characters."""
    tokens = [PAD, IM_START, IM_END, *ROLES, *ALPHABET]
    return {token: index for index, token in enumerate(tokens)}


def build_tokenizer(folder: str | Path):
    """Write a character-level ``PreTrainedTokenizerFast`` to ``folder``; return it."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = vocabulary()
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    words = "|".join(ROLES)
    # role names stay whole; every other character is its own token
    core.pre_tokenizer = pre_tokenizers.Split(Regex(f"{words}|[\\s\\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()  # characters join without separators
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=IM_END,
        unk_token=PAD,
        additional_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    return tokenizer


def build_model(folder: str | Path, seed: int, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Write a randomly initialised Qwen2 (seeded) for this vocabulary to ``folder``; return the folder."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    vocab = vocabulary()
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=vocab[IM_START],
        eos_token_id=vocab[IM_END],
        pad_token_id=vocab[PAD],
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    folder = Path(folder)
    model.save_pretrained(folder)
    GenerationConfig(eos_token_id=vocab[IM_END], pad_token_id=vocab[PAD]).save_pretrained(folder)
    return folder


def build_model_and_tokenizer(root: str | Path, seed: int, spec: TinyModelSpec = TinyModelSpec()) -> tuple[Path, Path]:
    """``(model folder, tokenizer folder)`` under ``root``; the tokenizer in a folder of its own (see module doc)."""
    root = Path(root)
    model_dir, tokenizer_dir = root / "model", root / "tokenizer"
    build_tokenizer(tokenizer_dir)
    build_model(model_dir, seed, spec)
    (root / "spec.json").write_text(json.dumps({"seed": seed, **spec.__dict__}, indent=2))
    return model_dir, tokenizer_dir
