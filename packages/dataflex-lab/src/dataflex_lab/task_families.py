"""Toy task families with the structure real reasoning data has, for evidence at equal compute.

A data-centric method can only save compute where uniform sampling wastes it. On real reasoning data most
uniform rollouts land in groups whose rewards all agree (prompts the policy always solves, prompts it never
solves), and what is left is a band of learnable prompts that the policy learns from its easy end. Each family
here has that structure as parameters (:class:`Structure`, the ``--task-params`` keys):

- ``solved_fraction`` / ``unsolvable_fraction``: prompts every response / no response solves, so their GRPO
  groups carry no signal. ``constants`` says how they read: ``marked`` (a ``+`` / ``-`` first character: the
  policy can tell them apart) or ``hidden`` (written exactly like learnable prompts: only the answer the rule
  checks differs, as in real data). ``unsolvable`` says what makes a prompt hopeless: ``rule`` (the rule rejects
  every response) or ``budget`` (a learnable-looking prompt whose answer is longer than the completion budget);
- the learnable band: a ``difficulty`` range, split over its levels by ``difficulty_shares`` (``None``: each
  prompt's level drawn at random; ``"balanced"``: equal counts; or one share per level, e.g. a long tail);
- ``budget``: the completion budget (characters a response may have; default the band's longest answer);
- a binary rule reward (1 when the response's head is the prompt's answer, else 0: no partial credit);
- a held-out split of the learnable band, never trained on: ``held_out`` ``texts`` (prompt texts that no train
  prompt has) or ``tags`` (prompts whose tag, the part the answer does not depend on, no train prompt has),
  balanced over the band's levels when the train band is. ``held_out_prompts: "all"`` (with ``tags``) makes it a
  fixed, balanced set instead of a draw: every prompt the held-out tags write at every level of the band (for the
  repeat families each held-out tag x letter x level once), the held-out tags the same for every seed, so every
  seed's runs are scored on the same prompts.

Families (:data:`FAMILIES`), each with what it models and what a uniform policy meets at step 0: the share of
zero-variance groups (8 samples a prompt, every reward equal: no GRPO signal) a fresh model gives, measured with
:func:`dataflex_lab.trl.heldout.step0_profile` over seeds 0-9 (docs/evidence.md#tasks):

- ``repeat``: copy the prompt's last letter ``d`` times (``yx2c`` -> ``cc``), marked constants, random levels;
  94% zero-variance at step 0 (learnable prompts 85%: difficulty 1 64%, 2 94%, 3 97%);
- ``count``: say how many ``a`` a string over ``{a, b}`` of length ``n`` holds, as a digit (a different skill);
  84% (learnable 60%: a one-digit answer is guessed one time in ten);
- ``band``: the always / never / learnable mix of real RL data: the repeat skill over 4 letters, 30 % of prompts
  always solved and 30 % never solvable (their answers are past the budget), all written like learnable ones, a
  balanced band of difficulty 1-5, held-out tags; 94% (learnable 86%: difficulty 1 48%, 2 86%, 3-5 99-100%);
- ``longtail``: most prompts too hard, as in math RL data for a small model: 60 % past the budget, 5 % solved,
  the learnable 35 % weighted towards the hard end of 1-5, held-out tags; 98% (learnable 94%).

Framework-free: a host renders :class:`TaskPrompt` texts in its dataset layout and calls
:meth:`TaskFamily.reward`. Nothing here runs in a user's training.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

#: Marks of the marked constant prompts, first character of their text, and the answers of rule constants.
SOLVED_MARK, UNSOLVABLE_MARK = "+", "-"
SOLVED_ANSWER, UNSOLVABLE_ANSWER = "<any>", "<none>"
KINDS = ("solved", "unsolvable", "learnable")
SPLITS = ("train", "held_out")
#: ``constants``: how solved / unsolvable prompts read; ``unsolvable``: what makes one hopeless;
#: ``held_out``: what a held-out prompt shares with no train prompt.
CONSTANT_FORMS = ("marked", "hidden")
UNSOLVABLE_KINDS = ("rule", "budget")
HELD_OUT_KINDS = ("texts", "tags")
#: ``difficulty_shares`` that splits the band evenly.
BALANCED = "balanced"
#: ``held_out_prompts`` that holds out every prompt of the held-out tags (:meth:`TaskFamily.every_learnable`).
ALL = "all"


class TaskParamsError(ValueError):
    """``--task-params`` that do not describe a task: the message names the value and the fix."""


@dataclass(frozen=True)
class Structure:
    """The parameters every family shares (``--task-params`` keys); a family may set its own defaults.

    ``train_prompts`` is small enough that each prompt recurs within a run (a curriculum learns per prompt);
    ``held_out_prompts`` are drawn from the learnable band only and never appear in training.
    """

    solved_fraction: float = 0.3
    unsolvable_fraction: float = 0.3
    difficulty: tuple[int, int] = (1, 3)
    train_prompts: int = 64
    #: A count, or :data:`ALL` (every prompt of the held-out tags, the same for every seed).
    held_out_prompts: int | str = 32
    constants: str = "marked"
    unsolvable: str = "rule"
    #: ``None``: each learnable prompt's level drawn at random; :data:`BALANCED`; or one share per level.
    difficulty_shares: str | tuple[float, ...] | None = None
    #: Characters a response may have; ``None``: the band's longest answer.
    budget: int | None = None
    held_out: str = "texts"
    #: With ``held_out: tags``, how many of the family's tags only held-out prompts use.
    held_out_tags: int = 4

    @property
    def learnable_fraction(self) -> float:
        return 1.0 - self.solved_fraction - self.unsolvable_fraction

    def levels(self) -> list[int]:
        lo, hi = self.difficulty
        return list(range(lo, hi + 1))

    def shares(self) -> list[float] | None:
        """One share per level of the band, or ``None`` for levels drawn at random."""
        if self.difficulty_shares is None:
            return None
        if self.difficulty_shares == BALANCED:
            return [1.0 / len(self.levels())] * len(self.levels())
        return list(self.difficulty_shares)


@dataclass(frozen=True)
class TaskPrompt:
    """One prompt: the text the model reads, the answer the rule checks, its kind, difficulty and split.

    ``difficulty`` is the level the text is written at (``None`` for a marked constant); a hidden solved prompt
    has one too, though any response solves it.
    """

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


def split_counts(total: int, shares: Sequence[float]) -> list[int]:
    """``total`` split by ``shares`` into whole counts that sum to it (largest remainders get the rest)."""
    exact = [total * share / sum(shares) for share in shares]
    counts = [int(x) for x in exact]
    order = sorted(range(len(shares)), key=lambda i: (counts[i] - exact[i], i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


class TaskFamily:
    """A family of prompts: how a learnable prompt of difficulty ``d`` reads, and its answer.

    Subclasses set :attr:`name`, :attr:`alphabet` (every character of prompts and answers, so a character
    tokenizer can be built), :attr:`difficulty_limits`, :attr:`models` and implement :meth:`learnable` and
    :meth:`answer_length`. The structure (constant prompts, the levels, the split) is built here, once for every
    family.
    """

    name: ClassVar[str]
    alphabet: ClassVar[str]
    #: The widest difficulty range the family can render.
    difficulty_limits: ClassVar[tuple[int, int]]
    #: What the knob means, for docs and errors.
    difficulty_means: ClassVar[str]
    #: What the family stands for, in a line (docs, the campaign's output).
    models: ClassVar[str] = ""
    #: The structure when ``--task-params`` names nothing (a family overrides what it sets).
    defaults: ClassVar[dict[str, Any]] = {"difficulty": (1, 3)}
    #: Characters a tag is written with (``held_out: tags``); empty: the family has no tags.
    tag_alphabet: ClassVar[str] = ""
    tag_length: ClassVar[int] = 2

    @property
    def default_difficulty(self) -> tuple[int, int]:
        return self.default_structure().difficulty

    def default_structure(self) -> Structure:
        return Structure(**self.defaults)

    def learnable(self, difficulty: int, rng: random.Random, tag: str | None = None) -> tuple[str, str]:
        """A random ``(text, answer)`` at ``difficulty`` (written with ``tag`` when given)."""
        raise NotImplementedError

    def answer_length(self, difficulty: int) -> int:
        """Characters the answer of a prompt of ``difficulty`` has."""
        raise NotImplementedError

    def every_learnable(self, difficulty: int, tag: str) -> list[tuple[str, str]]:
        """Every ``(text, answer)`` at ``difficulty`` written with ``tag``, in a fixed order (``held_out_prompts:
        "all"``); a family that cannot list them returns ``[]``."""
        return []

    def tags(self) -> list[str]:
        """Every tag the family writes prompts with, in a fixed order."""
        return ["".join(t) for t in itertools.product(self.tag_alphabet, repeat=self.tag_length)]

    def response_length(self, structure: Structure) -> int:
        """The completion budget: ``budget``, or the band's longest answer."""
        if structure.budget is not None:
            return structure.budget
        return max(self.answer_length(d) for d in structure.levels())

    def reward(self, response: str, answer: str) -> float:
        """The binary rule: 1.0 when the response starts with the answer (any response for a solved prompt)."""
        if answer == SOLVED_ANSWER:
            return 1.0
        if answer == UNSOLVABLE_ANSWER:
            return 0.0
        return 1.0 if response.startswith(answer) else 0.0

    def marked_constant(self, kind: str, rng: random.Random) -> tuple[str, str]:
        """A marked solved or unsolvable prompt: its mark and a few characters of the family's own alphabet."""
        body = "".join(rng.choice(self.alphabet) for _ in range(3))
        if kind == "solved":
            return SOLVED_MARK + body, SOLVED_ANSWER
        return UNSOLVABLE_MARK + body, UNSOLVABLE_ANSWER

    def past_budget(self, structure: Structure) -> list[int]:
        """The levels whose answers do not fit the completion budget (``unsolvable: budget`` draws from them)."""
        budget = self.response_length(structure)
        low, high = self.difficulty_limits
        return [d for d in range(low, high + 1) if self.answer_length(d) > budget]

    # -- building the splits ---------------------------------------------------------------------------------

    def build(self, structure: Structure, seed: int) -> TaskSplits:
        """The seeded prompts of ``structure``: held-out prompts drawn first, train prompts never repeat them."""
        self.check(structure)
        rng = random.Random(f"{self.name}:{seed}")
        held_tags: list[str] = []
        train_tags: list[str | None] = [None]
        if structure.held_out == "tags":
            tags = self.tags()
            # the whole held-out set is fixed: its tags are the same for every seed
            (random.Random(f"{self.name}:held-out tags") if structure.held_out_prompts == ALL else rng).shuffle(tags)
            held_tags, train_tags = tags[: structure.held_out_tags], tags[structure.held_out_tags :]
        held = self._held_out(structure, rng, held_tags)
        counts = {
            "solved": round(structure.train_prompts * structure.solved_fraction),
            "unsolvable": round(structure.train_prompts * structure.unsolvable_fraction),
        }
        counts["learnable"] = structure.train_prompts - counts["solved"] - counts["unsolvable"]
        taken = set(held)
        train: list[TaskPrompt] = []
        for kind in ("solved", "unsolvable"):
            train += self._constants(structure, kind, counts[kind], rng, train_tags, taken)
        train += self._learnable_train(structure, counts["learnable"], rng, train_tags, taken)
        rng.shuffle(train)
        return TaskSplits(self.name, structure, tuple(train), tuple(held.values()))

    def _levels(self, structure: Structure, count: int, rng: random.Random) -> list[int]:
        """The level of each of ``count`` learnable prompts: drawn at random, or split by the band's shares."""
        shares = structure.shares()
        if shares is None:
            return [rng.randint(*structure.difficulty) for _ in range(count)]
        return [d for d, n in zip(structure.levels(), split_counts(count, shares)) for _ in range(n)]

    def _draw(self, difficulty: int, rng: random.Random, tags: Sequence[str | None], taken: set[str],
              tries: int) -> tuple[str, str] | None:  # fmt: skip
        """A prompt of ``difficulty`` whose text is not in ``taken`` (``None`` after ``tries`` collisions)."""
        for _ in range(tries):
            tag = rng.choice(tags) if tags != [None] else None
            text, answer = self.learnable(difficulty, rng, tag)
            if text not in taken:
                return text, answer
        return None

    def _held_out(self, structure: Structure, rng: random.Random, tags: list[str]) -> dict[str, TaskPrompt]:
        held: dict[str, TaskPrompt] = {}
        if structure.held_out_prompts == ALL:  # every held-out tag x prompt x level once: balanced, no draw
            for d in structure.levels():
                for tag in sorted(tags):
                    for text, answer in self.every_learnable(d, tag):
                        held[text] = TaskPrompt(text, answer, "learnable", d, "held_out")
            return held
        if structure.shares() is None and structure.held_out == "texts":
            for _ in range(structure.held_out_prompts * 50):  # levels at random, as the train band's
                if len(held) == structure.held_out_prompts:
                    break
                d = rng.randint(*structure.difficulty)
                text, answer = self.learnable(d, rng)
                held.setdefault(text, TaskPrompt(text, answer, "learnable", d, "held_out"))
        else:  # balanced over the band's levels, whatever the train band's shares
            levels = structure.levels()
            per_level = split_counts(structure.held_out_prompts, [1.0] * len(levels))
            for d, n in zip(levels, per_level):
                for _ in range(n):
                    drawn = self._draw(d, rng, tags or [None], set(held), 200)
                    if drawn is None:
                        break
                    held[drawn[0]] = TaskPrompt(drawn[0], drawn[1], "learnable", d, "held_out")
        if len(held) < structure.held_out_prompts:
            raise TaskParamsError(
                f"task {self.name!r}: the difficulty range {list(structure.difficulty)} has too few distinct prompts "
                f"for {structure.held_out_prompts} held-out ones; widen 'difficulty' or lower 'held_out_prompts'"
            )
        return held

    def _constants(self, structure: Structure, kind: str, count: int, rng: random.Random,
                   tags: list[str | None], taken: set[str]) -> list[TaskPrompt]:  # fmt: skip
        out: list[TaskPrompt] = []
        hopeless = self.past_budget(structure) if kind == "unsolvable" and structure.unsolvable == "budget" else []
        for _ in range(count):
            if hopeless:  # a real prompt whose answer does not fit the budget
                d = rng.choice(hopeless)
                drawn = self._draw(d, rng, tags, taken, 200)
                answer_of = None
            elif structure.constants == "hidden":  # written like a learnable prompt; the rule ignores the response
                d = rng.randint(*structure.difficulty)
                drawn = self._draw(d, rng, tags, taken, 200)
                answer_of = SOLVED_ANSWER if kind == "solved" else UNSOLVABLE_ANSWER
            else:
                d, drawn, answer_of = None, self.marked_constant(kind, rng), None
            if drawn is None:
                raise TaskParamsError(
                    f"task {self.name!r}: too few distinct texts for {count} {kind} prompts beside the others; "
                    "lower 'train_prompts' or widen 'difficulty'"
                )
            text, answer = drawn
            if d is not None:
                taken.add(text)
            out.append(TaskPrompt(text, answer_of or answer, kind, d, "train"))
        return out

    def _learnable_train(self, structure: Structure, count: int, rng: random.Random,
                         tags: list[str | None], taken: set[str]) -> list[TaskPrompt]:  # fmt: skip
        out: list[TaskPrompt] = []
        if structure.shares() is None and structure.held_out == "texts":
            for _ in range(count * 200):  # levels at random; a text may recur in training, never held out
                if len(out) == count:
                    break
                d = rng.randint(*structure.difficulty)
                text, answer = self.learnable(d, rng)
                if text not in taken:
                    out.append(TaskPrompt(text, answer, "learnable", d, "train"))
        else:
            for d in self._levels(structure, count, rng):
                drawn = self._draw(d, rng, tags, taken, 200)
                if drawn is None:
                    break
                taken.add(drawn[0])
                out.append(TaskPrompt(drawn[0], drawn[1], "learnable", d, "train"))
        if len(out) < count:
            raise TaskParamsError(
                f"task {self.name!r}: too few distinct learnable prompts in the difficulty range "
                f"{list(structure.difficulty)} beside the held-out ones; widen 'difficulty' or lower "
                "'held_out_prompts' / 'train_prompts'"
            )
        return out

    def check(self, structure: Structure) -> None:
        lo, hi = structure.difficulty
        low, high = self.difficulty_limits
        if not low <= lo <= hi <= high:
            raise TaskParamsError(
                f"task {self.name!r}: difficulty {list(structure.difficulty)} is not a range within "
                f'[{low}, {high}] ({self.difficulty_means}); e.g. "difficulty": [{low}, {min(high, low + 2)}]'
            )
        shares = structure.shares()
        if shares is not None and (len(shares) != hi - lo + 1 or any(s < 0 for s in shares) or sum(shares) <= 0):
            raise TaskParamsError(
                f"task {self.name!r}: difficulty_shares {structure.difficulty_shares!r} needs one non-negative share "
                f"per level of {list(structure.difficulty)} ({hi - lo + 1} numbers, not all 0), or {BALANCED!r}"
            )
        longest = max(self.answer_length(d) for d in structure.levels())
        if structure.budget is not None and structure.budget < longest:
            raise TaskParamsError(
                f"task {self.name!r}: budget {structure.budget} is shorter than the band's longest answer ({longest} "
                f"characters at difficulty {hi}): those prompts could never be solved; raise 'budget' to {longest}"
            )
        if structure.unsolvable == "budget" and structure.unsolvable_fraction > 0 and not self.past_budget(structure):
            raise TaskParamsError(
                f"task {self.name!r}: 'unsolvable': 'budget' needs answers longer than the budget "
                f"({self.response_length(structure)}), and no level up to {high} has one; lower 'budget' or use "
                "'unsolvable': 'rule'"
            )
        if structure.held_out_prompts == ALL and (structure.held_out != "tags" or not self.every_learnable(lo, "")):
            raise TaskParamsError(
                f"task {self.name!r}: held_out_prompts {ALL!r} holds out every prompt of the held-out tags, so it "
                "needs 'held_out': 'tags' and a family that lists its prompts per tag (repeat, band, longtail)"
            )
        if structure.held_out == "tags":
            if not self.tag_alphabet:
                raise TaskParamsError(
                    f"task {self.name!r} writes no tags, so 'held_out': 'tags' has nothing to hold out; use 'texts'"
                )
            if not 0 < structure.held_out_tags < len(self.tags()):
                raise TaskParamsError(
                    f"task {self.name!r}: held_out_tags {structure.held_out_tags} must leave tags on both sides "
                    f"(1 to {len(self.tags()) - 1} of its {len(self.tags())})"
                )


