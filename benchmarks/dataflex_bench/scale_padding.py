"""Case ``scale``, the padded step: the step verl's V1 adapter runs, on a batch padded as verl pads it (issue 36).

verl's V1 trainer appends padding rows (``upsample_batch_to_divisible_size``: an empty ``response_mask``, one
shared ``pad...`` uid, the template row's values elsewhere) and ``_balance_batch`` reorders the batch, so they
sit anywhere. For every shipped scorer + reweighter pair, in one fresh child process per shape (glibc's mmap
threshold fixed, as the memory case does, so the resident size follows the live bytes):

- **padding rows**: the step (``DataFlexStep.run``, token unit, what ``session.run`` runs for the V1 adapter,
  without the queue I/O) on the batch with :data:`PADDING_ROWS` padding rows scattered in it, against the same
  step on the batch without them; time (the median of the per-round ratios of each of two passes minutes apart,
  their geometric mean: :func:`_measure_pairs`) and peak extra memory, each <= :data:`PADDING_TARGET`;
- **V1 host step**: that padded step against one ``clone()`` of the fields it reads (time <= :data:`STEP_TARGET`),
  and its peak extra memory over the bytes of those fields (<= :data:`STEP_MEMORY_TARGET`).

Two informational rows follow, in rounds of their own after the judged ones (:data:`INFO_REPS` repetitions):

- **V1 host step / verl's GRPO**: the padded step against verl's own ``compute_grpo_outcome_advantage`` (its
  default ``grpo`` estimator) over the same padded rows, per pair;
- **filter admission**: ``mechanism: filter``'s admission of one generation round through the
  ``GenerationRounds`` seam (``group_reward_variance`` -> ``threshold_band``), the round as verl's legacy line and
  TRL hand it over against a clone of the fields it reads, and with verl V1's padding rows against without.

Each pair is measured at every torch thread count the run names (``--threads``: full mode 1 and torch's default,
both judged, as the issue's targets say), rows at more than one thread saying it in their shape.

Every call gets a fresh copy of the fields it reads, built untimed (a host reads a new batch every step). Quick
mode runs a small shape, unjudged, in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .results import Result, measured

#: Issue 36's targets (full mode).
PADDING_TARGET = 1.1
STEP_TARGET = 2.5
STEP_MEMORY_TARGET = 1.5
#: verl pads to a multiple of its dp size x mini-batches: a handful of rows (8 of an 8192-row batch).
PADDING_ROWS = 8
#: Passes the padded step's rounds are timed in, minutes apart (a row reads the median pass: see
#: :func:`_measure_pairs`).
PADDING_PASSES = 3
#: ``(groups, group size, L)``: quick mode, and the issue's production shape.
QUICK_SHAPE = (64, 8, 256)
FULL_SHAPE = (1024, 8, 4096)


def padded_copy(batch: Any, rows: int, seed: int) -> Any:
    """``batch`` with ``rows`` verl-style padding rows inserted at seeded random places (the real rows keep their
    order): an empty mask, the shared uid ``pad<hex>``, rewards 0, row 0's values in every other field."""
    import numpy as np
    import torch

    from dataflex_core import Batch

    bs = len(batch)
    gen = torch.Generator().manual_seed(seed)
    padding = torch.zeros(bs + rows, dtype=torch.bool)
    padding[torch.randperm(bs + rows, generator=gen)[:rows]] = True
    source = torch.zeros(bs + rows, dtype=torch.long)
    source[~padding] = torch.arange(bs)
    tensors = {}
    for name, value in batch.batch.items():
        if name == "is_padding":
            continue
        out = value[source]
        if name == "response_mask" or name in ("rm_scores", "token_level_scores", "token_level_rewards"):
            out[padding] = 0
        tensors[name] = out
    tensors["is_padding"] = padding
    uid = np.asarray(batch.non_tensor_batch["uid"], dtype=object)[source.numpy()]
    uid[padding.numpy()] = "pad" + "0" * 32
    return Batch(tensors, {"uid": uid})


