"""Toy task families with the structure real reasoning data has, for evidence at equal compute.

A data-centric method can only save compute where uniform sampling wastes it. On real reasoning data most
uniform rollouts land in groups whose rewards all agree (prompts the policy always solves, prompts it never
solves), and what is left is a band of learnable prompts that the policy learns from its easy end. Each family
here has that structure as parameters (:class:`Structure`):

- ``solved`` / ``unsolvable`` fractions: prompts whose rule accepts every / no response (reward 1 / 0 whatever
  is sampled), so their GRPO groups carry no signal;
- the learnable band, with a difficulty knob and its range (``difficulty: [lo, hi]``);
- a binary rule reward (1 when the response's head is the prompt's answer, else 0: no partial credit, which on
  the echo task let every arm learn the same format half);
- a held-out split of the learnable band (distinct prompt texts never trained on), for evaluation.

Families (:data:`FAMILIES`):

- ``repeat``: copy the prompt's last letter ``d`` times, ``d`` in the difficulty range (the prompt says ``d`` as a
  digit; a random model gets ``d = 1`` right one time in the vocabulary's size, ``d = 3`` almost never);
- ``count``: say how many ``a`` a string over ``{a, b}`` of length ``n`` holds, as a digit; the difficulty is ``n``
  (a different skill: counting, not copying).

Framework-free: a host renders :class:`TaskPrompt` texts in its dataset layout and calls
:meth:`TaskFamily.reward`. Nothing here runs in a user's training.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

#: Marks of the constant prompts, first character of their text (what the rule reads) and their answers.
SOLVED_MARK, UNSOLVABLE_MARK = "+", "-"
SOLVED_ANSWER, UNSOLVABLE_ANSWER = "<any>", "<none>"
KINDS = ("solved", "unsolvable", "learnable")
SPLITS = ("train", "held_out")


class TaskParamsError(ValueError):
    """``--task-params`` that do not describe a task: the message names the value and the fix."""


@dataclass(frozen=True)
class Structure:
    """The parameters every family shares (``--task-params`` keys), with the study's defaults.

    ``train_prompts`` is small enough that each prompt recurs within a run (a curriculum learns per prompt);
    ``held_out_prompts`` are drawn from the learnable band only, with texts that never appear in training.
    """

    solved_fraction: float = 0.3
    unsolvable_fraction: float = 0.3
    difficulty: tuple[int, int] = (1, 3)
    train_prompts: int = 64
    held_out_prompts: int = 32

    @property
    def learnable_fraction(self) -> float:
        return 1.0 - self.solved_fraction - self.unsolvable_fraction


@dataclass(frozen=True)
class TaskPrompt:
    """One prompt: the text the model reads, the answer the rule checks, its kind, difficulty and split."""

    text: str
    answer: str
    kind: str
    difficulty: int | None
    split: str


@dataclass(frozen=True)
class TaskSplits:
    """A family's prompts for one seed: ``train`` (every kind, shuffled) and ``held_out`` (learnable only)."""

    family: str
    structure: Structure
    train: tuple[TaskPrompt, ...]
    held_out: tuple[TaskPrompt, ...]


