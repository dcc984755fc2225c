"""A toy verifiable task for the CPU demos and tests of every host: echo the letter of the prompt.

A prompt is one letter. The reward looks at the response's first
:data:`SCORED_CHARS` characters: half of it for answering in letters of the
task, half for repeating the prompt's letter (:func:`score`). A tiny random
model starts near 0.25; under GRPO it learns the format within a few steps
and the echo more slowly: a curve that visibly rises in a few dozen steps on
a CPU. That is all a toy run is for: it shows the mechanics and a direction,
not a benchmark result.

Each prompt has a domain (``vowel`` / ``consonant``) for ``mechanism: mix``.
Framework-free on purpose: each host renders the letters in its own dataset
layout (verl's RLHF parquet rows, TRL's plain-string prompts) and calls
:func:`score` from its reward function.

For ``mechanism: curriculum`` there is a mixed-difficulty variant
(:func:`mixed_prompts`): half the prompts are the echo prompts above, a
quarter are already *solved* (every response gets reward 1) and a quarter
are *unsolvable* (every response gets 0). Those stand for the prompts of a
real dataset that are too easy or too hard for the current policy: their
GRPO groups all agree, so their advantages are zero and their rollouts teach
nothing. Uniform sampling spends half its rollouts on them; a curriculum can
learn to skip them. Echo prompts score exactly as in the plain task.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: The letters prompts ask for, by domain.
DOMAINS = {"vowel": "ae", "consonant": "bcdfgh"}
#: Every letter a prompt can ask for.
LETTERS = "".join(DOMAINS.values())
#: How many leading response characters the reward looks at.
SCORED_CHARS = 4
#: Answers (ground truths) of the mixed variant's constant prompts, and the reward every response gets.
CONSTANT_REWARDS = {"solved": 1.0, "unsolvable": 0.0}
#: Kinds of prompt of the mixed-difficulty variant, with their shares.
MIXED_KINDS = {"echo": 0.5, "solved": 0.25, "unsolvable": 0.25}


def score(response: str, letter: str) -> float:
    """Half for answering in letters, half for the right letter, over the first :data:`SCORED_CHARS` characters.

    ``format`` is the share of those characters that are letters of the task, ``echo`` the share equal to
    ``letter``; the score is their mean, in ``[0, 1]``. The format half is learnt within a few steps (it does
    not depend on the prompt), the echo half only by reading the prompt. With the echo half alone, a tiny
    model learns too slowly and unstably to show a rising curve in 30 steps (measured in verl's loop).
    """
    if letter in CONSTANT_REWARDS:  # the mixed variant's solved / unsolvable prompts
        return CONSTANT_REWARDS[letter]
    head = response[:SCORED_CHARS]
    letters = sum(1 for char in head if char in LETTERS)
    echoed = sum(1 for char in head if char == letter)
    return (letters + echoed) / (2 * SCORED_CHARS)


def prompts(count: int, seed: int, domain_share: dict[str, float] | None = None) -> list[tuple[str, str]]:
    """``count`` ``(letter, domain)`` pairs in a seeded random order; domains split by ``domain_share``
    (default: equal)."""
    share = domain_share or {name: 1 / len(DOMAINS) for name in DOMAINS}
    unknown = sorted(set(share) - set(DOMAINS))
    if unknown:
        raise ValueError(f"domain_share names unknown domain(s) {unknown}; the domains are {list(DOMAINS)}")
    rng = random.Random(seed)
    names = list(DOMAINS)
    counts = [round(count * share.get(name, 0.0)) for name in names]
    counts[-1] = count - sum(counts[:-1])
    out = [(rng.choice(DOMAINS[name]), name) for name, n in zip(names, counts) for _ in range(n)]
    rng.shuffle(out)
    return out


@dataclass(frozen=True)
class ToyPrompt:
    """One prompt of the mixed-difficulty variant: what the model reads, the answer :func:`score` gets."""

    text: str
    answer: str
    domain: str
    #: ``echo``, ``solved`` or ``unsolvable`` (:data:`MIXED_KINDS`).
    kind: str


def mixed_prompts(count: int, seed: int) -> list[ToyPrompt]:
    """``count`` prompts of the mixed-difficulty variant in a seeded random order, kinds split by
    :data:`MIXED_KINDS`.

    Echo prompts are one letter answered by echoing it (as :func:`prompts`); a solved prompt reads
    ``"<letter>:"`` and an unsolvable one ``":<letter>"``, with the answers ``solved`` / ``unsolvable``.
    """
    rng = random.Random(seed)
    kinds = list(MIXED_KINDS)
    counts = [round(count * MIXED_KINDS[kind]) for kind in kinds]
    counts[-1] = count - sum(counts[:-1])
    domains = list(DOMAINS)
    out = []
    for kind, n in zip(kinds, counts):
        for _ in range(n):
            domain = rng.choice(domains)
            letter = rng.choice(DOMAINS[domain])
            text = {"echo": letter, "solved": f"{letter}:", "unsolvable": f":{letter}"}[kind]
            out.append(ToyPrompt(text, letter if kind == "echo" else kind, domain, kind))
    rng.shuffle(out)
    return out
