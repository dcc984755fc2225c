"""``greso_adaptive``: GRESO as published, with its easy and hard skip probabilities adapted toward a target.

GRESO (Zheng et al., "Act Only When It Pays", arXiv 2506.02177; reference code
``Infini-AI-Lab/GRESO`` at ``b277843``) skips a prompt before rollout when its
latest visits gave no GRPO signal. What it does, read from that code (each part
with its file and lines: ``docs/rollout-budget.md``, section GRESO), and what
this component keeps of it:

- **Two streaks.** A prompt is *easy* on a visit when every response succeeded
  and *hard* when none did; ``z_easy`` and ``z_hard`` count its latest visits in
  a row of each kind (at most one of them is positive: the last visit decides).
- **The skip rule.** A candidate with ``z > 0`` is skipped with probability
  ``1 - max(p ** z, min_keep)``, ``p`` the easy or the hard probability by its
  streak's kind; a prompt never seen, or whose last visit had signal, is never
  skipped. The decision is a uniform keyed by ``(seed, step, row)``, so a
  prompt's fate does not depend on which other prompts are candidates and a
  resume draws the same.
- **The controller.** After every step (after ``adapt_after_step``) the step's
  share of easy prompts is compared with ``target_easy`` (default
  ``target_zero_variance / 3``) and of hard ones with ``target_hard`` (default
  ``target_zero_variance * 2 / 3``: more exploration of hard prompts): at or
  above its target a probability moves down by ``adapt_step`` (skip more),
  below it up, clamped to ``[min_exploration, max_exploration]``.
  ``target_zero_variance: null`` keeps both fixed.
- **The sampling batch size.** :meth:`GresoAdaptive.next_draw_size` is the
  reference's size of a step's next generation round: the rollouts still
  missing over the last round's share of groups with signal, per prompt, with a
  margin, capped by the default size and floored by ``min_draw``. ``filter``
  draws its refill rounds at this size (``filter.draw``), ``pilot`` its
  screening stages after a step's first (``pilot.draw``). The reference's "last round" flag is not kept: a step still
  short goes on to ``max_rounds``, then ``on_short``.

The defaults are the paper's scripts (``p_easy = p_hard = 0.5``, target 0.25,
split 1/3 easy and 2/3 hard, step 0.01 in ``[0.05, 0.95]``, keep floor 0.01,
margin 1.25, floor 64). ``greso`` (:mod:`dataflex_curriculum.greso`) stays the
one fixed probability on the ledger's ``uniform_reward_streak``.

The scores: 0 for a kept candidate, :data:`SKIPPED_SCORE` for a skipped one,
so the ``temperature`` sampler at ``temperature: 1, exploration: 0`` draws the
batch uniformly from the prompts not skipped (the reference walks its shuffled
dataloader past the skipped ones). When every candidate is skipped the scores
are equal and the draw is uniform over all of them. The state (both
probabilities and both streak columns) travels with the checkpoints and is
checked field by field on resume.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dataflex_core import Scorer, register_scorer
from dataflex_core.state_fields import StateFieldError, field

from .checks import number
from .counter_beta import CounterStreams, stream_base
from .greso import keep_probability
from .prompt_table import PromptTable, prompt_indices

#: The score of a skipped candidate: far enough below 0 that ``softmax`` at temperature 1 gives it exactly 0.
SKIPPED_SCORE = -1.0e4
#: The counter of the skip uniforms in the ``(seed, step)`` streams (:mod:`dataflex_curriculum.counter_beta`).
SKIP_COUNTER = 0
_STREAKS = ("easy_streak", "hard_streak")


def _whole(owner: str, name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{owner}: {name} must be an integer >= {low}, got {value!r}")
    return value


@register_scorer("greso_adaptive")
class GresoAdaptive(Scorer):
    """GRESO's skip rule with separate easy / hard probabilities, their controller and the sampling batch size.

    :param exploration_easy: initial ``p_easy`` in ``(0, 1]`` (default 0.5).
    :param exploration_hard: initial ``p_hard`` in ``(0, 1]`` (default 0.5).
    :param min_keep: the floor of the keep probability, in ``(0, 1]`` (default 0.01).
    :param target_zero_variance: the share of zero-variance prompts a step aims at, in ``[0, 1]``; ``None``: the
        probabilities stay fixed, whatever the targets below (default 0.25).
    :param target_easy: the easy prompts' share aimed at, in ``[0, 1]``; ``None``: ``target_zero_variance / 3``.
    :param target_hard: the hard prompts' share aimed at, in ``[0, 1]``; ``None``: ``target_zero_variance * 2 / 3``.
    :param adapt_step: how far the controller moves a probability per step, in ``[0, 1]`` (default 0.01).
    :param min_exploration: the controller's lower clamp, in ``(0, 1]`` (default 0.05).
    :param max_exploration: its upper clamp, in ``[min_exploration, 1]`` (default 0.95).
    :param adapt_after_step: the controller moves the probabilities only on steps after this one (default 0; the
        reference waits for its second epoch: set your steps per epoch to match it).
    :param draw_margin: the sampling batch's margin over the estimate, ``>= 1`` (default 1.25).
    :param min_draw: the fewest prompts a sized round draws, at most the batch's (default 64).
    :param seed: seed of the skip draws (each step draws with ``(seed, step_id)``).
    """

    timing = "pre_rollout"
    granularity = "prompt"
    requires = ["prompt_index"]

    def __init__(
        self,
        exploration_easy: float = 0.5,
        exploration_hard: float = 0.5,
        min_keep: float = 0.01,
        target_zero_variance: float | None = 0.25,
        target_easy: float | None = None,
        target_hard: float | None = None,
        adapt_step: float = 0.01,
        min_exploration: float = 0.05,
        max_exploration: float = 0.95,
        adapt_after_step: int = 0,
        draw_margin: float = 1.25,
        min_draw: int = 64,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        owner = "greso_adaptive"
        self.exploration_easy = number(owner, "exploration_easy", exploration_easy, 0.0, 1.0, low_open=True)
        self.exploration_hard = number(owner, "exploration_hard", exploration_hard, 0.0, 1.0, low_open=True)
        self.min_keep = number(owner, "min_keep", min_keep, 0.0, 1.0, low_open=True)
        self.target_zero_variance = (
            None if target_zero_variance is None else number(owner, "target_zero_variance", target_zero_variance, 0, 1)
        )
        target = self.target_zero_variance
        # the reference's split, computed as it computes it (t / 3, t * 2 / 3): the same floats at the boundary
        self.target_easy = (
            number(owner, "target_easy", target_easy, 0, 1) if target_easy is not None else _split(target, 1)
        )
        self.target_hard = (
            number(owner, "target_hard", target_hard, 0, 1) if target_hard is not None else _split(target, 2)
        )
        self.adapt_step = number(owner, "adapt_step", adapt_step, 0.0, 1.0)
        self.min_exploration = number(owner, "min_exploration", min_exploration, 0.0, 1.0, low_open=True)
        self.max_exploration = number(owner, "max_exploration", max_exploration, self.min_exploration, 1.0)
        self.adapt_after_step = _whole(owner, "adapt_after_step", adapt_after_step, 0)
        self.draw_margin = number(owner, "draw_margin", draw_margin, 1.0, float("inf"))
        self.min_draw = _whole(owner, "min_draw", min_draw, 1)
        self.seed = _whole(owner, "seed", seed, 0)
        #: The probabilities the controller moves (the state; the params above are their starting values).
        self.p_easy = self.exploration_easy
        self.p_hard = self.exploration_hard
        self.table = PromptTable({name: 0.0 for name in _STREAKS})

    # -- before rollout: which candidates are skipped ----------------------------------------------------
    def keep(self, index: torch.Tensor) -> torch.Tensor:
        """Each prompt's keep probability (float64): ``max(p ** z, min_keep)`` by its streak, 1 without one."""
        easy, hard = (self.table.get(name, index) for name in _STREAKS)
        keep = torch.ones(index.shape, dtype=torch.float64)
        on_easy, on_hard = easy > 0, hard > 0
        keep[on_easy] = keep_probability(self.p_easy, easy[on_easy], self.min_keep)
        keep[on_hard] = keep_probability(self.p_hard, hard[on_hard], self.min_keep)
        return keep

    def skipped(self, index: torch.Tensor, step_id: int) -> torch.Tensor:
        """Bool per prompt: skipped at step ``step_id`` (its keyed uniform below ``1 - keep``)."""
        if not index.numel():
            return torch.zeros(0, dtype=torch.bool)
        streams = CounterStreams.of_rows(stream_base(self.seed, int(step_id)), index.numpy().astype(np.int64))
        uniform = torch.from_numpy(streams.uniform(SKIP_COUNTER))
        return uniform < 1.0 - self.keep(index)

    def score(self, batch: Any, step_id: int, **ctx: Any) -> torch.Tensor:
        index = prompt_indices(batch, "greso_adaptive")
        scores = torch.where(self.skipped(index, step_id), SKIPPED_SCORE, 0.0).to(torch.float32)
        return scores.to(batch.batch["prompt_index"].device)

    # -- after the step: streaks and the controller ------------------------------------------------------
    def observe(self, outcomes: Any, step_id: int, **ctx: Any) -> None:
        index = prompt_indices(outcomes, "greso_adaptive")
        rollouts = outcomes.batch["rollouts"].detach().to("cpu", torch.float64)
        successes = outcomes.batch["successes"].detach().to("cpu", torch.float64)
        seen = rollouts > 0
        index, rollouts, successes = index[seen], rollouts[seen], successes[seen]
        if not index.numel():
            return
        easy, hard = successes >= rollouts, successes <= 0
        for name, now in zip(_STREAKS, (easy, hard)):
            streak = self.table.get(name, index)
            self.table.set(name, index, torch.where(now, streak + 1, torch.zeros_like(streak)))
        self.table.visit(index)
        if self.target_zero_variance is not None and int(step_id) > self.adapt_after_step:
            prompts = len(index)
            self.p_easy = self._moved(self.p_easy, int(easy.sum()) / prompts, self.target_easy)
            self.p_hard = self._moved(self.p_hard, int(hard.sum()) / prompts, self.target_hard)

    def _moved(self, p: float, share: float, target: float) -> float:
        """At or above the target: skip more (``p`` down a step); below: skip less; within the clamps."""
        if share >= target:
            return max(p - self.adapt_step, self.min_exploration)
        return min(p + self.adapt_step, self.max_exploration)

    # -- the sampling batch size ---------------------------------------------------------------------------
    def next_draw_size(
        self, *, missing_groups: int, zero_variance_groups: int, groups: int, rollout_n: int, default_size: int
    ) -> int:
        """The prompts of a step's next refill round (``filter.draw`` reads it after each short round; ``pilot.draw``
        after each screening stage, ``zero_variance_groups`` then the screened prompts it did not admit).

        ``int(missing_groups * rollout_n / (1 - share) / rollout_n * draw_margin)``, ``share`` the last round's
        zero-variance groups over its ``groups``, capped by ``default_size`` and floored by ``min_draw`` (itself
        capped by ``default_size``). A round without a group with signal (share 1) gives no estimate: the default
        size (the reference divides by zero).
        """
        # the share rounded to float32, as the reference's metric is: the same sizes at the integer boundaries
        share = float(np.float32(zero_variance_groups) / np.float32(groups)) if groups else 1.0
        if share >= 1.0:
            return int(default_size)
        estimate = int(missing_groups * rollout_n / (1.0 - share) / rollout_n * self.draw_margin)
        return max(min(estimate, int(default_size)), min(self.min_draw, int(default_size)))

    # -- checkpoint state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"p_easy": self.p_easy, "p_hard": self.p_hard, **self.table.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take :meth:`state_dict`, each field checked: both probabilities in ``(0, 1]``, each streak column a 1-D
        float64 tensor of whole numbers >= 0 (no prompt on both streaks), the visit counts int64 >= 0, all one
        length."""
        p_easy, p_hard = (_probability(state, name) for name in ("p_easy", "p_hard"))
        columns = field(state, "columns")
        if not isinstance(columns, dict) or set(columns) != set(_STREAKS):
            raise StateFieldError("columns", columns, f"a dict of the columns {list(_STREAKS)}")
        visits = field(state, "visits")
        if not isinstance(visits, torch.Tensor) or visits.dtype != torch.long or visits.dim() != 1:
            raise StateFieldError("visits", visits, "a 1-D int64 tensor, one count per prompt")
        if bool((visits < 0).any()):
            raise StateFieldError("visits", int(visits.min()), "visit counts are never negative")
        for name in _STREAKS:
            streak = columns[name]
            if not isinstance(streak, torch.Tensor) or streak.dtype != torch.float64 or streak.shape != visits.shape:
                raise StateFieldError(f"columns.{name}", streak, f"a float64 tensor of shape {tuple(visits.shape)}")
            bad = (streak < 0) | (streak != streak.round()) | (streak > visits)
            if bool(bad.any()):
                raise StateFieldError(
                    f"columns.{name}", float(streak[bad][0]), "a whole number of visits in [0, the prompt's visits]"
                )
        both = (columns["easy_streak"] > 0) & (columns["hard_streak"] > 0)
        if bool(both.any()):
            row = int(both.nonzero()[0])
            raise StateFieldError("columns", f"row {row}", "a prompt's last visit was easy or hard, not both")
        self.p_easy, self.p_hard = p_easy, p_hard
        self.table.load_state_dict({"columns": columns, "visits": visits})


def _split(target: float | None, thirds: int) -> float | None:
    """``thirds`` thirds of ``target`` (``None`` stays ``None``)."""
    return None if target is None else target * thirds / 3


def _probability(state: dict[str, Any], name: str) -> float:
    value = field(state, name)
    if isinstance(value, bool) or not isinstance(value, float) or not 0.0 < value <= 1.0:
        raise StateFieldError(name, value, "a probability in (0, 1] (a float)")
    return value