def child_main(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """In the child: build the batches once, then at each torch thread count, for each pair, time and measure the
    three calls."""
    import torch

    import dataflex_core
    from dataflex_core.step import CANONICAL_FIELDS, FieldSupport, HostCapabilities

    from .memory import PeakMeter
    from .pairs import discover_pairs
    from .synthetic import SyntheticGRPO

    pairs = discover_pairs(dataflex_core.get_registry(), spec["only"])
    fields: set[str] = set()
    for pair in pairs:
        fields.update(pair.fields)
    synth = SyntheticGRPO(spec["num_groups"], spec["group_size"], spec["length"], seed=1)
    plain = synth.batch(fields)
    del synth
    plain.batch.pop("is_padding")
    padded = padded_copy(plain, PADDING_ROWS, seed=2)
    host = HostCapabilities(name="benchmark host", fields={name: FieldSupport(True) for name in CANONICAL_FIELDS})
    meter = PeakMeter()
    out = []
    thread_counts = spec.get("threads") or [torch.get_num_threads()]
    for threads in thread_counts:
        torch.set_num_threads(threads)
        out += [row | {"threads": threads} for row in _measure_pairs(pairs, plain, padded, host, meter, spec["reps"])]
    # the informational rows after the judged ones, in rounds of their own
    grpo, why_not = verl_grpo()
    reps = min(spec["reps"], INFO_REPS)
    for threads in thread_counts:
        torch.set_num_threads(threads)
        for pair in pairs:
            row = {"kind": "grpo", "name": pair.name, "threads": threads}
            out.append(row | ({"skip": why_not} if grpo is None else _against_grpo(pair, padded, host, grpo, reps)))
        out.append({"kind": "admission", "name": ADMISSION_NAME, "threads": threads} | _admission(plain, padded, reps))
    return out


#: Repetitions of the informational rows (their figures are sizes, not judged).
INFO_REPS = 3
#: The filter block the admission rows run (DAPO's dynamic sampling: groups whose rewards vary).
ADMISSION_BLOCK = {
    "mechanism": "filter",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.01, "high": 1.0e9}},
}
ADMISSION_NAME = "group_reward_variance+threshold_band"


def verl_grpo() -> tuple[Any, str | None]:
    """verl's own GRPO advantage (``compute_grpo_outcome_advantage``, its default ``grpo`` estimator), or why not."""
    try:
        from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    except Exception as exc:  # noqa: BLE001 - verl absent or broken here: the rows say so
        return None, f"verl's compute_grpo_outcome_advantage not importable here ({type(exc).__name__}: {exc})"
    return compute_grpo_outcome_advantage, None


