"""Case 1 (and 4 on a GPU): every installed scorer + reweighter pair against ``clone()`` of what it reads.

One timed call is what a host does in a step, on a batch it built for that
step: ``prepare_batch`` (the shared masks, counts and groups are then
computed on first use, once per call), ``scorer.score``, ``reweighter.act``.
Every call, the pair's and the baseline's alike, gets a batch of its own
(fresh copies of the fields the pair reads and of the ``uid`` array, built
before the clock starts), as a host's batch is new every step: nothing a
component derived from the previous step's tensors can be reused. The
baseline copies exactly the tensors the pair reads (``response_mask``,
``is_padding``, every field in either component's ``requires``, and the
``uid`` array when a component needs groups), so a ratio near 1 means the
pair costs about one pass over its inputs. The group-size scaling figure
times the same pair on twice the groups at the same group size: linear code
gives 2, a quadratic group loop gives 4.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from dataflex_core import Batch, InvalidOutputError, Registry, Reweighter, Scorer, prepare_batch
from dataflex_core.registry import ComponentSpec

from .results import Result, measured
from .synthetic import ALWAYS, SyntheticGRPO, shape_label
from .timing import Fresh, measure_interleaved, synchronizer

PAIR_TARGET = 2.5
SCALING_TARGET = 2.5
#: What a host passes besides the batch (see the core contract); components ignore what they do not use.
CONTEXT = {"loss_agg_mode": "token-mean", "adv_estimator": "grpo"}

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Shape:
    num_groups: int
    group_size: int
    length: int

    @property
    def label(self) -> str:
        return shape_label(self.num_groups, self.group_size, self.length)

    def with_groups(self, num_groups: int) -> Shape:
        return Shape(num_groups, self.group_size, self.length)


@dataclass(frozen=True)
class Pair:
    scorer: ComponentSpec
    reweighter: ComponentSpec

    @property
    def name(self) -> str:
        return f"{self.scorer.name}+{self.reweighter.name}"

    def build(self) -> tuple[Scorer, Reweighter]:
        """Both components with default params, as a user who names them without params gets them."""
        return self.scorer.cls(), self.reweighter.cls()

    @property
    def needs_groups(self) -> bool:
        return any(c.needs_groups for c in self.build())

    @property
    def fields(self) -> tuple[str, ...]:
        """Tensor fields the pair reads (see :func:`read_fields`)."""
        return read_fields(*self.build())


def read_fields(scorer: Scorer, reweighter: Reweighter) -> tuple[str, ...]:
    """The always-present fields plus both components' ``requires``.

    Read from the instances: a component may declare fields from its params
    (e.g. a ``reward_key``), which is what a host fetches.
    """
    names = [*ALWAYS, *scorer.requires, *reweighter.requires]
    return tuple(dict.fromkeys(n for n in names if n != "uid"))


#: Scorer timings a host runs in the training step, where a reweighter can use the scores. A ``pre_rollout``
#: scorer reads per-prompt fields before any rollout exists (it drives a sampler, not loss weights).
STEP_TIMINGS = ("post_reward", "post_advantage")


def discover_pairs(registry: Registry, only: Iterable[str] = ()) -> list[Pair]:
    """Every scorer that runs in the step x every reweighter that accepts the scorer's granularity.

    :param only: substrings; when given, keep pairs whose name contains one of them.
    """
    only = [s for s in only if s]
    pairs = []
    for scorer in registry.components["scorer"].values():
        if scorer.cls.timing not in STEP_TIMINGS:
            continue
        for reweighter in registry.components["reweighter"].values():
            if scorer.cls.granularity in reweighter.cls.accepts_granularity:
                pair = Pair(scorer, reweighter)
                if not only or any(s in pair.name for s in only):
                    pairs.append(pair)
    return sorted(pairs, key=lambda p: p.name)


def expected_shape(scorer: Scorer, bs: int, length: int) -> tuple[int, ...]:
    return (bs, length) if scorer.granularity == "token" else (bs,)


def check_weights(weights: object, shape: tuple[int, ...], device: torch.device) -> str | None:
    """Why the output is not usable as weights, or None; a benchmark of wrong output is worthless."""
    if not isinstance(weights, torch.Tensor):
        return f"act returned {type(weights).__name__}, expected a tensor of shape {shape}"
    if tuple(weights.shape) != shape:
        return f"act returned shape {tuple(weights.shape)}, expected {shape}"
    if weights.device.type != device.type:
        return f"act returned weights on {weights.device}, inputs were on {device}"
    if not torch.isfinite(weights).all() or (weights < 0).any():
        return "act returned negative or non-finite weights"
    return None


class PairRunner:
    """Times one pair on the batch it is given; records how the time splits between the two components."""

    def __init__(self, scorer: Scorer, reweighter: Reweighter, sync: Callable[[], None]) -> None:
        self.scorer, self.reweighter, self.sync = scorer, reweighter, sync
        self.score_s: list[float] = []
        self.act_s: list[float] = []

    def __call__(self, batch) -> torch.Tensor:
        start = time.perf_counter()
        prepare_batch(batch)  # as a host does once per step: the shared values are computed afresh each call
        scores = self.scorer.score(batch, 0, **CONTEXT)
        self.sync()
        mid = time.perf_counter()
        weights = self.reweighter.act(scores, batch, step_id=0, **CONTEXT)
        self.sync()
        self.score_s.append(mid - start)
        self.act_s.append(time.perf_counter() - mid)
        return weights


def fresh_batch(template: Batch, fields: tuple[str, ...]) -> Batch:
    """The batch a host builds for a step: new copies of ``fields`` and of ``uid``, the rest shared with ``template``.

    The copies are new tensors (new storage, version 0) and a new ``uid`` array,
    as a host that reads the step's data into new buffers hands them over.
    """
    tensors = dict(template.batch)
    for name in fields:
        tensors[name] = tensors[name].clone()
    non_tensor = dict(template.non_tensor_batch)
    if "uid" in non_tensor:
        non_tensor["uid"] = non_tensor["uid"].copy()
    return Batch(tensors, non_tensor)


def clone_inputs(batch, fields: tuple[str, ...], with_uid: bool) -> list[object]:
    """The baseline: one copy of every input the pair reads (a device-to-device copy on a GPU)."""
    out: list[object] = [batch.batch[name].clone() for name in fields]
    if with_uid:
        out.append(batch.non_tensor_batch["uid"].copy())
    return out


def _split_note(pair: Pair, runner: PairRunner, reps: int) -> tuple[dict[str, float], str]:
    score = statistics.median(runner.score_s[-reps:])
    act = statistics.median(runner.act_s[-reps:])
    slow = f"scorer {pair.scorer.label}" if score >= act else f"reweighter {pair.reweighter.label}"
    note = f"score {score * 1e3:.1f} ms + act {act * 1e3:.1f} ms; the larger share is the {slow}"
    return {"score_s": score, "act_s": act}, note


def run_pairs(
    pairs: list[Pair],
    shape: Shape,
    *,
    reps: int,
    warmup: int = 1,
    device: str = "cpu",
    case: str = "pair",
    scaling_case: str = "scaling",
    scaling_groups: int | None = None,
    unjudged: str | None = None,
    scaling_unjudged: str | None = None,
    progress: Progress = print,
) -> list[Result]:
    """Measure every pair on one shape; with ``scaling_groups`` also the scaling figure.

    :param scaling_groups: the smaller group count for the scaling ratio (e.g. half of ``shape``'s).
    :param case: the pair rows' case name; ``scaling_case`` the scaling rows'.
    :param unjudged: status for rows not held to their target (``smoke``, ``dry-run``, ``info``), or None to judge.
    :param scaling_unjudged: the same for the scaling rows.
    """
    dev = torch.device(device)
    sync = synchronizer(dev)
    fields: set[str] = set()
    for pair in pairs:
        try:
            fields.update(pair.fields)
        except Exception:  # noqa: BLE001 - the constructor error is reported by the pair's own row
            pass
    synth = SyntheticGRPO(shape.num_groups, shape.group_size, shape.length, seed=1)
    batch = synth.batch(fields, dev)
    small = None
    if scaling_groups is not None:
        small_shape = shape.with_groups(scaling_groups)
        small = SyntheticGRPO(small_shape.num_groups, small_shape.group_size, small_shape.length, seed=2)
        small = small.batch(fields, dev)
    invented = sorted(set(synth.unknown))
    results: list[Result] = []
    for index, pair in enumerate(pairs, 1):
        progress(f"  [{index}/{len(pairs)}] {pair.name} @ {shape.label} on {dev}")
        try:
            rows = _run_one(
                pair,
                shape,
                batch,
                small,
                scaling_groups,
                reps,
                warmup,
                dev,
                sync,
                (case, scaling_case),
                (unjudged, scaling_unjudged),
                invented,
            )
        except Exception as exc:  # noqa: BLE001 - one broken pair is a row, not the end of the run
            rows = [Result(case, pair.name, shape.label, str(dev), status="error", note=f"{type(exc).__name__}: {exc}")]
        for row in rows:
            progress(f"        {row.case}: {_summary(row)}")
        results.extend(rows)
    del batch, small
    gc.collect()
    return results


def _summary(result: Result) -> str:
    if result.ratio is None:
        return f"{result.status}: {result.note}"
    return f"{result.status}: ratio {result.ratio:.2f} (target <= {result.target:g}), {result.median_s * 1e3:.1f} ms"


def _run_one(pair, shape, batch, small, scaling_groups, reps, warmup, dev, sync, cases, statuses, invented):
    (case, scaling_case), (unjudged, scaling_unjudged) = cases, statuses
    scorer, reweighter = pair.build()
    fields = read_fields(scorer, reweighter)
    with_uid = bool(scorer.needs_groups or reweighter.needs_groups)
    runner = PairRunner(scorer, reweighter, sync)
    checked = fresh_batch(batch, fields)
    scores = scorer.score(prepare_batch(checked), 0, **CONTEXT)
    try:
        weights = reweighter.act(scores, checked, step_id=0, **CONTEXT)
    except ValueError as exc:
        if isinstance(exc, InvalidOutputError):
            raise
        # The reweighter refuses this scorer's scores by its documented input contract
        # (e.g. solve-rate reweighters and signed advantages): a combination no user can run.
        note = f"not a usable combination, the reweighter rejects these scores: {exc}"
        return [Result(case, pair.name, shape.label, str(dev), status="skip", note=note)]
    problem = check_weights(weights, expected_shape(scorer, shape.num_groups * shape.group_size, shape.length), dev)
    if problem:
        return [Result(case, pair.name, shape.label, str(dev), status="error", note=problem)]
    del checked, scores, weights
    functions = {
        "clone": Fresh(lambda fresh: clone_inputs(fresh, fields, with_uid), lambda: fresh_batch(batch, fields)),
        "pair": Fresh(runner, lambda: fresh_batch(batch, fields)),
    }
    if small is not None:
        small_runner = PairRunner(scorer, reweighter, sync)
        functions["pair_small"] = Fresh(small_runner, lambda: fresh_batch(small, fields))
    timings = measure_interleaved(functions, reps=reps, warmup=warmup, sync=sync)
    split, note = _split_note(pair, runner, reps)
    cpu_ratio = timings.ratio("pair", "clone", cpu=True)
    note = f"CPU-time ratio {cpu_ratio:.2f}; {note}"
    used = [f for f in fields if f in invented]
    if used:
        note += f"; synthetic stand-in (standard normal) for unknown field(s) {used}"
    rows = [
        measured(
            case,
            pair.name,
            shape.label,
            median_s=timings.median("pair"),
            baseline_s=timings.median("clone"),
            ratio=timings.ratio("pair", "clone"),
            target=PAIR_TARGET,
            reps=reps,
            device=str(dev),
            unjudged=unjudged,
            note=note,
            extra={
                **split,
                "cpu_ratio": cpu_ratio,
                "fields": list(fields),
                "uid_copied": with_uid,
                "samples_s": timings.samples,
                "cpu_samples_s": timings.cpu_samples,
            },
        )
    ]
    if small is not None:
        rows.append(
            measured(
                scaling_case,
                pair.name,
                f"{shape.num_groups} vs {scaling_groups} groups x{shape.group_size} L={shape.length}",
                median_s=timings.median("pair"),
                baseline_s=timings.median("pair_small"),
                ratio=timings.ratio("pair", "pair_small"),
                target=SCALING_TARGET,
                reps=reps,
                device=str(dev),
                unjudged=scaling_unjudged,
                note="time at the larger group count over time at the smaller (linear = 2.0); CPU-time ratio "
                f"{timings.ratio('pair', 'pair_small', cpu=True):.2f}",
                extra={"cpu_ratio": timings.ratio("pair", "pair_small", cpu=True)},
            )
        )
    return rows