class RepeatFamily(TaskFamily):
    """Copy the prompt's last letter ``d`` times. Prompt ``<tag><d><letter>``, e.g. ``yx2c`` -> ``cc``."""

    name = "repeat"
    letters = "abcdefgh"
    noise = "xyz"
    alphabet = letters + noise + "123456789"
    tag_alphabet = noise
    difficulty_limits = (1, 9)
    difficulty_means = "how many times the letter must be repeated"
    models = (
        "a copy skill whose difficulty is the answer's length; constant prompts marked with +/-, levels drawn at "
        "random, held-out prompts are unseen texts"
    )

    def learnable(self, difficulty: int, rng: random.Random, tag: str | None = None) -> tuple[str, str]:
        letter = rng.choice(self.letters)
        noise = tag if tag is not None else "".join(rng.choice(self.noise) for _ in range(2))
        return f"{noise}{difficulty}{letter}", letter * difficulty

    def every_learnable(self, difficulty: int, tag: str) -> list[tuple[str, str]]:
        return [(f"{tag}{difficulty}{letter}", letter * difficulty) for letter in self.letters]

    def answer_length(self, difficulty: int) -> int:
        return difficulty


class BandFamily(RepeatFamily):
    """The repeat skill over 4 letters with real data's always / never / learnable mix, all in one form."""

    name = "band"
    letters = "abcd"
    noise = "wxyz"
    alphabet = letters + noise + "123456789"
    tag_alphabet = noise
    models = (
        "real RL data's always / never / learnable mix: 30% of prompts solved by any response, 30% whose answer "
        "is past the completion budget, written exactly like the learnable 40% (a balanced band of difficulty 1-5); "
        "held-out prompts carry tags no train prompt has, balanced over the band"
    )
    defaults = {
        "difficulty": (1, 5),
        "train_prompts": 96,
        "held_out_prompts": 40,
        "constants": "hidden",
        "unsolvable": "budget",
        "difficulty_shares": BALANCED,
        "held_out": "tags",
    }


