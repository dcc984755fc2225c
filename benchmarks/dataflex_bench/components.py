"""Case ``components``: each installed scorer and reweighter in the step at one production shape (``info``), and the
group-size scaling row (judged: it catches code quadratic in the groups).

A component runs in the step a host runs (``session.run``, mounted as verl V1 mounts it) with its default partner
(``advantage_magnitude`` for a reweighter, ``softmax`` for a scorer, else the first that accepts it), against one
``clone()`` of the fields the step reads, on a batch with verl's padding rows. The scaling row is the largest over
the components of the step's time at twice the groups (same group size and length): linear code reads 2, a loop
over pairs of groups 4. It runs in a child process with glibc's mmap threshold fixed, so every temporary is fresh
pages at both sizes: with the dynamic threshold a buffer under 32 MiB at one size and over it at the other would
read as the code's cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .results import Result, measured, skipped
from .synthetic import PADDING_ROWS, SyntheticGRPO, fresh, mounted_session, padded, shape_label
from .timing import Fresh, Timings, measure_interleaved

SCALING_TARGET = 2.5
#: ``(groups, group size, L)``: the production shape (8192 x 4096), and the scaling row's larger shape.
PRODUCTION = (1024, 8, 4096)
SCALING = (4096, 8, 256)
QUICK_PRODUCTION, QUICK_SCALING = (32, 8, 128), (64, 8, 64)
#: Scorer timings in the training step (a ``pre_rollout`` scorer drives a sampler, not loss weights).
STEP_TIMINGS = ("post_reward", "post_advantage")
DEFAULT_SCORER, DEFAULT_REWEIGHTER = "advantage_magnitude", "softmax"


def blocks(registry) -> Iterator[tuple[str, list[dict]]]:
    """Per component (``scorer x`` / ``reweighter y``), the blocks pairing it with each partner that accepts it,
    the default partner first."""
    scorers = [s for s in registry.components["scorer"].values() if s.cls.timing in STEP_TIMINGS]
    reweighters = list(registry.components["reweighter"].values())

    def block(scorer, reweighter) -> dict:
        return {"mechanism": "reweight", "scorer": {"name": scorer.name}, "actuator": {"name": reweighter.name}}

    for scorer in sorted(scorers, key=lambda s: s.name):
        fits = [r for r in reweighters if scorer.cls.granularity in r.cls.accepts_granularity]
        fits.sort(key=lambda r: r.name != DEFAULT_REWEIGHTER)
        yield f"scorer {scorer.name}", [block(scorer, r) for r in fits]
    for reweighter in sorted(reweighters, key=lambda r: r.name):
        fits = [s for s in scorers if s.cls.granularity in reweighter.cls.accepts_granularity]
        fits.sort(key=lambda s: s.name != DEFAULT_SCORER)
        yield f"reweighter {reweighter.name}", [block(s, reweighter) for s in fits]


def first_running(candidates: list[dict], batch_of: Callable[[list[str]], object]):
    """The first block whose step runs on a small batch (a reweighter may refuse a scorer's scores by its input
    contract, e.g. solve rates and signed advantages): ``(block, session)``, or ``(None, reason)``."""
    reason = "no partner accepts it"
    for block in candidates:
        try:
            session = mounted_session(block)
            session.run(batch_of(session.fields), 0)
            return block, session
        except ValueError as exc:
            reason = f"{type(exc).__name__}: {exc}"
    return None, reason


def against_clone(session, batch, reps: int) -> Timings:
    """The session's step on a fresh copy of ``batch`` (``step``) against making that copy (``clone``)."""
    step = Fresh(lambda b: session.run(b, 1), lambda: fresh(batch))
    return measure_interleaved({"clone": Fresh(fresh, lambda: batch), "step": step}, reps=reps)


def scaling_ratios(spec: dict[str, Any]) -> list[list]:
    """In a child with glibc's mmap threshold fixed (:func:`~.memory.in_child`), so every buffer is fresh pages at
    both sizes: each component's step at ``spec["shape"]`` and at half its groups, ``[label, ratio, large s, small
    s]`` per component."""
    import dataflex_core

    large, small = SyntheticGRPO(*spec["shape"], seed=1), SyntheticGRPO(spec["shape"][0] // 2, *spec["shape"][1:])
    check, out = SyntheticGRPO(8, 4, 16, seed=0), []
    for label, candidates in blocks(dataflex_core.get_registry()):
        block, session = first_running(candidates, check.batch) if spec["only"] in label else (None, None)
        if block is None:
            continue
        batches = {"small": small.batch(session.fields), "large": large.batch(session.fields)}
        step = {name: Fresh(lambda b, run=session.run: run(b, 1), lambda b=b: fresh(b)) for name, b in batches.items()}
        grow = measure_interleaved(step, reps=spec["reps"])
        out.append([label, grow.paired_ratio("large", "small"), grow.median("large"), grow.median("small")])
    return out


def run_components(
    *, quick: bool, reps: int, only: str = "", unjudged: str | None = None, progress=print
) -> list[Result]:
    import dataflex_core

    from .memory import in_child

    production, scaling = (QUICK_PRODUCTION, QUICK_SCALING) if quick else (PRODUCTION, SCALING)
    synth, check = SyntheticGRPO(*production, seed=1), SyntheticGRPO(8, 4, 16, seed=0)
    rows: list[Result] = []
    for label, candidates in blocks(dataflex_core.get_registry()):
        if only not in label:
            continue
        shape = f"{shape_label(*production)} + {PADDING_ROWS} padding rows"
        block, session = first_running(candidates, check.batch)
        if block is None:
            rows.append(skipped("components", label, shape, f"its step does not run: {session}"))
            continue
        partner = block["actuator" if label.startswith("scorer") else "scorer"]["name"]
        progress(f"  {label} (with {partner}) at {shape}")
        fields = session.fields
        timings = against_clone(session, padded(synth.batch(fields)), reps)
        rows.append(
            measured(
                "components", label, shape, median_s=timings.median("step"), baseline_s=timings.median("clone"),
                ratio=timings.paired_ratio("step", "clone"), target=None, reps=reps, unjudged=unjudged,
                note=f"with {partner}; session.run against one clone() of the {len(fields)} fields it reads",
                extra={"fields": list(fields)},
            )
        )  # fmt: skip
    progress(f"  scaling: every component at {scaling[0]} and {scaling[0] // 2} groups (fresh process)")
    ratios = in_child("components.scaling_ratios", {"shape": list(scaling), "only": only, "reps": reps})
    if ratios:
        label, ratio, large_s, small_s = max(ratios, key=lambda row: row[1])
        rows.append(
            measured(
                "scaling", "step at twice the groups, the largest over the components",
                f"{scaling[0]} vs {scaling[0] // 2} groups x{scaling[1]} L={scaling[2]}", median_s=large_s,
                baseline_s=small_s, ratio=ratio, target=SCALING_TARGET, reps=reps, unjudged=unjudged,
                note=f"the largest is {label}'s (linear code reads 2.0, a loop over pairs of groups 4.0)",
                extra={"ratios": {row[0]: row[1] for row in ratios}},
            )
        )  # fmt: skip
    return rows
