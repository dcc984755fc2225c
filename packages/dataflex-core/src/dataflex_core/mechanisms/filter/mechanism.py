"""``mechanism: filter``: admit or evict whole groups after reward, and refill until the batch is full.

``select`` drops groups and the batch shrinks; ``filter`` keeps it full. A
scorer of the step's rollouts (a ``post_reward`` group scorer such as
``group_reward_variance``, or any scorer) and a selector decide which GRPO
groups are *admitted*; a group is admitted when the selector keeps every one
of its valid rows (keeping part of a group is invalid output: filter admits
or evicts whole groups), and a group without a valid row is never admitted.
When fewer than the step's ``groups`` are admitted, the host generates a
further prompt batch (a *refill*, drawn by :class:`RefillSampler`:
deterministic given the run's seed, checkpointed) and admits from it, round
after round, until the batch is full or ``max_rounds`` generation rounds ran
(:class:`AdmissionRounds`). The trained batch is then the first ``groups``
admitted groups in generation order; admitted groups beyond them are the
surplus (dropped: generated, never trained). A step that is still short after
``max_rounds`` follows ``on_short``: ``raise`` (default: a clear error naming
the caps) or ``backfill`` (the batch is completed with evicted groups in
generation order, counted in ``dataflex/filter/backfilled_groups``); it never
trains on a smaller batch.

The loss is the framework's own on the admitted groups (their advantages were
computed within each group, so they are unchanged); the host recounts its
token normaliser. Hosts that cannot generate within a step refuse ``filter``
at mount (``HostCapabilities.refill``).

Every generated response feeds the per-prompt ledger (:mod:`dataflex_core.ledger`)
when ``prompt_key`` names the dataset column of the prompt ids: each round's
rows are recorded after the step, those of the trained batch as trained, those
of evicted and surplus groups as filtered, so a prompt's ``rollouts`` =
``rollouts_trained`` + ``rollouts_filtered`` and, summed over the prompts,
the ledger's counts are the run's ``dataflex/compute/*`` totals (responses
with no token, which the ledger leaves out, aside).

Config (``dataflex:`` block): ``filter: {max_rounds: 4, on_short: raise}``,
``prompt_key`` (unset: no ledger), ``success_threshold`` and ``ledger.load``
as for ``mechanism: curriculum``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from ...config import DataFlexPipeline
from ...contracts import check_selection, group_admission
from ...errors import ConfigError, IncompatibleComponentError, InvalidOutputError
from ...groups import group_index, segment_count
from ...ledger import LEDGER_KEY, PromptIds, PromptLedger
from ...normalize import valid_sample_mask, valid_token_counts
from ...step.blocks import BlockSampler
from ...step.context import StepContext
from ...step.dataset import dataset_column
from ...step.host import HostCapabilities
from ...step.outputs import checked_scores, component_label
from ...step.result import PREFIX, StepResult
from ..base import Mechanism, check_rollout_time
from ..curriculum import REWARD_FIELD, Curriculum, curriculum_settings, row_rewards

#: The prefix of the filter's metrics.
FILTER_PREFIX = f"{PREFIX}filter/"
#: What a step short of admitted groups after ``max_rounds`` does.
ON_SHORT = ("raise", "backfill")
#: The ``dataflex.filter`` keys and their defaults.
FILTER_DEFAULTS = {"max_rounds": 4, "on_short": "raise", "draw": None}


#: The top-level ``dataflex:`` keys of the filter's ledger, with their defaults.
LEDGER_KEYS = {"prompt_key": None, "success_threshold": None, **LEDGER_KEY}
#: The mechanisms that may draw the prompts under ``filter.draw`` (the dataloader's and the refills').
DRAW_MECHANISMS = ("mix", "curriculum")
#: The host keys of the ``dataflex:`` block that ``filter.draw`` takes from it.
DRAW_INHERITS = ("on_invalid", "call_budget_s")


@dataclass(frozen=True)
class FilterSettings:
    #: Generation rounds per step at most, the first included (>= 1).
    max_rounds: int = 4
    on_short: str = "raise"
    #: The dataset column of the prompt ids the ledger is keyed by (``None``: no ledger).
    prompt_key: str | None = None
    success_threshold: float | None = None
    #: ``dataflex.ledger.load``: an exported ledger to start from.
    ledger_load: str | None = None
    #: ``filter.draw``: the ``dataflex:`` block of the mix or curriculum that draws the prompts (``None``: the
    #: host's order and :class:`RefillSampler`).
    draw: Mapping[str, Any] | None = None


def draw_block(plain: Any, prompt_key: str | None) -> dict[str, Any] | None:
    """``filter.draw``, checked: a ``dataflex:`` block of mechanism mix or curriculum (``None``: unset)."""
    if plain is None:
        return None
    if not isinstance(plain, Mapping) or plain.get("mechanism") not in DRAW_MECHANISMS:
        raise ConfigError(
            f"dataflex.filter.draw must be the block of the mechanism that draws the prompts, with mechanism "
            f"{' or '.join(DRAW_MECHANISMS)} (e.g. {{mechanism: curriculum, scorer: {{name: ...}}, actuator: "
            f"{{name: ...}}}}), got {plain!r}"
        )
    if plain["mechanism"] == "curriculum":
        draw_key = curriculum_settings(plain).prompt_key
        if prompt_key is not None and prompt_key != draw_key:
            raise ConfigError(
                f"dataflex.prompt_key={prompt_key!r} but dataflex.filter.draw.prompt_key={draw_key!r}: with a "
                "curriculum drawing the prompts the filter feeds the curriculum's ledger; set the key in draw only"
            )
    return dict(plain)


def filter_settings(block: Mapping[str, Any]) -> FilterSettings:
    """The ``dataflex.filter`` keys and the ledger's, checked; raises :class:`ConfigError` with the fix."""
    key = block.get("prompt_key")
    ledger = curriculum_settings({**block, "prompt_key": "index" if key is None else key})
    if key is None and (ledger.ledger_load is not None or ledger.success_threshold is not None):
        raise ConfigError(
            "dataflex.ledger / dataflex.success_threshold configure the per-prompt ledger of mechanism filter, "
            "which is keyed by dataflex.prompt_key; set prompt_key to the dataset column of the prompt ids"
        )
    plain = block.get("filter") or {}
    if not isinstance(plain, Mapping):
        raise ConfigError(f"dataflex.filter must be a mapping (e.g. {{max_rounds: 4, on_short: raise}}), got {plain!r}")
    unknown = sorted(set(plain) - set(FILTER_DEFAULTS))
    if unknown:
        raise ConfigError(f"dataflex.filter has unknown keys {unknown}; it accepts {sorted(FILTER_DEFAULTS)}")
    rounds = plain.get("max_rounds", FILTER_DEFAULTS["max_rounds"])
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(
            f"dataflex.filter.max_rounds must be an integer >= 1 (generation rounds per step, the first included), "
            f"got {rounds!r}"
        )
    on_short = plain.get("on_short", FILTER_DEFAULTS["on_short"])
    if on_short not in ON_SHORT:
        raise ConfigError(
            f"dataflex.filter.on_short={on_short!r} is not one of {', '.join(ON_SHORT)}; raise stops a step still "
            "short of admitted groups after max_rounds, backfill completes it with evicted groups"
        )
    draw = draw_block(plain.get("draw"), key)
    return FilterSettings(rounds, on_short, key, ledger.success_threshold, ledger.ledger_load, draw)


