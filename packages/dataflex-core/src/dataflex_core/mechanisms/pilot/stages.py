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
from .carry import SurvivorBuffer
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
    success_at: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(admitted, mean, std, solved)`` of each ``asked`` uid (request order): the per-group admission
    (``admitted``, groups in ``index``'s order), the mean and the (population) std of its valid pilot rewards, and
    whether every valid pilot succeeded (one at least), its reward at least ``success_at`` (the ledger's rule: its
    ``success_threshold``, else a whole success: a reward of 0.25 is a quarter of one); from each row's reward,
    validity and uid."""
    total = torch.zeros(groups, dtype=torch.float64).index_add_(0, index, torch.where(valid, rewards, 0))
    squares = torch.zeros(groups, dtype=torch.float64).index_add_(0, index, torch.where(valid, rewards * rewards, 0))
    scored = segment_count(index, groups, valid)
    members = scored.clamp(min=1)
    mean = total / members
    std = (squares / members - mean * mean).clamp(min=0).sqrt()
    failed = torch.zeros(groups, dtype=torch.long).index_add_(0, index, (valid & (rewards < success_at)).long())
    group_uid = torch.full((groups,), -1, dtype=_LONG).scatter_(0, index, row_uid)
    order = torch.argsort(group_uid)
    at = order[torch.searchsorted(group_uid[order], asked).clamp(max=max(groups - 1, 0))]
    assert bool((group_uid[at] == asked).all())  # check_generated: every requested prompt has rows
    return admitted[at], mean[at].to(torch.float64), std[at], (failed[at] == 0) & (scored[at] > 0)


def screening_rounds(settings: PilotSettings) -> int:
    """The stages of a step that may screen: every round with ``carry``, else all but the commit."""
    return settings.max_rounds if settings.carry is not None else settings.max_stages - 1


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
    product = first * screening_rounds(settings)
    if product > population:
        logger.warning(
            "dataflex.pilot: prompts=%d x the batch's %d prompts x %d screening stages = %d prompts a step may "
            "screen, more than the train dataset's %d rows; a step screens at most %d (set pilot.max_screened)",
            settings.prompts, batch_size, screening_rounds(settings), product, population, population,
        )  # fmt: skip
        return population
    return product


class PilotStages(StepStages):
    """One step's stages: what each asked for, what it generated, which prompts were admitted and committed.

    Without ``carry``: screening stages, then one commit stage. With ``carry`` (Pilot-Commit's rounds): each
    round explores ``prompts`` x ``groups`` fresh prompts and commits, in the same stage (``one_call``), the
    buffered prompts the batch still lacks; admitted prompts enter the buffer. A prompt explored in this step is
    topped up under its uid (its pilots trained under ``keep``); one explored on an earlier step (*carried*) is
    committed with a whole fresh group of ``rollout_n`` under a new uid: a host trains a step's rows only.

    :param groups: groups of the trained batch; :param rollout_n: rollouts per trained group.
    :param draw: one prompt batch of dataset rows from the active sampler (``next_block``).
    :param drawn: rows the host's dataloader already drew for the step (screened first).
    :param buffer: the survivor buffer (with ``carry``).
    :param evict: takes rows solved on every pilot out of later draws (``evict_solved``), how many it took. Applied
        when the next stage is asked for, on every process of a host that copies the main process's record after
        each observation (the rows are data here, the sampler each process's own), so every process draws alike.
    :param size: ``(missing=, zero=, groups=, default=, step_id=) -> prompts or None``: the size of a screening
        stage after the step's first, ``zero`` of the last one's ``groups`` not admitted (with ``pilot.draw``, the
        drawing scorer's ``next_draw_size``: GRESO's sizing from the last stage's share without signal); ``None``:
        ``prompts`` x the prompts lacking (with carry: x the batch). From the record, so the same on every process.
    """

    def __init__(
        self,
        groups: int,
        rollout_n: int,
        settings: PilotSettings,
        draw: Callable[[], list[int]],
        drawn: torch.Tensor | None = None,
        buffer: SurvivorBuffer | None = None,
        evict: Callable[[torch.Tensor], int] | None = None,
        size: Callable[..., int | None] | None = None,
    ) -> None:
        self.groups, self.rollout_n, self.settings, self._draw = int(groups), int(rollout_n), settings, draw
        self._evict, self._size = evict, size
        #: Per screening stage, its prompts solved on every pilot; the first ``evictions_applied`` are evicted.
        self.solved: list[torch.Tensor] = []
        self.evictions_applied = 0
        self._drawn = [] if drawn is None else [int(i) for i in torch.as_tensor(drawn).flatten().tolist()]
        self.buffer = buffer
        cap = settings.max_screened
        self.max_screened = settings.prompts * self.groups * screening_rounds(settings) if cap is None else cap
        #: Per stage: its requests, the uids it screens and commits, each handed row's uid (-1: padding) and tokens.
        self.requests: list[StageRequests] = []
        self.explored: list[torch.Tensor] = []
        self.topped: list[torch.Tensor] = []
        self.row_uid: list[torch.Tensor] = []
        self.row_tokens: list[torch.Tensor] = []
        #: Per uid (its position): dataset row, admitted, mean pilot reward, the step it was explored at when that
        #: was an earlier step (a carried commit; else -1).
        self.prompt = torch.zeros(0, dtype=_LONG)
        self.admitted = torch.zeros(0, dtype=torch.bool)
        self.mean_reward = torch.zeros(0, dtype=torch.float64)
        self.explored_at = torch.zeros(0, dtype=_LONG)
        #: The uids the step trains (set when it is decided) and how many of them were backfilled.
        self.committed: torch.Tensor | None = None
        self.backfilled = 0
        #: With carry: rounds so far, prompts the buffer evicted by age, rows evicted from sampling, the step.
        self.rounds = 0
        self.buffer_evicted = 0
        self.solved_evicted = 0
        self.step: int | None = None
        #: Per stage: its valid responses for the ledger, ``group`` the uid (``None`` without a ledger).
        self.ledger_prompts: list[RoundPrompts | None] = []
        self._queue: list[StageRequests] = []
        self._uid_of: dict[int, int] = {}  # with carry: a row admitted this step -> its uid
        self._pending = False
        self._done = False
        #: The uids :meth:`check_generated` last returned (so :meth:`record` does not check them twice).
        self._checked: torch.Tensor | None = None

    # -- what the host reads --------------------------------------------------------------------------
    @property
    def stages(self) -> int:
        return len(self.requests)

    @property
    def screening(self) -> list[bool]:
        """Per stage: it screens prompts (its pilots)."""
        return [len(e) > 0 for e in self.explored]

    @property
    def carried(self) -> torch.Tensor:
        """Per uid: a commit of a prompt explored on an earlier step."""
        return self.explored_at >= 0

    @property
    def admitted_prompts(self) -> int:
        return int(self.admitted.sum())

    def next(self) -> StageRequests | None:
        if self._pending:
            raise RuntimeError("mechanism pilot: hand the last stage's rollouts to seam.observe before asking next()")
        for rows in self.solved[self.evictions_applied :]:
            self.solved_evicted += self._evict(rows) if self._evict is not None else 0
        self.evictions_applied = len(self.solved)
        if self._queue:
            return self._ask(self._queue.pop(0))
        if self._done:
            return None
        if self.buffer is not None:
            return self._round()
        screened = len(self.prompt)
        lacking = self.groups - self.admitted_prompts
        may_screen = self.stages < self.settings.max_stages - 1 and screened < self.max_screened
        if lacking > 0 and may_screen:
            asked = self._screening(
                self._explore(lacking, self.settings.prompts * lacking, self.max_screened - screened)
            )
            return self._ask(asked, asked.uids)
        return self._commit()

    def trained_uids(self) -> list[torch.Tensor]:
        """Per stage, the uids whose rows of that stage are trained: its commits, and its pilots of committed
        prompts under ``keep``."""
        assert self.committed is not None
        none = torch.zeros(0, dtype=_LONG)
        pilots = [e[torch.isin(e, self.committed)] if self.settings.keep else none for e in self.explored]
        return [torch.cat([p, t]) for p, t in zip(pilots, self.topped)]

    def trained(self) -> list[torch.Tensor]:
        if not self._done or self.committed is None:
            raise RuntimeError("mechanism pilot: the step's stages are not all generated (next() is not None yet)")
        return [
            (torch.isin(uid, kept) & (uid >= 0)).nonzero().flatten()
            for uid, kept in zip(self.row_uid, self.trained_uids())
        ]

    # -- the stages -------------------------------------------------------------------------------------
    def _ask(self, requests: StageRequests, explored: torch.Tensor | None = None) -> StageRequests:
        """Record a stage; ``explored``: the uids it screens (default: those asked for the first time, not carried)."""
        uids = requests.uids
        if explored is None:
            asked = torch.cat([r.uids for r in self.requests]) if self.requests else torch.zeros(0, dtype=_LONG)
            explored = uids[~torch.isin(uids, asked) & ~self.carried[uids]]
        self.requests.append(requests)
        self.explored.append(explored)
        self.topped.append(uids[~torch.isin(uids, explored)])
        self._pending = True
        return requests

    def _new_uids(self, rows: list[int] | torch.Tensor, explored_at: torch.Tensor | None = None) -> torch.Tensor:
        first = len(self.prompt)
        rows = torch.as_tensor(rows, dtype=_LONG)
        self.prompt = torch.cat([self.prompt, rows])
        at = torch.full((len(rows),), -1, dtype=_LONG) if explored_at is None else explored_at
        self.explored_at = torch.cat([self.explored_at, at])
        return torch.arange(first, first + len(rows), dtype=_LONG)

    def _screening(self, count: int) -> StageRequests:
        rows = self._drawn[:count]
        self._drawn = self._drawn[count:]
        held = set(rows)
        while len(rows) < count:  # whole prompt batches from the sampler; what a stage does not screen is skipped,
            fresh = [row for row in self._draw() if row not in held]  # and so is a row the stage already screens
            rows += fresh[: count - len(rows)]
            held.update(fresh)
        uids = self._new_uids(rows)
        return StageRequests(self.prompt[uids], torch.full((count,), self.settings.rollouts, dtype=_LONG), uids)

    def _explore(self, lacking: int, default: int, room: int) -> int:
        """Prompts the next screening stage explores: ``default``, or after a screening stage of this step the
        ``size`` given the batch's ``lacking`` prompts and that stage's share not admitted; at most ``room``."""
        last = [explored for explored in self.explored if len(explored)]
        if self._size is not None and last:
            silent = int((~self.admitted[last[-1]]).sum())
            sized = self._size(
                missing=lacking, zero=silent, groups=len(last[-1]), default=default, step_id=self.step or 0
            )
            default = default if sized is None else sized
        return min(default, room)

    def _top_up(self) -> int:
        return self.rollout_n - (self.settings.rollouts if self.settings.keep else 0)

    def _short(self, chosen: torch.Tensor, stages: str) -> torch.Tensor:
        """``chosen`` completed by ``on_short``: raise, or backfill with screened prompts without signal."""
        short = self.groups - len(chosen)
        if self.settings.on_short == "raise":
            raise InvalidOutputError(
                f"mechanism pilot admitted {len(chosen)} of the {self.groups} prompts the batch needs after "
                f"screening {int((~self.carried).sum())} in {self.stages} stage(s) ({stages}, max_screened="
                f"{self.max_screened}); raise them, widen the selector's band, or set dataflex.pilot.on_short=backfill "
                "to commit prompts without signal"
            )
        screened = torch.arange(len(self.admitted))
        extra = screened[~self.admitted & ~self.carried[: len(self.admitted)]][:short]
        if len(extra) < short:
            raise InvalidOutputError(
                f"mechanism pilot screened {len(self.admitted)} prompts, fewer than the {self.groups} the batch "
                "needs; raise dataflex.pilot.max_screened to at least the batch's prompts"
            )
        self.backfilled = len(extra)
        return extra

    def _commit(self) -> StageRequests | None:
        chosen = self.admitted.nonzero().flatten()[: self.groups]
        if len(chosen) < self.groups:
            chosen = torch.sort(
                torch.cat([chosen, self._short(chosen, f"max_stages={self.settings.max_stages}")])
            ).values
        self.committed = chosen
        if self._top_up() == 0:  # the pilot rollouts are the whole groups
            self._done = True
            return None
        counts = torch.full((len(chosen),), self._top_up(), dtype=_LONG)
        return self._ask(StageRequests(self.prompt[chosen], counts, chosen), torch.zeros(0, dtype=_LONG))

    def _round(self) -> StageRequests | None:
        """With carry: the next round (its stages queued), or ``None`` once the batch is committed."""
        assert self.buffer is not None
        committed = torch.cat(self.topped) if self.topped else torch.zeros(0, dtype=_LONG)
        lacking = self.groups - len(committed)
        if lacking == 0:
            self.committed = torch.sort(committed).values
            self.buffer_evicted = self.buffer.flush(self.step if self.step is not None else 0)
            self._done = True
            return None
        room = self.max_screened - int((~self.carried).sum())
        if self.rounds == self.settings.max_rounds or not (room > 0 or len(self.buffer)):
            extra = self._short(committed, f"max_rounds={self.settings.max_rounds}")
            counts = torch.full((len(extra),), self._top_up(), dtype=_LONG)  # a commit stage, not a round
            return self._ask(StageRequests(self.prompt[extra], counts, extra), torch.zeros(0, dtype=_LONG))
        explore = self._explore(lacking, self.settings.prompts * self.groups, room) if room > 0 else 0
        self.rounds += 1
        rows, at = self.buffer.take(lacking)
        here = torch.tensor(
            [int(r) in self._uid_of and int(a) == self.step for r, a in zip(rows, at)], dtype=torch.bool
        )
        again = torch.tensor([self._uid_of[int(r)] for r in rows[here]], dtype=_LONG)
        fresh = self._screening(explore) if explore else None  # new uids in screening order (the host's rows first)
        carried = self._new_uids(rows[~here], at[~here])
        parts = [
            (again, self._top_up()), (carried, self.rollout_n),
            (torch.zeros(0, dtype=_LONG) if fresh is None else fresh.uids, self.settings.rollouts),
        ]  # fmt: skip
        uids = torch.cat([u for u, _ in parts])
        counts = torch.cat([torch.full((len(u),), c, dtype=_LONG) for u, c in parts])
        order = torch.argsort(uids)
        uids, counts = uids[order], counts[order]
        splits = [counts > -1] if self.settings.one_call else [counts == c for c in torch.unique(counts)]
        self._queue = [StageRequests(self.prompt[uids[m]], counts[m], uids[m]) for m in splits if bool(m.any())]
        return self._ask(self._queue.pop(0))

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
        std_reward: torch.Tensor | None = None,
        step: int | None = None,
    ) -> None:
        """One stage's rows (each row's uid, -1 for padding; response tokens) and, for a stage that screens, each
        screened prompt's admission, mean and std of pilot rewards (in ``explored`` order), checked by
        :meth:`check_generated`; with carry the admitted prompts enter the buffer, explored at ``step``."""
        uid = uid if uid is self._checked else self.check_generated(uid)
        self._checked = None
        self.step = self.step if step is None else int(step)
        self.row_uid.append(uid)
        self.row_tokens.append(torch.as_tensor(tokens, dtype=_LONG).flatten())
        explored = self.explored[-1]
        if len(explored):
            assert admitted is not None and mean_reward is not None and len(admitted) == len(explored)
            grown = len(self.prompt)
            self.admitted = torch.cat([self.admitted, torch.zeros(grown - len(self.admitted), dtype=torch.bool)])
            self.mean_reward = torch.cat([self.mean_reward, torch.zeros(grown - len(self.mean_reward))])
            self.admitted[explored] = admitted.to(torch.bool).cpu()
            self.mean_reward[explored] = mean_reward.to(torch.float64).cpu()
            if self.buffer is not None:
                chosen = explored[admitted.to(torch.bool).cpu()]
                assert std_reward is not None
                self.buffer.add(self.prompt[chosen], self.step or 0, std_reward.cpu()[admitted.to(torch.bool).cpu()])
                self._uid_of.update(zip(self.prompt[chosen].tolist(), chosen.tolist()))
        elif self.buffer is None:
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
        pilot = commit = 0
        for uid, explored in zip(self.row_uid, self.explored):
            screened = torch.isin(uid, explored)
            pilot += int(screened.sum())
            commit += int(((uid >= 0) & ~screened).sum())
        carried = self.carried[: len(self.admitted)]
        judged = ~carried if len(carried) else torch.zeros(0, dtype=torch.bool)
        silent = judged & ~self.admitted
        easy = silent & (self.mean_reward > EASY_ABOVE)
        trained_groups = len(self.committed)
        carried_in = int(self.carried[self.committed].sum())
        admitted_trained = trained_groups - self.backfilled - carried_in
        out = {
            f"{PILOT_PREFIX}screened_prompts": float(judged.sum()),
            f"{PILOT_PREFIX}admitted_prompts": float(self.admitted_prompts),
            f"{PILOT_PREFIX}evicted_prompts": float(easy.sum()),
            f"{PILOT_PREFIX}deferred_prompts": float((silent & ~easy).sum()),
            f"{PILOT_PREFIX}surplus_prompts": float(max(self.admitted_prompts - admitted_trained, 0)),
            f"{PILOT_PREFIX}backfilled_prompts": float(self.backfilled),
            f"{PILOT_PREFIX}pilot_rollouts": float(pilot),
            f"{PILOT_PREFIX}commit_rollouts": float(commit),
            f"{PILOT_PREFIX}stages": float(self.stages),
            f"{PILOT_PREFIX}rollouts_per_trained_group": (pilot + commit) / max(trained_groups, 1),
        }
        if self.buffer is not None:
            at = self.explored_at[self.committed]
            age = torch.where(at >= 0, (self.step or 0) - at, 0).double()
            out.update({
                f"{PILOT_PREFIX}rounds": float(self.rounds),
                f"{PILOT_PREFIX}carried_prompts": float(carried_in),
                f"{PILOT_PREFIX}pilot_age_mean": float(age.mean()) if len(age) else 0.0,
                f"{PILOT_PREFIX}pilot_age_max": float(age.max()) if len(age) else 0.0,
                f"{PILOT_PREFIX}buffer_prompts": float(len(self.buffer)),
                f"{PILOT_PREFIX}buffer_evicted_prompts": float(self.buffer_evicted),
            })  # fmt: skip
        if self.settings.evict_solved:
            out[f"{PILOT_PREFIX}solved_evicted_prompts"] = float(self.solved_evicted)
        return out
