"""One step's stages under ``mechanism: pilot``: screen prompts with a few rollouts, then commit the rest to some.

A screening stage rolls each of ``prompts`` x (groups still lacking) new prompts out ``rollouts`` times; the
mechanism's group scorer and selector admit the prompts whose pilot rewards carry signal. Screening repeats
while too few are admitted, within ``max_stages`` (the commit included) and ``max_screened``; then the commit
stage tops the first ``groups`` admitted prompts (screening order) up to ``rollout_n`` rollouts, under the
uid of their pilot rollouts. ``keep: true`` trains the pilot rollouts in the group (``rollout_n - rollouts``
are generated in the commit); ``keep: false`` uses them for screening only (``rollout_n`` generated in the
commit). Keeping them biases the trained group towards mixed outcomes: it was admitted *because* its first
rollouts differed, so its measured reward variance overstates the prompt's; screening only trains rollouts
drawn after the decision, whose outcomes are unbiased given the prompt.

Short-step policy (``on_short``): too few admitted after the caps, ``raise`` stops the step naming the caps;
``backfill`` commits screened prompts without signal, in screening order, to fill the batch. The batch is
never trained smaller. Admitted prompts beyond ``groups`` are the surplus (their pilot rollouts are not
trained). A prompt not admitted is *evicted* (too easy: mean pilot reward above 0.5, for rewards in [0, 1])
or *deferred* (too hard: the rest).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from ...errors import ConfigError, InvalidOutputError
from ...groups import segment_count
from ...normalize import response_token_mask
from ...precomputed import masked_row_reduce
from ...step.result import PREFIX
from ...step.seams import StageRequests, StepStages
from ..curriculum import REWARD_FIELD
from ..filter.rounds import RoundPrompts
from .settings import PilotSettings

#: The prefix of the pilot's metrics.
PILOT_PREFIX = f"{PREFIX}pilot/"
#: A prompt without signal whose mean pilot reward is above this is too easy (evicted), else too hard (deferred).
EASY_ABOVE = 0.5

_LONG = torch.long
logger = logging.getLogger("dataflex_core.step")


def per_uid_counts(uid: torch.Tensor, asked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(counts, known)``: rows of each ``asked`` uid (ascending, as every stage asks them) and which rows
    carry one of them; one sort-free pass, for batches of thousands of rows."""
    at = torch.searchsorted(asked, uid).clamp(max=max(len(asked) - 1, 0))
    known = (asked[at] == uid) if len(asked) else torch.zeros(len(uid), dtype=torch.bool)
    return torch.bincount(at[known], minlength=len(asked)).to(_LONG), known


def stage_rewards(batch: Any) -> torch.Tensor:
    """Each row's outcome reward (``rm_scores`` over its response tokens, float64 ``(bs,)``), summed in float64
    block by block, without a float64 copy of the scores: the screening stage's one pass over its tokens."""
    scores = batch.batch.get(REWARD_FIELD)
    if scores is None:
        raise ConfigError(
            f"mechanism pilot admits prompts by their pilot rewards, but the batch has no {REWARD_FIELD!r}: a host of "
            "the staged_generation seam hands observe() each stage's rows with their reward scores"
        )
    return masked_row_reduce(scores, response_token_mask(batch), 0.0, lambda b: b.sum(-1, dtype=torch.float64)).cpu()


