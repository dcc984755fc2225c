"""A tiny random causal LM and a character tokenizer, built on the spot: no hub, no download.

verl loads a model and a tokenizer from local folders like any HF checkpoint.
The model is core's tiny Qwen2 (:mod:`dataflex_lab.toy_model`, ~20k
parameters; verl's agent loop picks its Qwen chat-token handling from
``model_type: qwen2``); the tokenizer maps each character of a small alphabet
to one token, with ChatML's markers and the role names as single tokens, so a
prompt is a handful of tokens and a step takes seconds on a CPU.

The tokenizer lives in its own folder: transformers rebuilds a tokenizer that
sits next to a ``config.json`` of ``model_type: qwen2`` as a Qwen2Tokenizer,
which does not know this vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ... import task_families
from ...toy_model import FAMILY_MODEL, TinyModelSpec, char_tokenizer, tiny_qwen2

#: Characters the tokenizer knows, one token each (``"\n"`` must be one token for verl's Qwen handling).
ALPHABET = "abcdefgh :\n"
#: Special tokens: padding, ChatML's turn markers (``<|im_end|>`` ends a response).
PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
#: Tokens the chat template adds around a prompt's text (``<|im_start|>user\n`` ... ``<|im_start|>assistant\n``).
CHAT_TOKENS = 8
#: The task families' model: the TRL demo's, with room for the chat template's tokens.
FAMILY_SPEC = replace(FAMILY_MODEL, max_position_embeddings=64)
#: Role names rendered by the chat template, one token each.
ROLES = ("system", "user", "assistant")
#: ChatML without a system prompt: ``<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n``.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def family_alphabet(task: task_families.TaskFamily) -> str:
    """The characters of a task family's prompts and answers, the constant prompts' marks, and ``"\n"``."""
    return task.alphabet + task_families.SOLVED_MARK + task_families.UNSOLVABLE_MARK + "\n"


def vocabulary() -> dict[str, int]:
    """Token -> id of :func:`build_tokenizer`'s tokenizer."""
    return dict(build_tokenizer().get_vocab())


def build_tokenizer(folder: str | Path | None = None, alphabet: str = ALPHABET):
    """The character tokenizer of ``alphabet`` (the echo task's by default) with ChatML's markers, the role names
    and the template; written to ``folder`` if given."""
    tokenizer = char_tokenizer(
        alphabet, pad=PAD, eos=IM_END, specials=[IM_START], words=ROLES, chat_template=CHAT_TEMPLATE
    )
    if folder is not None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(folder)
    return tokenizer


@contextmanager
def quiet_progress() -> Iterator[None]:
    """transformers' progress bars off for the block, then back as they were."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def build_model(folder: str | Path, seed: int, spec: TinyModelSpec = TinyModelSpec(), alphabet: str = ALPHABET) -> Path:
    """Write a randomly initialised Qwen2 (seeded) for ``alphabet``'s vocabulary to ``folder``; return the folder."""
    from transformers import GenerationConfig

    tokenizer = build_tokenizer(alphabet=alphabet)
    model = tiny_qwen2(tokenizer, seed, spec, bos=IM_START)
    folder = Path(folder)
    with quiet_progress():  # a "Writing model shards: 0%" bar in every demo run says nothing to a user
        model.save_pretrained(folder)
    GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id).save_pretrained(folder)
    return folder


def build_model_and_tokenizer(
    root: str | Path, seed: int, spec: TinyModelSpec = TinyModelSpec(), alphabet: str = ALPHABET
) -> tuple[Path, Path]:
    """``(model folder, tokenizer folder)`` under ``root``; the tokenizer in a folder of its own (see module doc)."""
    root = Path(root)
    model_dir, tokenizer_dir = root / "model", root / "tokenizer"
    build_tokenizer(tokenizer_dir, alphabet)
    build_model(model_dir, seed, spec, alphabet)
    (root / "spec.json").write_text(json.dumps({"seed": seed, **spec.__dict__}, indent=2))
    return model_dir, tokenizer_dir