def _against_grpo(pair: Any, padded: Any, host: Any, grpo: Any, reps: int) -> dict[str, Any]:
    """The padded step against verl's GRPO advantage over the same padded rows (its token rewards: the batch's
    ``rm_scores``, verl's reward without a KL penalty), interleaved; verl reads its fields in place (no copy)."""

    from .pairs import fresh_batch, read_fields
    from .timing import Fresh, measure_interleaved

    try:
        scorer, reweighter = pair.build()
        read = tuple(n for n in read_fields(scorer, reweighter) if n in padded.batch)
        step = pair_step(pair, host)
        rewards, mask = padded.batch["rm_scores"], padded.batch["response_mask"]
        uid = padded.non_tensor_batch["uid"]
        timings = measure_interleaved(
            {
                "grpo": lambda: grpo(rewards, mask, uid),
                "padded": Fresh(lambda b: step.run(b, 1), lambda: fresh_batch(padded, read)),
            },
            reps=reps,
            warmup=1,
        )
        return {"seconds": {k: timings.median(k) for k in ("grpo", "padded")},
                "paired": {"grpo": timings.paired_ratio("padded", "grpo")}}  # fmt: skip
    except ValueError as exc:  # the reweighter refuses this scorer's scores (see the pair case)
        return {"skip": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:  # noqa: BLE001 - one broken pair is a row
        return {"error": f"{type(exc).__name__}: {exc}"}


def _admission(plain: Any, padded: Any, reps: int) -> dict[str, Any]:
    """``mechanism: filter``'s admission of one generation round (what verl's legacy host calls per round, and
    TRL's per step), interleaved: the round as those hosts build it (no padding rows) against a clone of the
    fields it reads, and the same round with verl V1's padding rows against it without (no shipped host pads a
    round; the admission then copies the real rows, as every mechanism that keeps something per prompt did)."""
    from dataflex_core.session import DataFlexSession, GenerationRounds
    from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport

    from .pairs import clone_inputs, fresh_batch
    from .timing import Fresh, measure_interleaved

    try:
        host = HostCapabilities(
            name="benchmark host (generation rounds)",
            seams={LossWeights: SeamSupport(True), GenerationRounds: SeamSupport(True)},
            fields={name: FieldSupport(True) for name in ("response_mask", "rm_scores", "uid")},
        )
        session = DataFlexSession(ADMISSION_BLOCK)
        session.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
        seam = session.seam(GenerationRounds)
        read = ("response_mask", "rm_scores")
        groups = len(set(plain.non_tensor_batch["uid"]))

        def admit(batch: Any) -> Any:
            return seam.admit(seam.rounds(groups), batch, 1)

        timings = measure_interleaved(
            {
                "clone": Fresh(lambda b: clone_inputs(b, read, True), lambda: plain),
                "plain": Fresh(admit, lambda: fresh_batch(plain, read)),
                "padded": Fresh(admit, lambda: fresh_batch(padded, (*read, "is_padding"))),
            },
            reps=reps,
            warmup=1,
        )
        return {"seconds": {k: timings.median(k) for k in ("clone", "plain", "padded")},
                "paired": {"plain": timings.paired_ratio("padded", "plain"),
                           "clone": timings.paired_ratio("plain", "clone")}}  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - a broken admission is a row
        return {"error": f"{type(exc).__name__}: {exc}"}


def pair_step(pair: Any, host: Any) -> Any:
    """The step ``session.run`` runs for verl's V1 adapter with ``pair`` as a reweight block (token unit, GRPO)."""
    from dataflex_core.runner import DataFlexStep, mount_step

    from .pairs import CONTEXT

    block = {"mechanism": "reweight", "scorer": {"name": pair.scorer.name}, "actuator": {"name": pair.reweighter.name}}
    return DataFlexStep(mount_step(block, host, loss_unit="token", ctx=CONTEXT, adv_estimator="grpo"))


class _PairCalls:
    """One pair's three timed calls (the clone, the unpadded step, the padded step) and its rows' figures."""

    def __init__(self, pair: Any, plain: Any, padded: Any, host: Any):
        from .pairs import read_fields

        scorer, reweighter = pair.build()
        read = read_fields(scorer, reweighter)
        self.with_uid = bool(scorer.needs_groups or reweighter.needs_groups)
        self.step = pair_step(pair, host)
        self.plain, self.padded = plain, padded
        self.plain_read = tuple(n for n in read if n in plain.batch)
        self.padded_read = tuple(n for n in read if n in padded.batch)

    def run(self, batch: Any) -> Any:
        return self.step.run(batch, 1)

    def time(self, reps: int) -> Any:
        """One pass: ``reps`` interleaved rounds after one warm-up round, the calls' order rotating."""
        from .pairs import clone_inputs, fresh_batch
        from .timing import Fresh, measure_interleaved

        padded, plain = self.padded, self.plain
        return measure_interleaved(
            {
                "clone": Fresh(lambda b: clone_inputs(b, self.padded_read, self.with_uid), lambda: padded),
                "plain": Fresh(self.run, lambda: fresh_batch(plain, self.plain_read)),
                "padded": Fresh(self.run, lambda: fresh_batch(padded, self.padded_read)),
            },
            reps=reps,
            warmup=1,
            rotate=True,
        )

    def figures(self, passes: list[Any], meter: Any) -> dict[str, Any]:
        """The row's figures from every pass's timings, then one peak of each step."""
        from .memory import field_bytes
        from .pairs import fresh_batch
        from .timing import merged, passes_paired_ratio

        peaks = {}
        for name, template, names in (
            ("plain", self.plain, self.plain_read),
            ("padded", self.padded, self.padded_read),
        ):
            batch = fresh_batch(template, names)
            meter.reset()
            result = self.run(batch)
            peaks[name] = meter.peak_extra()
            del result, batch
        every = merged(passes)
        keys = ("clone", "plain", "padded")
        return {
            "seconds": {k: every.median(k) for k in keys},
            "cpu_seconds": {k: every.median(k, cpu=True) for k in keys},
            "paired": {base: passes_paired_ratio(passes, "padded", base) for base in ("plain", "clone")},
            "pass_ratios": {base: [t.paired_ratio("padded", base) for t in passes] for base in ("plain", "clone")},
            "peak_bytes": peaks,
            "field_bytes": field_bytes(self.padded, self.padded_read, self.with_uid),
        }


def _fault(exc: Exception) -> dict[str, Any]:
    """A pair's row when a call raised: ``skip`` where the reweighter refuses the scorer's scores (a
    ``ValueError``, as in the pair case), ``error`` for anything else (one broken pair is a row)."""
    return {"skip" if isinstance(exc, ValueError) else "error": f"{type(exc).__name__}: {exc}"}


def _measure_pairs(pairs: list[Any], plain: Any, padded: Any, host: Any, meter: Any, reps: int) -> list[dict]:
    """Every pair's rows at the current torch thread count, its ``reps`` rounds split in :data:`PADDING_PASSES`
    passes minutes apart.

    The passes time the pairs in order, in reverse, then in order again (:func:`~.timing.split_reps`), and a row's
    ratio is the median of its passes' medians of per-round ratios (:func:`~.timing.passes_paired_ratio`): a
    spell of the machine lasting a pair's whole measurement (the unpadded step 10-25 % faster than the padded one
    for every round, seen in about one full run in three) falls in one pass only, and the median leaves it out.
    """
    from .timing import split_reps

    calls: dict[str, _PairCalls] = {}
    rows: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        try:
            calls[pair.name] = _PairCalls(pair, plain, padded, host)
        except Exception as exc:  # noqa: BLE001 - ValueError: a refused combination; else a broken pair
            rows[pair.name] = _fault(exc)
    timings: dict[str, list[Any]] = {name: [] for name in calls}
    for index, pass_reps in enumerate(split_reps(reps, PADDING_PASSES)):
        for name in list(calls) if index % 2 == 0 else list(calls)[::-1]:
            if name in rows:
                continue
            try:
                timings[name].append(calls[name].time(pass_reps))
            except Exception as exc:  # noqa: BLE001 - see _fault
                rows[name] = _fault(exc)
    for name, pair_calls in calls.items():
        if name not in rows:
            try:
                rows[name] = pair_calls.figures(timings[name], meter)
            except Exception as exc:  # noqa: BLE001 - see _fault
                rows[name] = _fault(exc)
    return [{"name": pair.name} | rows[pair.name] for pair in pairs]


CHILD_CODE = """
import json, sys
from dataflex_bench.scale_padding import child_main
print(json.dumps(child_main(json.loads(sys.argv[1]))))
"""


def _mib(nbytes: float) -> str:
    return f"{nbytes / (1 << 20):.0f} MiB"


def _rows(row: dict[str, Any], shape: str, reps: int, unjudged: str | None) -> list[Result]:
    name, threads = row["name"], row.get("threads", 1)
    if threads != 1:  # as the pair rows say it
        shape += f" @ {threads} threads"
    kind = row.get("kind", "pair")
    if "skip" in row or "error" in row:
        status = "skip" if "skip" in row else "error"
        label = {"pair": "padded step", "grpo": "V1 host step / verl's GRPO", "admission": "filter admission"}[kind]
        return [Result("scale", f"{label} {name}", shape, status=status, note=row.get("skip") or row["error"])]
    if kind != "pair":
        return _info_rows(row, kind, shape, min(reps, INFO_REPS), unjudged)
    s, peak, fields = row["seconds"], row["peak_bytes"], row["field_bytes"]
    cpu = row.get("cpu_seconds") or s
    # The process's CPU time of the same calls (all threads, page faults included): it moves less than the wall
    # time when other processes share the cores.
    timed = {"threads": threads, "cpu_ratio": cpu["padded"] / cpu["clone"] if cpu["clone"] > 0 else float("inf")}
    # each padded call against its neighbours of the same round (a burst of load slows both); ratio of medians kept
    paired = row.get("paired") or {base: s["padded"] / s[base] for base in ("plain", "clone")}
    of_medians = {f"ratio_of_medians_{base}": s["padded"] / s[base] for base in ("plain", "clone")}
    passes = row.get("pass_ratios") or {}
    return [
        measured(
            "scale", f"padding rows time {name}", shape, median_s=s["padded"], baseline_s=s["plain"],
            ratio=paired["plain"], target=PADDING_TARGET, reps=reps, unjudged=unjudged,
            note=f"the step with {PADDING_ROWS} verl padding rows scattered in the batch against the same without "
            "(geometric mean over two passes of each pass's median of per-round ratios)",
            extra=of_medians | {"pass_ratios": passes.get("plain", [])},
        ),
        measured(
            "scale", f"padding rows peak {name}", shape, median_s=s["padded"], baseline_s=None,
            ratio=peak["padded"] / max(peak["plain"], 1), target=PADDING_TARGET, reps=1, unjudged=unjudged,
            note=f"peak extra {_mib(peak['padded'])} padded, {_mib(peak['plain'])} without",
        ),
        measured(
            "scale", f"V1 host step time {name}", shape, median_s=s["padded"], baseline_s=s["clone"],
            ratio=paired["clone"], target=STEP_TARGET, reps=reps, unjudged=unjudged,
            note=f"the padded step against one clone() of the fields it reads, geometric mean over two passes of "
            f"the median of per-round ratios (CPU time {timed['cpu_ratio']:.2f}x)",
            extra=timed | of_medians | {"pass_ratios": passes.get("clone", [])},
        ),
        measured(
            "scale", f"V1 host step peak {name}", shape, median_s=s["padded"], baseline_s=None,
            ratio=peak["padded"] / fields, target=STEP_MEMORY_TARGET, reps=1, unjudged=unjudged,
            note=f"peak extra {_mib(peak['padded'])} for {_mib(fields)} of fields read",
            extra={"peak_bytes": peak["padded"], "field_bytes": fields},
        ),
    ]  # fmt: skip


def _info_rows(row: dict[str, Any], kind: str, shape: str, reps: int, unjudged: str | None) -> list[Result]:
    """The informational rows: the padded step against verl's GRPO advantage, and the filter admission."""
    name, s, paired = row["name"], row["seconds"], row["paired"]
    if kind == "grpo":
        return [
            measured(
                "scale", f"V1 host step / verl's GRPO {name}", shape, median_s=s["padded"], baseline_s=s["grpo"],
                ratio=paired["grpo"], target=float("inf"), reps=reps, unjudged=unjudged or "info",
                note="the padded step against verl's compute_grpo_outcome_advantage over the same rows (verl's "
                "default grpo estimator; median of per-round ratios)",
            )
        ]  # fmt: skip
    return [
        measured(
            "scale", f"filter admission / clone {name}", shape.replace(f"+{PADDING_ROWS} padding", ""),
            median_s=s["plain"], baseline_s=s["clone"], ratio=paired["clone"], target=float("inf"), reps=reps,
            unjudged=unjudged or "info",
            note="one generation round's admission (mechanism filter), as verl's legacy line and TRL hand it over "
            "(no padding rows), against one clone() of the fields it reads (median of per-round ratios)",
        ),
        measured(
            "scale", f"filter admission padding rows time {name}", shape, median_s=s["padded"],
            baseline_s=s["plain"], ratio=paired["plain"], target=float("inf"), reps=reps,
            unjudged=unjudged or "info",
            note=f"the same round with {PADDING_ROWS} verl V1 padding rows against it without (median of per-round "
            "ratios); no shipped host pads a round",
        ),
    ]  # fmt: skip


def run_padded_step(
    *,
    quick: bool,
    reps: int,
    only: Iterable[str] = (),
    threads: Sequence[int] = (),
    unjudged: str | None = None,
    progress=print,
) -> list[Result]:
    """The padded-step rows of the ``scale`` case, from one fresh child process.

    :param threads: torch thread counts to measure at, in order (empty: the child's default).
    """
    from .memory import CHILD_ENV, unsupported

    reason = unsupported()
    if reason:
        progress(f"  SKIP padded step: {reason}")
        return [Result("scale", "padded step (all pairs)", "-", status="skip", note=reason)]
    groups, size, length = QUICK_SHAPE if quick else FULL_SHAPE
    shape = f"bs={groups * size}+{PADDING_ROWS} padding ({groups}x{size}) L={length}"
    progress(f"  scale: the padded step at {shape} (fresh process)")
    spec = {
        "num_groups": groups, "group_size": size, "length": length, "reps": reps, "only": [s for s in only if s],
        "threads": list(threads),
    }  # fmt: skip
    env = {**os.environ, **CHILD_ENV}
    here = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD_CODE, json.dumps(spec)], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        note = f"child process failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}"
        return [Result("scale", "padded step (all pairs)", shape, status="error", note=note)]
    results = []
    for row in json.loads(proc.stdout.strip().splitlines()[-1]):
        results += _rows(row, shape, reps, unjudged)
    progress(f"  scale: padded step done in {time.perf_counter() - start:.0f} s")
    return results