def screened_prompts(
    asked: torch.Tensor,
    admitted: torch.Tensor,
    index: torch.Tensor,
    groups: int,
    valid: torch.Tensor,
    rewards: torch.Tensor,
    row_uid: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(admitted, mean pilot reward)`` of each ``asked`` uid (request order), from the per-group admission
    (``admitted``, groups in ``index``'s order) and each row's reward, validity and uid; no loop over groups."""
    total = torch.zeros(groups, dtype=torch.float64).index_add_(0, index, torch.where(valid, rewards, 0))
    mean = total / segment_count(index, groups, valid).clamp(min=1)
    group_uid = torch.full((groups,), -1, dtype=_LONG).scatter_(0, index, row_uid)
    order = torch.argsort(group_uid)
    at = order[torch.searchsorted(group_uid[order], asked).clamp(max=max(groups - 1, 0))]
    assert bool((group_uid[at] == asked).all())  # check_generated: every requested prompt has rows
    return admitted[at], mean[at].to(torch.float64)


def screening_cap(settings: PilotSettings, population: int, batch_size: int) -> int:
    """The prompts one step screens at most over a dataset of ``population`` rows and batches of ``batch_size``
    prompts: ``max_screened``, or ``prompts`` x batch x screening stages capped at the dataset's rows (a warning).

    :raises ConfigError: the first screening stage alone (``prompts`` x batch) or ``max_screened`` asks for more
        prompts than the dataset holds, naming the product: a step would screen without end or repeat its prompts.
    """
    first = settings.prompts * batch_size
    if first > population:
        raise ConfigError(
            f"dataflex.pilot.prompts={settings.prompts} x the batch's {batch_size} prompts = {first} prompts in the "
            f"first screening stage alone, more than the train dataset's {population} rows; set pilot.prompts to at "
            f"most {max(population // max(batch_size, 1), 1)} (2-4 is typical)"
        )
    if settings.max_screened is not None:
        if settings.max_screened > population:
            raise ConfigError(
                f"dataflex.pilot.max_screened={settings.max_screened} is more than the train dataset's {population} "
                f"rows; set it to at most {population}, or unset it"
            )
        return settings.max_screened
    product = first * (settings.max_stages - 1)
    if product > population:
        logger.warning(
            "dataflex.pilot: prompts=%d x the batch's %d prompts x %d screening stages = %d prompts a step may "
            "screen, more than the train dataset's %d rows; a step screens at most %d (set pilot.max_screened)",
            settings.prompts, batch_size, settings.max_stages - 1, product, population, population,
        )  # fmt: skip
        return population
    return product


class PilotStages(StepStages):
    """One step's stages: what each asked for, what it generated, which prompts were admitted and committed.

    :param groups: groups of the trained batch; :param rollout_n: rollouts per trained group.
    :param draw: one prompt batch of dataset rows from the active sampler (``next_block``).
    :param drawn: rows the host's dataloader already drew for the step (screened first).
    """

    def __init__(
        self,
        groups: int,
        rollout_n: int,
        settings: PilotSettings,
        draw: Callable[[], list[int]],
        drawn: torch.Tensor | None = None,
    ) -> None:
        self.groups, self.rollout_n, self.settings, self._draw = int(groups), int(rollout_n), settings, draw
        self._drawn = [] if drawn is None else [int(i) for i in torch.as_tensor(drawn).flatten().tolist()]
        cap = settings.max_screened
        self.max_screened = settings.prompts * self.groups * (settings.max_stages - 1) if cap is None else cap
        #: Per stage: its requests, whether it screened, each handed row's uid (-1: padding) and response tokens.
        self.requests: list[StageRequests] = []
        self.screening: list[bool] = []
        self.row_uid: list[torch.Tensor] = []
        self.row_tokens: list[torch.Tensor] = []
        #: Per screened prompt (uid = its position): dataset row, admitted, mean pilot reward.
        self.prompt = torch.zeros(0, dtype=_LONG)
        self.admitted = torch.zeros(0, dtype=torch.bool)
        self.mean_reward = torch.zeros(0, dtype=torch.float64)
        #: The uids the commit stage trains (set when it is decided) and how many of them were backfilled.
        self.committed: torch.Tensor | None = None
        self.backfilled = 0
        #: Per stage: its valid responses for the ledger, ``group`` the uid (``None`` without a ledger).
        self.ledger_prompts: list[RoundPrompts | None] = []
        self._pending = False
        self._done = False
        #: The uids :meth:`check_generated` last returned (so :meth:`record` does not check them twice).
        self._checked: torch.Tensor | None = None

    # -- what the host reads --------------------------------------------------------------------------
    @property
    def stages(self) -> int:
        return len(self.requests)

    @property
    def admitted_prompts(self) -> int:
        return int(self.admitted.sum())

    def next(self) -> StageRequests | None:
        if self._pending:
            raise RuntimeError("mechanism pilot: hand the last stage's rollouts to seam.observe before asking next()")
        if self._done:
            return None
        screened = len(self.prompt)
        lacking = self.groups - self.admitted_prompts
        may_screen = self.stages < self.settings.max_stages - 1 and screened < self.max_screened
        if lacking > 0 and may_screen:
            return self._ask(self._screening(min(self.settings.prompts * lacking, self.max_screened - screened)), True)
        return self._commit()

    def trained(self) -> list[torch.Tensor]:
        if not self._done or self.committed is None:
            raise RuntimeError("mechanism pilot: the step's stages are not all generated (next() is not None yet)")
        out = []
        for uid, screening in zip(self.row_uid, self.screening):
            kept = torch.isin(uid, self.committed) if (self.settings.keep or not screening) else torch.zeros_like(uid)
            out.append((kept.bool() & (uid >= 0)).nonzero().flatten())
        return out

    # -- the stages -------------------------------------------------------------------------------------
    def _ask(self, requests: StageRequests, screening: bool) -> StageRequests:
        self.requests.append(requests)
        self.screening.append(screening)
        self._pending = True
        return requests

    def _screening(self, count: int) -> StageRequests:
        rows = self._drawn[:count]
        self._drawn = self._drawn[count:]
        while len(rows) < count:  # whole prompt batches from the sampler; what a stage does not screen is skipped
            rows += list(self._draw())[: count - len(rows)]
        first = len(self.prompt)
        prompts = torch.tensor(rows, dtype=_LONG)
        self.prompt = torch.cat([self.prompt, prompts])
        uids = torch.arange(first, first + count, dtype=_LONG)
        return StageRequests(prompts, torch.full((count,), self.settings.rollouts, dtype=_LONG), uids)

    def _commit(self) -> StageRequests | None:
        chosen = self.admitted.nonzero().flatten()[: self.groups]
        short = self.groups - len(chosen)
        if short > 0:
            if self.settings.on_short == "raise":
                raise InvalidOutputError(
                    f"mechanism pilot admitted {len(chosen)} of the {self.groups} prompts the batch needs after "
                    f"screening {len(self.prompt)} in {self.stages} stage(s) (dataflex.pilot.max_stages="
                    f"{self.settings.max_stages}, max_screened={self.max_screened}); raise them, widen the "
                    "selector's band, or set dataflex.pilot.on_short=backfill to commit prompts without signal"
                )
            extra = (~self.admitted).nonzero().flatten()[:short]
            if len(extra) < short:
                raise InvalidOutputError(
                    f"mechanism pilot screened {len(self.prompt)} prompts, fewer than the {self.groups} the batch "
                    "needs; raise dataflex.pilot.max_screened to at least the batch's prompts"
                )
            self.backfilled = len(extra)
            chosen = torch.sort(torch.cat([chosen, extra])).values
        self.committed = chosen
        top_up = self.rollout_n - (self.settings.rollouts if self.settings.keep else 0)
        if top_up == 0:  # the pilot rollouts are the whole groups
            self._done = True
            return None
        return self._ask(
            StageRequests(self.prompt[chosen], torch.full((len(chosen),), top_up, dtype=_LONG), chosen), False
        )

    # -- what the seam records ------------------------------------------------------------------------------
    def check_generated(self, uid: torch.Tensor) -> torch.Tensor:
        """Each handed row's uid (-1: padding) as int64, after checking they are exactly the last stage's requests.

        :raises InvalidOutputError: the host did not generate what the stage asked for.
        """
        if not self._pending:
            raise RuntimeError("mechanism pilot: observe() without a stage asked for (call stages.next() first)")
        asked = self.requests[-1]
        uid = torch.as_tensor(uid, dtype=_LONG).flatten()
        got, known = per_uid_counts(uid[uid >= 0], asked.uids)
        stray = int((~known).sum())
        if stray or not torch.equal(got, asked.counts):
            wrong = (got != asked.counts).nonzero().flatten()[:3].tolist()
            raise InvalidOutputError(
                f"stage {self.stages} of mechanism pilot asked for {asked.counts.tolist()} rollouts of uids "
                f"{asked.uids.tolist()}, but the host generated {got.tolist()} (first differing positions {wrong}, "
                f"{stray} row(s) of other uids): a host of the staged_generation seam generates exactly the requests"
            )
        self._checked = uid
        return uid

    def record(
        self,
        uid: torch.Tensor,
        tokens: torch.Tensor,
        admitted: torch.Tensor | None = None,
        mean_reward: torch.Tensor | None = None,
    ) -> None:
        """One stage's rows (each row's uid, -1 for padding; response tokens) and, for a screening stage, each
        requested prompt's admission and mean pilot reward (in request order), checked by :meth:`check_generated`."""
        uid = uid if uid is self._checked else self.check_generated(uid)
        self._checked = None
        self.row_uid.append(uid)
        self.row_tokens.append(torch.as_tensor(tokens, dtype=_LONG).flatten())
        if self.screening[-1]:
            assert admitted is not None and mean_reward is not None
            first = len(self.admitted)
            self.admitted = torch.cat([self.admitted, admitted.to(torch.bool).cpu()])
            self.mean_reward = torch.cat([self.mean_reward, mean_reward.to(torch.float64).cpu()])
            assert len(self.admitted) == first + len(self.requests[-1].uids)
        else:
            self._done = True
        self._pending = False

    # -- what the step logs -------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """The compute counts of the generated rows outside the trained batch (evicted, surplus, screening only)."""
        out_rollouts = out_tokens = 0
        for uid, tokens, keep in zip(self.row_uid, self.row_tokens, self.trained()):
            out = uid >= 0
            out[keep] = False
            out_rollouts += int(out.sum())
            out_tokens += int(tokens[out].sum())
        screening = sum(self.screening)
        return {
            "evicted_rollouts": out_rollouts,
            "evicted_tokens": out_tokens,
            "generation_rounds": self.stages,
            "refills": max(screening - 1, 0),
        }

    def metrics(self) -> dict[str, float]:
        assert self.committed is not None
        pilot = sum(int((u >= 0).sum()) for u, s in zip(self.row_uid, self.screening) if s)
        commit = sum(int((u >= 0).sum()) for u, s in zip(self.row_uid, self.screening) if not s)
        silent = ~self.admitted
        easy = silent & (self.mean_reward > EASY_ABOVE)
        trained_groups = len(self.committed)
        return {
            f"{PILOT_PREFIX}screened_prompts": float(len(self.prompt)),
            f"{PILOT_PREFIX}admitted_prompts": float(self.admitted_prompts),
            f"{PILOT_PREFIX}evicted_prompts": float(easy.sum()),
            f"{PILOT_PREFIX}deferred_prompts": float((silent & ~easy).sum()),
            f"{PILOT_PREFIX}surplus_prompts": float(max(self.admitted_prompts - (trained_groups - self.backfilled), 0)),
            f"{PILOT_PREFIX}backfilled_prompts": float(self.backfilled),
            f"{PILOT_PREFIX}pilot_rollouts": float(pilot),
            f"{PILOT_PREFIX}commit_rollouts": float(commit),
            f"{PILOT_PREFIX}stages": float(self.stages),
            f"{PILOT_PREFIX}rollouts_per_trained_group": (pilot + commit) / max(trained_groups, 1),
        }
