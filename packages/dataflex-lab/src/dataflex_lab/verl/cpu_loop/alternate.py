"""DataFlex on every other step of one run: the ``fit`` benches' paired measure of what DataFlex adds to a step.

Two runs of identical work on this machine differ by up to 30 % in every phase of their steps (the same
``sync`` arm, lr 0, keyed generation: 1339 against 1031 ms a step), far more than the 5 % the bench judges, so
a ratio of whole runs measures which run was slow. Within one run, steps differ by a few percent. With
:data:`ALTERNATE_ENV` set to ``odd`` or ``even``, a DataFlex trainer runs DataFlex's step only on the steps of
that parity and verl's own step alone on the others (no read, no weights written, no counters), and logs
:data:`ON_METRIC` (1 or 0) with each step, so a step with DataFlex is compared with its neighbours without.
Both trainer lines: the V1 trainers' ``_compute_advantage`` (:func:`alternate`) and the legacy line's step
after verl's ``compute_advantage`` (:func:`alternate_legacy`), with the legacy line's generation seams (a pilot's
stages, a filter's refill rounds: :func:`alternate_pull`), which on the other steps hand fit the prompts it pulled
to generate itself. A measuring instrument of the harness; production never sets the variable.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

#: ``odd`` or ``even``: the steps DataFlex runs on; unset, DataFlex runs on every step.
ALTERNATE_ENV = "DATAFLEX_CPU_ALTERNATE"
#: The module of the V1 trainers' mixin, whose ``_compute_advantage`` is DataFlex's step hook.
MIXIN_MODULE = "dataflex_verl.mixin"
#: The module of the legacy line's mixin, whose ``_dataflex_after_advantage`` runs DataFlex's step.
LEGACY_MODULE = "dataflex_verl.legacy"
#: The legacy line's modules whose seam at fit's pull (``.step(batch_dict)`` of the class named) builds a step
#: in stages or rounds before fit generates it.
LEGACY_STAGES_MODULE, LEGACY_ROUNDS_MODULE = "dataflex_verl.legacy_stages", "dataflex_verl.legacy_rounds"
#: Logged with every step of an alternating run: 1.0 when DataFlex ran on it, 0.0 when verl's step ran alone.
ON_METRIC = "dataflex_bench/dataflex_on"
PARITIES = {"even": 0, "odd": 1}


def parity(value: str) -> int:
    """The step parity ``value`` names; a clear error for anything else."""
    if value not in PARITIES:
        raise ValueError(f"{ALTERNATE_ENV}={value!r}: give 'odd' or 'even' (the steps DataFlex runs on)")
    return PARITIES[value]


def _runs_now(trainer: Any, on_parity: int) -> bool:
    return int(getattr(trainer, "global_steps", 0) or 0) % 2 == on_parity


def alternate(module: ModuleType, runs_on: str) -> None:
    """Make ``module.DataFlexTrainerMixin._compute_advantage`` run DataFlex only on steps of parity ``runs_on``."""
    mixin = module.DataFlexTrainerMixin
    original = mixin._compute_advantage
    if getattr(original, "_dataflex_alternate", None) is not None:
        return
    on_parity = parity(runs_on)

    @functools.wraps(original)
    def compute_advantage(self: Any, batch: Any, metrics: dict) -> Any:
        on = _runs_now(self, on_parity)
        metrics[ON_METRIC] = float(on)
        if on:
            return original(self, batch, metrics)
        return super(mixin, self)._compute_advantage(batch, metrics)  # verl's trainer, next after the mixin

    compute_advantage._dataflex_alternate = runs_on  # type: ignore[attr-defined]
    mixin._compute_advantage = compute_advantage


def alternate_legacy(module: ModuleType, runs_on: str) -> None:
    """Make ``module.DataFlexLegacyMixin`` run DataFlex's step after verl's ``compute_advantage`` only on steps of
    parity ``runs_on``; on the others verl's batch goes on as verl computed it. The flag reaches verl's step
    metrics with DataFlex's own (the mixin hands ``dataflex_metrics`` over with the actor's output)."""
    mixin = module.DataFlexLegacyMixin
    original = mixin._dataflex_after_advantage
    if getattr(original, "_dataflex_alternate", None) is not None:
        return
    on_parity = parity(runs_on)

    @functools.wraps(original)
    def after_advantage(self: Any, data: Any, estimate: Any) -> Any:
        on = _runs_now(self, on_parity)
        out = original(self, data, estimate) if on else data
        self.dataflex_metrics[ON_METRIC] = float(on)
        return out

    after_advantage._dataflex_alternate = runs_on  # type: ignore[attr-defined]
    mixin._dataflex_after_advantage = after_advantage


def alternate_pull(module: ModuleType, runs_on: str, rounds: str) -> None:
    """Make ``module.<rounds>.step`` (the legacy line's staged or refill generation at fit's pull) run only on steps
    of parity ``runs_on``; on the others the pulled prompts go to fit as they are, and fit generates them itself
    (``RoundsRollout`` has nothing prepared and calls verl's manager), as without DataFlex."""
    cls = getattr(module, rounds)
    original = cls.step
    if getattr(original, "_dataflex_alternate", None) is not None:
        return
    on_parity = parity(runs_on)

    @functools.wraps(original)
    def step(self: Any, batch_dict: Any) -> Any:
        return original(self, batch_dict) if _runs_now(self.trainer, on_parity) else batch_dict

    step._dataflex_alternate = runs_on  # type: ignore[attr-defined]
    cls.step = step


def alternate_stages(module: ModuleType, runs_on: str) -> None:
    """A pilot's stages (``PilotStagesRounds``) only on steps of parity ``runs_on``."""
    alternate_pull(module, runs_on, "PilotStagesRounds")


def alternate_rounds(module: ModuleType, runs_on: str) -> None:
    """A filter's refill rounds (``FilterRounds``) only on steps of parity ``runs_on``."""
    alternate_pull(module, runs_on, "FilterRounds")


#: The module each trainer line's DataFlex step (and the legacy line's generation seams) lives in, and how to
#: alternate it.
ALTERNATIONS = {
    MIXIN_MODULE: alternate,
    LEGACY_MODULE: alternate_legacy,
    LEGACY_STAGES_MODULE: alternate_stages,
    LEGACY_ROUNDS_MODULE: alternate_rounds,
}