class TaskFamily:
    """A family of prompts: how a learnable prompt of difficulty ``d`` reads, and its answer.

    Subclasses set :attr:`name`, :attr:`alphabet` (every character of prompts and answers, so a character
    tokenizer can be built), :attr:`difficulty_limits` and implement :meth:`learnable`. The structure (constant
    prompts, the split) is built here, once for every family.
    """

    name: ClassVar[str]
    alphabet: ClassVar[str]
    #: The widest difficulty range the family can render.
    difficulty_limits: ClassVar[tuple[int, int]]
    #: What the knob means, for docs and errors.
    difficulty_means: ClassVar[str]
    #: The range when ``--task-params`` names none.
    default_difficulty: ClassVar[tuple[int, int]] = (1, 3)

    def learnable(self, difficulty: int, rng: random.Random) -> tuple[str, str]:
        """A random ``(text, answer)`` of the learnable band at ``difficulty``."""
        raise NotImplementedError

    def response_length(self, structure: Structure) -> int:
        """Characters a response needs at most (the generation budget): the longest answer of the range."""
        raise NotImplementedError

    def reward(self, response: str, answer: str) -> float:
        """The binary rule: 1.0 when the response starts with the answer (any response for a solved prompt)."""
        if answer == SOLVED_ANSWER:
            return 1.0
        if answer == UNSOLVABLE_ANSWER:
            return 0.0
        return 1.0 if response.startswith(answer) else 0.0

    def constant(self, kind: str, rng: random.Random) -> tuple[str, str]:
        """A solved or unsolvable prompt: its mark and a few characters of the family's own alphabet."""
        body = "".join(rng.choice(self.alphabet) for _ in range(3))
        if kind == "solved":
            return SOLVED_MARK + body, SOLVED_ANSWER
        return UNSOLVABLE_MARK + body, UNSOLVABLE_ANSWER

    def build(self, structure: Structure, seed: int) -> TaskSplits:
        """The seeded prompts of ``structure``: held-out texts drawn first, train prompts never repeat them."""
        self.check(structure)
        rng = random.Random(f"{self.name}:{seed}")
        lo, hi = structure.difficulty
        held: dict[str, TaskPrompt] = {}
        for _ in range(structure.held_out_prompts * 50):
            if len(held) == structure.held_out_prompts:
                break
            d = rng.randint(lo, hi)
            text, answer = self.learnable(d, rng)
            held.setdefault(text, TaskPrompt(text, answer, "learnable", d, "held_out"))
        if len(held) < structure.held_out_prompts:
            raise TaskParamsError(
                f"task {self.name!r}: the difficulty range {list(structure.difficulty)} has too few distinct prompts "
                f"for {structure.held_out_prompts} held-out ones; widen 'difficulty' or lower 'held_out_prompts'"
            )
        counts = {
            "solved": round(structure.train_prompts * structure.solved_fraction),
            "unsolvable": round(structure.train_prompts * structure.unsolvable_fraction),
        }
        counts["learnable"] = structure.train_prompts - counts["solved"] - counts["unsolvable"]
        train: list[TaskPrompt] = []
        for kind in ("solved", "unsolvable"):
            for _ in range(counts[kind]):
                text, answer = self.constant(kind, rng)
                train.append(TaskPrompt(text, answer, kind, None, "train"))
        learnable = 0
        for _ in range(counts["learnable"] * 200):
            if learnable == counts["learnable"]:
                break
            d = rng.randint(lo, hi)
            text, answer = self.learnable(d, rng)
            if text not in held:
                train.append(TaskPrompt(text, answer, "learnable", d, "train"))
                learnable += 1
        if learnable < counts["learnable"]:
            raise TaskParamsError(
                f"task {self.name!r}: every learnable prompt of the difficulty range {list(structure.difficulty)} is "
                "held out; widen 'difficulty' or lower 'held_out_prompts'"
            )
        rng.shuffle(train)
        return TaskSplits(self.name, structure, tuple(train), tuple(held.values()))

    def check(self, structure: Structure) -> None:
        lo, hi = structure.difficulty
        low, high = self.difficulty_limits
        if not low <= lo <= hi <= high:
            raise TaskParamsError(
                f"task {self.name!r}: difficulty {list(structure.difficulty)} is not a range within "
                f'[{low}, {high}] ({self.difficulty_means}); e.g. "difficulty": [{low}, {min(high, low + 2)}]'
            )