class LongTailFamily(BandFamily):
    """The repeat skill where most prompts are too hard, as math RL data is for a small model."""

    name = "longtail"
    models = (
        "most prompts too hard, as math RL data is for a small model: 60% past the completion budget, 5% solved "
        "by any response, the learnable 35% weighted towards the hard end of difficulty 1-5; held-out tags"
    )
    defaults = {
        **BandFamily.defaults,
        "solved_fraction": 0.05,
        "unsolvable_fraction": 0.6,
        "difficulty_shares": (0.1, 0.15, 0.2, 0.25, 0.3),
    }


class CountFamily(TaskFamily):
    """How many ``a`` a string over ``{a, b}`` of length ``n`` holds, as a digit. ``abba`` -> ``2``."""

    name = "count"
    alphabet = "ab0123456789"
    difficulty_limits = (1, 9)
    difficulty_means = "the length of the string to count in"
    models = (
        "a counting skill (a one-digit answer whatever the difficulty); constant prompts marked with +/-, levels "
        "drawn at random, held-out prompts are unseen texts"
    )
    #: Strings of length 1-3 are only 14 texts: too few to hold some out.
    defaults = {"difficulty": (2, 5)}

    def learnable(self, difficulty: int, rng: random.Random, tag: str | None = None) -> tuple[str, str]:
        text = "".join(rng.choice("ab") for _ in range(difficulty))
        return text, str(text.count("a"))

    def answer_length(self, difficulty: int) -> int:
        return 1