@dataclass(frozen=True)
class RoundPrompts:
    """One round's valid responses, for the ledger: their prompt ids, rewards, tokens and group."""

    ids: np.ndarray
    rewards: torch.Tensor
    tokens: torch.Tensor
    group: torch.Tensor


@dataclass
class AdmissionRounds:
    """One step's generation rounds: which groups each admitted, and which groups the trained batch keeps.

    :param groups: the groups the trained batch must have (the step's prompts).
    :param settings: the caps and the short-step policy.
    """

    groups: int
    settings: FilterSettings
    #: Per round: the admitted flag of each of its groups (in the round's group order).
    admitted: list[torch.Tensor] = field(default_factory=list)
    #: Per round: each group's rollouts and response tokens.
    rollouts: list[torch.Tensor] = field(default_factory=list)
    tokens: list[torch.Tensor] = field(default_factory=list)
    #: Per round: its valid responses for the ledger (``None`` without one).
    prompts: list[RoundPrompts | None] = field(default_factory=list)

    def add(
        self, admitted: torch.Tensor, rollouts: torch.Tensor, tokens: torch.Tensor, prompts: RoundPrompts | None = None
    ) -> None:
        """Record one round's groups (bool, rollouts and tokens per group) and its responses for the ledger."""
        self.admitted.append(admitted.to(torch.bool).cpu())
        self.rollouts.append(rollouts.to(torch.long).cpu())
        self.tokens.append(tokens.to(torch.long).cpu())
        self.prompts.append(prompts)

    @property
    def rounds(self) -> int:
        return len(self.admitted)

    @property
    def admitted_groups(self) -> int:
        return int(sum(int(a.sum()) for a in self.admitted))

    @property
    def needs_refill(self) -> bool:
        """Too few admitted groups and another round allowed: the host generates one more prompt batch."""
        return self.admitted_groups < self.groups and self.rounds < self.settings.max_rounds

    def chosen(self) -> list[torch.Tensor]:
        """Per round, the indices of its groups the trained batch keeps, in generation order.

        :raises InvalidOutputError: still short after ``max_rounds`` with ``on_short: raise``.
        """
        short = self.groups - self.admitted_groups
        if short > 0 and self.settings.on_short == "raise":
            raise InvalidOutputError(
                f"mechanism filter admitted {self.admitted_groups} of the {self.groups} groups the batch needs after "
                f"{self.rounds} generation round(s) (dataflex.filter.max_rounds={self.settings.max_rounds}); raise "
                "max_rounds, widen the selector's band, or set dataflex.filter.on_short=backfill to complete the "
                "batch with evicted groups"
            )
        left, backfill = self.groups, max(short, 0)
        out = []
        for admitted in self.admitted:
            keep = admitted.nonzero().flatten()[:left]
            left -= len(keep)
            out.append(keep)
        if backfill:  # evicted groups in generation order complete the batch
            for i, admitted in enumerate(self.admitted):
                extra = (~admitted).nonzero().flatten()[:backfill]
                backfill -= len(extra)
                out[i] = torch.sort(torch.cat([out[i], extra])).values
        return out

    def counts(self, chosen: list[torch.Tensor]) -> dict[str, int]:
        """The compute counts of the rows outside the trained batch (:func:`~dataflex_core.compute.compute_counters`)."""
        evicted_rollouts = evicted_tokens = 0
        for keep, rollouts, tokens in zip(chosen, self.rollouts, self.tokens):
            out = torch.ones(len(rollouts), dtype=torch.bool)
            out[keep] = False
            evicted_rollouts += int(rollouts[out].sum())
            evicted_tokens += int(tokens[out].sum())
        return {
            "evicted_rollouts": evicted_rollouts,
            "evicted_tokens": evicted_tokens,
            "generation_rounds": self.rounds,
            "refills": self.rounds - 1,
        }

    def metrics(self, chosen: list[torch.Tensor]) -> dict[str, float]:
        total = sum(len(a) for a in self.admitted)
        kept_admitted = sum(int(a[keep].sum()) for a, keep in zip(self.admitted, chosen))
        return {
            f"{FILTER_PREFIX}admitted_groups": float(self.admitted_groups),
            f"{FILTER_PREFIX}generated_groups": float(total),
            f"{FILTER_PREFIX}admitted_fraction": self.admitted_groups / max(total, 1),
            f"{FILTER_PREFIX}trained_groups": float(sum(len(keep) for keep in chosen)),
            f"{FILTER_PREFIX}surplus_groups": float(self.admitted_groups - kept_admitted),
            f"{FILTER_PREFIX}backfilled_groups": float(sum(len(keep) for keep in chosen) - kept_admitted),
        }