class RepeatFamily(TaskFamily):
    """Copy the prompt's last letter ``d`` times. Prompt ``<noise><d><letter>``, e.g. ``yx2c`` -> ``cc``."""

    name = "repeat"
    letters = "abcdefgh"
    noise = "xyz"
    alphabet = letters + noise + "123456789"
    difficulty_limits = (1, 9)
    difficulty_means = "how many times the letter must be repeated"

    def learnable(self, difficulty: int, rng: random.Random) -> tuple[str, str]:
        letter = rng.choice(self.letters)
        noise = "".join(rng.choice(self.noise) for _ in range(2))
        return f"{noise}{difficulty}{letter}", letter * difficulty

    def response_length(self, structure: Structure) -> int:
        return structure.difficulty[1]


class CountFamily(TaskFamily):
    """How many ``a`` a string over ``{a, b}`` of length ``n`` holds, as a digit. ``abba`` -> ``2``."""

    name = "count"
    alphabet = "ab0123456789"
    difficulty_limits = (1, 9)
    difficulty_means = "the length of the string to count in"
    #: Strings of length 1-3 are only 14 texts: too few to hold some out.
    default_difficulty = (2, 5)

    def learnable(self, difficulty: int, rng: random.Random) -> tuple[str, str]:
        text = "".join(rng.choice("ab") for _ in range(difficulty))
        return text, str(text.count("a"))

    def response_length(self, structure: Structure) -> int:
        return 1


#: Every family by name (``--task NAME``).
FAMILIES: dict[str, TaskFamily] = {family.name: family for family in (RepeatFamily(), CountFamily())}


def family(name: str) -> TaskFamily:
    if name not in FAMILIES:
        raise TaskParamsError(f"unknown task family {name!r}; the families are {', '.join(FAMILIES)}")
    return FAMILIES[name]


def structure_from(params: Mapping[str, Any] | str | None, task: TaskFamily) -> Structure:
    """``task``'s :class:`Structure` from ``--task-params`` (a JSON object or a mapping), every value checked."""
    structure = Structure(difficulty=task.default_difficulty)
    if params is None:
        return structure
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except json.JSONDecodeError as exc:
            raise TaskParamsError(f"--task-params is not valid JSON ({exc.msg}): {params!r}") from None
    if not isinstance(params, Mapping):
        raise TaskParamsError(
            f"--task-params must be a JSON object, e.g. '{{\"solved_fraction\": 0.3}}'; got {params!r}"
        )
    known = {f.name for f in fields(Structure)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise TaskParamsError(f"--task-params: unknown key(s) {unknown}; the keys are {sorted(known)}")
    for key, value in params.items():
        if key == "difficulty":
            ok = isinstance(value, (list, tuple)) and len(value) == 2
            if not ok or any(isinstance(v, bool) or not isinstance(v, int) for v in value) or value[0] > value[1]:
                raise TaskParamsError(
                    f"--task-params difficulty must be [lo, hi] with integers lo <= hi, got {value!r}"
                )
            value = (int(value[0]), int(value[1]))
        elif key.endswith("_fraction"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise TaskParamsError(f"--task-params {key} must be a number in [0, 1], got {value!r}")
            value = float(value)
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TaskParamsError(f"--task-params {key} must be a positive integer, got {value!r}")
        structure = replace(structure, **{key: value})
    if structure.learnable_fraction <= 0.0:
        raise TaskParamsError(
            f"--task-params: solved_fraction {structure.solved_fraction} + unsolvable_fraction "
            f"{structure.unsolvable_fraction} leave no learnable prompts; their sum must stay below 1"
        )
    task.check(structure)
    return structure


def describe(splits: TaskSplits) -> dict[str, Any]:
    """The parameters and counts a report states with its results."""
    s = splits.structure
    kinds = {kind: sum(1 for p in splits.train if p.kind == kind) for kind in KINDS}
    return {
        "family": splits.family,
        "solved_fraction": s.solved_fraction,
        "unsolvable_fraction": s.unsolvable_fraction,
        "difficulty": list(s.difficulty),
        "train_prompts": kinds,
        "held_out_prompts": len(splits.held_out),
    }
