"""The toy task in TRL's terms: a character tokenizer, a tiny random Qwen2, plain-string prompts, a rule reward.

Everything is built in memory, offline: no hub access, no download. The task
is core's :mod:`dataflex_lab.toy_task` (echo the letter of the prompt), so the
TRL and verl demos train on the same task. The demo, the tests and the
benchmark use these helpers; nothing here runs in a user's training.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import task_families, toy_model, toy_task
from ..toy_model import TinyModelSpec

#: Characters the tokenizer knows, one token each.
ALPHABET = toy_task.LETTERS + " :"
PAD, EOS = "<pad>", "<eos>"


#: The TRL demo's model: ~70k parameters; a step of 32 completions in about a second.
TRL_MODEL = TinyModelSpec(hidden_size=64, intermediate_size=128, max_position_embeddings=32)
#: The task families' model (the evidence campaign's): the same size (:data:`dataflex_lab.toy_model.FAMILY_MODEL`).
FAMILY_MODEL = toy_model.FAMILY_MODEL


def char_tokenizer():
    """A ``PreTrainedTokenizerFast`` with one token per character of :data:`ALPHABET` (decoding joins them)."""
    return toy_model.char_tokenizer(ALPHABET, pad=PAD, eos=EOS)


def tiny_model(tokenizer: Any, seed: int, spec: TinyModelSpec = TRL_MODEL):
    """A randomly initialised (seeded) ``Qwen2ForCausalLM`` for ``tokenizer``'s vocabulary."""
    return toy_model.tiny_qwen2(tokenizer, seed, spec)


def toy_dataset(count: int, seed: int, domain_share: dict[str, float] | None = None, task: str = "echo"):
    """A ``datasets.Dataset`` of ``count`` rows: ``prompt``, ``answer``, ``domain`` and ``index`` (the row's id, for
    ``mechanism: curriculum``'s ``prompt_key``).

    :param task: ``echo`` (the letter to echo) or ``mixed`` (echo prompts beside prompts that are already solved
        or unsolvable, :func:`dataflex_lab.toy_task.mixed_prompts`; rows carry their ``kind``).
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


def family_tokenizer(task: task_families.TaskFamily):
    """A character tokenizer for a task family's prompts and answers (and the constant prompts' marks)."""
    return toy_model.char_tokenizer(
        task.alphabet + task_families.SOLVED_MARK + task_families.UNSOLVABLE_MARK, pad=PAD, eos=EOS
    )


def family_dataset(prompts: Sequence[task_families.TaskPrompt]):
    """A ``datasets.Dataset`` of a family's prompts: ``prompt``, ``answer``, ``kind``, ``difficulty`` (-1 for the
    constant prompts) and ``index`` (the row's id, for ``mechanism: curriculum``'s ``prompt_key``)."""
    from datasets import Dataset

    return Dataset.from_list(
        [
            {"prompt": p.text, "answer": p.answer, "kind": p.kind, "difficulty": p.difficulty or -1, "index": index}
            for index, p in enumerate(prompts)
        ]
    )


def family_reward(task: task_families.TaskFamily):
    """TRL reward function of ``task``: its binary rule on each completion (named ``rule``)."""

    def rule(completions: list[str], answer: list[str], **_: Any) -> list[float]:
        return [task.reward(completion, expected) for completion, expected in zip(completions, answer)]

    return rule


def echo_reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
    """TRL reward function: :func:`dataflex_lab.toy_task.score` of each completion."""
    return [toy_task.score(completion, letter) for completion, letter in zip(completions, answer)]