#: Every family by name (``--task NAME``).
FAMILIES: dict[str, TaskFamily] = {
    family.name: family for family in (RepeatFamily(), CountFamily(), BandFamily(), LongTailFamily())
}


def family(name: str) -> TaskFamily:
    if name not in FAMILIES:
        raise TaskParamsError(f"unknown task family {name!r}; the families are {', '.join(FAMILIES)}")
    return FAMILIES[name]


_CHOICES = {"constants": CONSTANT_FORMS, "unsolvable": UNSOLVABLE_KINDS, "held_out": HELD_OUT_KINDS}


def structure_from(params: Mapping[str, Any] | str | None, task: TaskFamily) -> Structure:
    """``task``'s :class:`Structure` from ``--task-params`` (a JSON object or a mapping), every value checked."""
    structure = task.default_structure()
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
        structure = replace(structure, **{key: _checked(key, value)})
    if structure.learnable_fraction <= 0.0:
        raise TaskParamsError(
            f"--task-params: solved_fraction {structure.solved_fraction} + unsolvable_fraction "
            f"{structure.unsolvable_fraction} leave no learnable prompts; their sum must stay below 1"
        )
    task.check(structure)
    return structure


def _checked(key: str, value: Any) -> Any:
    """One ``--task-params`` value in its field's type, or an error naming it."""
    if key == "difficulty":
        ok = isinstance(value, (list, tuple)) and len(value) == 2
        if not ok or any(isinstance(v, bool) or not isinstance(v, int) for v in value) or value[0] > value[1]:
            raise TaskParamsError(f"--task-params difficulty must be [lo, hi] with integers lo <= hi, got {value!r}")
        return (int(value[0]), int(value[1]))
    if key.endswith("_fraction"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise TaskParamsError(f"--task-params {key} must be a number in [0, 1], got {value!r}")
        return float(value)
    if key in _CHOICES:
        if value not in _CHOICES[key]:
            raise TaskParamsError(f"--task-params {key} must be one of {list(_CHOICES[key])}, got {value!r}")
        return value
    if key == "difficulty_shares":
        if value is None or value == BALANCED:
            return value
        numbers = isinstance(value, (list, tuple)) and value
        if not numbers or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
            raise TaskParamsError(
                f"--task-params difficulty_shares must be {BALANCED!r}, null or a list of numbers (one per level), "
                f"got {value!r}"
            )
        return tuple(float(v) for v in value)
    if key == "budget" and value is None:
        return None
    if key == "held_out_prompts" and value == ALL:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        also = f" or {ALL!r}" if key == "held_out_prompts" else ""
        raise TaskParamsError(f"--task-params {key} must be a positive integer{also}, got {value!r}")
    return value


def describe(splits: TaskSplits) -> dict[str, Any]:
    """The parameters and counts a report states with its results."""
    s = splits.structure
    kinds = {kind: sum(1 for p in splits.train if p.kind == kind) for kind in KINDS}
    out: dict[str, Any] = {
        "family": splits.family,
        "solved_fraction": s.solved_fraction,
        "unsolvable_fraction": s.unsolvable_fraction,
        "difficulty": list(s.difficulty),
        "train_prompts": kinds,
        "held_out_prompts": len(splits.held_out),
    }
    defaults = Structure()
    for key in ("constants", "unsolvable", "difficulty_shares", "budget", "held_out"):
        if getattr(s, key) != getattr(defaults, key):
            value = getattr(s, key)
            out[key] = list(value) if isinstance(value, tuple) else value
    if s.held_out == "tags":
        out["held_out_tags"] = s.held_out_tags
    if s.shares() is not None:
        out["learnable_per_level"] = {
            str(d): sum(1 for p in splits.train if p.kind == "learnable" and p.difficulty == d) for d in s.levels()
        }
    return out