class RefillSampler(BlockSampler):
    """The prompts of refill rounds: shuffled passes over the dataset, one prompt batch at a time.

    Seeded by the run's seed (its own generator, apart from the framework's prompt order), so refills are
    deterministic; its position travels with the component state.
    """

    kind = "refill"
    name = "refill_sampler"

    def __init__(self, population: int, batch_size: int, seed: int = 0) -> None:
        super().__init__(population, batch_size, seed)
        self._order: list[int] = []

    def next_block(self) -> list[int]:
        block: list[int] = []
        while len(block) < self.batch_size:
            if not self._order:
                self._order = torch.randperm(self.population, generator=self.generator).tolist()
            take = self.batch_size - len(block)
            block += self._order[:take]
            self._order = self._order[take:]
        return block

    def state_dict(self) -> dict[str, Any]:
        return {**self.block_state(), "order": list(self._order)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_block_state(state)
        self._order = list(state["order"])


def group_rows(batch: Any) -> tuple[torch.Tensor, int]:
    """``(index, groups)``: each row's group (by ``uid``, in sorted order) and the number of groups."""
    uid = batch.non_tensor_batch.get("uid")
    if uid is None:
        raise ConfigError("mechanism filter admits whole GRPO groups, but the step's rows carry no 'uid'")
    index, groups = group_index(uid)
    return torch.as_tensor(index, dtype=torch.long), int(groups)


class Filter(Mechanism):
    """A selector admits whole groups; the host refills rounds until ``groups`` are admitted."""

    name: ClassVar[str] = "filter"
    actuator_kind: ClassVar[str] = "selector"
    keys: ClassVar[Mapping[str, Any]] = {"filter": None, **LEDGER_KEYS}
    fallback: ClassVar[str] = "admitting every group"
    settings: FilterSettings

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block)
        #: The per-prompt ledger every round feeds (built with the train sampler; ``None`` without prompt_key).
        self.prompt_ledger: PromptLedger | None = None
        #: ``filter.draw``: the mounted step of the mix or curriculum that draws the prompts (set by the session).
        self.draw: StepContext | None = None

    @property
    def draw_curriculum(self) -> bool:
        """A curriculum draws the prompts: its history is the ledger, fed with every round."""
        return self.draw is not None and isinstance(self.draw.mechanism, Curriculum)

    @property
    def ledger_key(self) -> str | None:
        """The dataset column the step's rows must carry for the ledger (``None``: no ledger)."""
        draw = self.settings.draw
        if draw is not None and draw["mechanism"] == "curriculum":
            return curriculum_settings(draw).prompt_key
        return self.settings.prompt_key

    def parse(self, block: Mapping[str, Any]) -> FilterSettings:
        return filter_settings(block)

    @classmethod
    def check(cls, pipeline: DataFlexPipeline, host: HostCapabilities, loss_unit: str | None) -> None:
        check_rollout_time(pipeline, host, cls.name)
        if not host.refill:
            raise IncompatibleComponentError(
                f"mechanism filter keeps the batch full by generating further prompt batches within a step, but "
                f"{host.name} cannot refill: {host.refill_reason or 'it has no generation rounds'}. Use mechanism "
                "select to train on the admitted groups alone (the batch shrinks)"
            )
        if not getattr(pipeline.actuator, "admits_groups", False):
            raise IncompatibleComponentError(
                f"{pipeline.actuator_spec.kind} {pipeline.actuator_spec.label} does not declare admits_groups; "
                "mechanism filter admits or evicts whole groups, so its selector must promise to keep or drop "
                "each group whole on a group scorer's scores: use threshold_band, or declare "
                "admits_groups = True on your selector and certify it (nox -s conformance)"
            )
        if bool(pipeline.actuator.recompute_advantage):
            raise IncompatibleComponentError(
                f"{pipeline.actuator_spec.kind} {pipeline.actuator_spec.label} keeps part of each group "
                "(recompute_advantage=True); mechanism filter admits or evicts whole groups: pick a selector of "
                "whole groups (threshold_band on a group scorer)"
            )

    def fields(self, pipeline: DataFlexPipeline) -> list[str]:
        key = self.ledger_key
        ledger = [] if key is None else [REWARD_FIELD, key]
        return list(dict.fromkeys([*pipeline.requires, "uid", *ledger]))

    def dataset_columns(self, pipeline: DataFlexPipeline) -> list[str]:
        key = self.settings.prompt_key
        own = [] if key is None else [key]
        draw = [] if self.draw is None else self.draw.mechanism.dataset_columns(self.draw.pipeline)
        return list(dict.fromkeys([*own, *draw]))

    def train_sampler(self, step: StepContext, dataset: Any, batch_size: int, seed: int) -> Any:
        """With ``filter.draw``, the draw mechanism's sampler (the dataloader's and the refills' prompts; a
        curriculum's history is then the ledger); else ``None``: the host keeps its prompt order, refills come
        from :class:`RefillSampler`, and with ``prompt_key`` the ledger is keyed here by the train dataset's
        prompt ids (and warm-started from ``ledger.load``)."""

        draw = self.draw
        if draw is not None:
            if draw.sampler is None:
                draw.sampler = draw.mechanism.train_sampler(draw, dataset, batch_size, seed)
            if self.draw_curriculum:
                self.prompt_ledger = draw.sampler.history
            else:
                self._own_ledger(dataset)
            return draw.sampler
        self._own_ledger(dataset)
        return None

    def _own_ledger(self, dataset: Any) -> None:
        settings = self.settings
        if settings.prompt_key is None or self.prompt_ledger is not None:
            return
        key = settings.prompt_key
        ids = dataset_column(
            dataset, key, what=f"dataflex.prompt_key={key!r}",
            fix="give every row a unique id in a column and set dataflex.prompt_key to it",
        )  # fmt: skip
        self.prompt_ledger = PromptLedger(PromptIds(ids, key), settings.success_threshold)
        if settings.ledger_load is not None:  # a warm start; a resumed checkpoint's state replaces it
            self.prompt_ledger.load(settings.ledger_load)

    def stateful(self, sampler: Any) -> dict[str, Any]:
        draw = self.draw
        if draw is None:
            return {} if self.prompt_ledger is None else {"ledger": self.prompt_ledger}
        roles = {"draw_scorer": draw.pipeline.scorer, "draw_actuator": draw.pipeline.actuator}
        roles.update({f"draw_{role}": value for role, value in draw.mechanism.stateful(draw.sampler).items()})
        if self.prompt_ledger is not None and not self.draw_curriculum:
            roles["ledger"] = self.prompt_ledger
        return roles

    def restored(self, sampler: Any, host: HostCapabilities) -> None:
        if self.draw is not None:
            self.draw.mechanism.restored(self.draw.sampler, host)

    def ledger(self, sampler: Any) -> PromptLedger | None:
        return self.prompt_ledger

    def round_prompts(self, step: StepContext, batch: Any) -> RoundPrompts | None:
        """One round's valid responses for the ledger (``None`` without one): prompt ids, rewards, tokens, group."""
        if self.prompt_ledger is None:
            return None
        key = self.ledger_key
        sub, _ = step.components_batch(batch)
        ids = sub.non_tensor_batch.get(key)
        if ids is None:
            raise ConfigError(
                f"mechanism filter keys its ledger by the dataset column dataflex.prompt_key={key!r}, but the "
                "step's rows do not carry it; carry it into the rollouts or set prompt_key to a column that is"
            )
        valid = valid_sample_mask(sub).cpu()
        index, _ = group_rows(sub)
        return RoundPrompts(
            ids=np.asarray(ids, dtype=object)[valid.numpy()],
            rewards=row_rewards(sub)[valid].cpu(),
            tokens=valid_token_counts(sub).cpu()[valid],
            group=index[valid],
        )

    def record(self, rounds: AdmissionRounds, chosen: list[torch.Tensor], step_id: int) -> dict[str, float]:
        """Every round's valid responses into the ledger: trained when their group is in the batch, else filtered.

        A curriculum drawing the prompts takes them as its step (its history and its scorer's ``observe``: what
        every prompt did, evicted ones included); its metrics are returned.
        """
        ledger = self.prompt_ledger
        parts = [(p, keep) for p, keep in zip(rounds.prompts, chosen) if p is not None]
        if ledger is None or not parts:
            return {}
        ids = np.concatenate([p.ids for p, _ in parts])
        rows = ledger.ids.rows(ids, f"the rows of step {step_id}")
        trained = torch.cat([torch.isin(p.group, keep) for p, keep in parts])
        rewards = torch.cat([p.rewards for p, _ in parts])
        tokens = torch.cat([p.tokens for p, _ in parts])
        if self.draw_curriculum:
            assert self.draw is not None
            return self.draw.mechanism.feed(self.draw, rows, rewards, tokens, step_id, trained=trained)
        ledger.record(rows, rewards, step_id, tokens=tokens, trained=trained)
        return {}

    def run_draw(self, step: StepContext, batch: Any, step_id: int) -> dict[str, float]:
        """A mix drawing the prompts: its step on the trained batch (its scorer, then new proportions)."""
        draw = self.draw
        if draw is None or self.draw_curriculum or draw.idle(step_id) is not None:
            return {}
        mechanism = draw.mechanism
        result, _ = draw.on_invalid.attempt(
            lambda: mechanism.run(draw, batch, step_id, None), step=step_id, instead=mechanism.fallback
        )
        return {} if result is None else result.metrics

    def rounds(self, groups: int) -> AdmissionRounds:
        """A new step's admission over generation rounds, for a batch of ``groups`` groups."""
        return AdmissionRounds(int(groups), self.settings)

    def admit(self, step: StepContext, batch: Any, step_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One round's admission: ``(admitted, rollouts, tokens)`` per group (groups in sorted ``uid`` order,
        :func:`~dataflex_core.groups.group_index`).

        Under ``on_invalid: uniform`` an invalid selection admits every group with a valid row.
        """
        sub, _ = step.components_batch(batch)
        index, groups = group_rows(sub)
        valid = valid_sample_mask(sub).cpu()
        rollouts = segment_count(index, groups, torch.ones_like(valid)).to(torch.long)
        tokens = torch.zeros(groups, dtype=torch.long).index_add_(0, index, valid_token_counts(sub).cpu())
        has_valid = segment_count(index, groups, valid) > 0
        keep, _ = step.on_invalid.attempt(lambda: self._kept(step, sub, step_id), step=step_id, instead=self.fallback)
        if keep is None:
            return has_valid, rollouts, tokens
        admitted, partial = group_admission(keep, index, groups, valid)
        if bool(partial.any()):
            raise InvalidOutputError(
                f"{component_label(step.pipeline, 'actuator')} kept part of {int(partial.sum())} group(s) at step "
                f"{step_id}; mechanism filter admits or evicts whole groups: use a group scorer (granularity "
                "prompt, e.g. group_reward_variance) with a band selector (threshold_band)"
            )
        return admitted, rollouts, tokens

    def _kept(self, step: StepContext, batch: Any, step_id: int) -> torch.Tensor:
        scores = checked_scores(step.calls, batch, step_id, step.ctx)
        output = step.calls.call("actuator", "act", scores, batch, at_step=step_id, step_id=step_id, **step.ctx)
        return check_selection(output, batch, owner=component_label(step.pipeline, "actuator"), step=step_id)

    def run(self, step: StepContext, batch: Any, step_id: int, importance_weights: torch.Tensor | None) -> StepResult:
        """The trained batch, after the rounds the host ran (``step.admission``): its metrics and compute counts."""
        rounds: AdmissionRounds | None = getattr(step, "admission", None)
        step.admission = None
        if rounds is None:
            raise RuntimeError(
                "mechanism filter runs on the batch its admission rounds built; the host must call "
                "DataFlexSession.admit for each round and pass the rounds to DataFlexSession.run(admission=...)"
            )
        chosen = rounds.chosen()
        metrics = rounds.metrics(chosen)
        metrics.update(self.record(rounds, chosen, step_id))
        metrics.update(self.run_draw(step, batch, step_id))
        return StepResult(metrics, compute=rounds.counts(chosen))
