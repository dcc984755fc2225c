"""Case 5: the step hook's peak extra memory, over the bytes of the fields it reads — target <= 2.

For every scorer + reweighter pair, the host's per-step work without the
framework's I/O (``dataflex_core.step``: prepare the batch, score, act,
check, normalise to mean one, metrics) runs on a synthetic batch, and the
peak resident memory it adds is compared with the bytes of the fields it
reads (``response_mask`` and every field in either component's ``requires``).

The peak is read from the kernel, so every allocation counts (torch's, numpy's,
Python's): each shape runs in a fresh child process that builds the batch,
then for each pair resets the process's peak resident size (``5`` written to
``/proc/self/clear_refs``), notes the resident size, runs the step and reads
the peak (``VmHWM`` in ``/proc/self/status``). The child runs with glibc's
mmap threshold fixed at 64 KiB, so every buffer above that is mapped when
allocated and unmapped when freed: the resident size then follows the live
bytes, not what the allocator happens to keep for reuse. glibc still serves a
request from free heap it already holds (the threshold only decides how the
heap grows), so before each measurement the free heap is handed back to the
kernel (``malloc_trim(0)``): a buffer the step allocates there is then counted
when it is touched. torch's CPU allocator caches nothing, so a freed tensor
leaves at once.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .results import Result, measured

MEMORY_TARGET = 2.0
#: The child's allocator: map everything above 64 KiB, so freed buffers leave the resident set.
CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 16)}
CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")
MIB = 1 << 20


def _status_kib(field: str) -> int:
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} is not in {STATUS}")


def unsupported() -> str | None:
    """Why peak memory cannot be measured here, or None."""
    if not sys.platform.startswith("linux"):
        return f"peak resident memory is read from /proc (Linux); this is {sys.platform}"
    try:
        CLEAR_REFS.write_text("5")
        _status_kib("VmHWM")
    except (OSError, RuntimeError) as exc:
        return f"cannot reset the peak resident size through {CLEAR_REFS}: {exc}"
    return None


def _trim_heap() -> None:
    """Hand glibc's free heap pages back to the kernel (no-op without glibc)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeakMeter:
    """Peak resident bytes added since :meth:`reset`."""

    def reset(self) -> None:
        gc.collect()
        _trim_heap()  # free heap the earlier calls left would otherwise serve the step without being counted
        CLEAR_REFS.write_text("5")  # VmHWM := VmRSS
        self.start_kib = _status_kib("VmRSS")

    def peak_extra(self) -> int:
        return max(0, _status_kib("VmHWM") - self.start_kib) * 1024


def hook_for(pair, context: dict[str, Any]) -> tuple[Callable[[Any], Any], str]:
    """The host's per-step work for ``pair`` without I/O, and what it is (for the row's note)."""
    try:
        from dataflex_core.step import CANONICAL_FIELDS, DataFlexStep, FieldSupport, HostCapabilities, mount_step
    except ImportError:
        return _components_only(pair, context), "prepare_batch, score, act (dataflex_core.step not installed)"
    host = HostCapabilities(name="benchmark host", fields={name: FieldSupport(True) for name in CANONICAL_FIELDS})
    block = {"mechanism": "reweight", "scorer": {"name": pair.scorer.name}, "actuator": {"name": pair.reweighter.name}}
    mounted = mount_step(block, host, loss_unit="token", ctx=context, adv_estimator="grpo")
    step = DataFlexStep(mounted)
    return (lambda batch: step.run(batch, 0)), "dataflex_core.step DataFlexStep.run, token unit"


def _components_only(pair, context: dict[str, Any]) -> Callable[[Any], Any]:
    from dataflex_core import prepare_batch

    scorer, reweighter = pair.build()

    def run(batch):
        prepare_batch(batch)
        return reweighter.act(scorer.score(batch, 0, **context), batch, step_id=0, **context)

    return run


def field_bytes(batch, fields: Iterable[str], with_uid: bool) -> int:
    """Bytes of the tensors (and the uid array's pointers) the hook reads."""
    total = sum(batch.batch[name].numel() * batch.batch[name].element_size() for name in fields)
    if with_uid:
        total += batch.non_tensor_batch["uid"].nbytes
    return total


def child_main(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """In the child: build the batch, measure every pair's peak; one dict per pair."""
    import dataflex_core

    from .pairs import CONTEXT, discover_pairs, read_fields
    from .synthetic import SyntheticGRPO

    pairs = discover_pairs(dataflex_core.get_registry(), spec["only"])
    fields: set[str] = set()
    for pair in pairs:
        fields.update(pair.fields)
    synth = SyntheticGRPO(spec["num_groups"], spec["group_size"], spec["length"], seed=1)
    batch = synth.batch(fields)
    del synth
    meter = PeakMeter()
    warmed = False
    out = []
    for pair in pairs:
        row: dict[str, Any] = {"name": pair.name}
        try:
            scorer, reweighter = pair.build()
            read = read_fields(scorer, reweighter)
            with_uid = bool(scorer.needs_groups or reweighter.needs_groups)
            hook, what = hook_for(pair, CONTEXT)
            row.update(fields=list(read), field_bytes=field_bytes(batch, read, with_uid), hook=what)
            if not warmed:  # once untimed: lazy imports and thread pools are not a step's cost
                hook(batch)
                batch.meta_info.clear()
                warmed = True
            meter.reset()
            start = time.perf_counter()
            result = hook(batch)
            row["seconds"] = time.perf_counter() - start
            row["peak_bytes"] = meter.peak_extra()
            del result
        except ValueError as exc:  # the reweighter refuses this scorer's scores (see the pair case)
            row["skip"] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - one broken pair is a row
            row["error"] = f"{type(exc).__name__}: {exc}"
        batch.meta_info.clear()
        out.append(row)
    return out


CHILD_CODE = """
import json, sys
from dataflex_bench.memory import child_main
print(json.dumps(child_main(json.loads(sys.argv[1]))))
"""


def run_memory(
    shapes, *, only: Iterable[str] = (), unjudged: str | None = None, progress: Callable[[str], None] = print
) -> list[Result]:
    """One fresh child per shape; a row per pair and shape."""
    reason = unsupported()
    if reason:
        progress(f"  SKIP memory: {reason}")
        return [Result("memory", "(all pairs)", "-", status="skip", target=MEMORY_TARGET, note=reason)]
    env = {**os.environ, **CHILD_ENV}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH")])
    )
    results: list[Result] = []
    for shape in shapes:
        spec = {
            "num_groups": shape.num_groups,
            "group_size": shape.group_size,
            "length": shape.length,
            "only": [s for s in only if s],
        }
        progress(f" shape {shape.label} (fresh process)")
        proc = subprocess.run(
            [sys.executable, "-c", CHILD_CODE, json.dumps(spec)], capture_output=True, text=True, env=env, check=False
        )
        if proc.returncode != 0:
            note = f"child process failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}"
            results.append(Result("memory", "(all pairs)", shape.label, status="error", note=note))
            continue
        for row in json.loads(proc.stdout.strip().splitlines()[-1]):
            result = _row(row, shape.label, unjudged)
            progress(f"  {result.name}: {result.status} {result.note}")
            results.append(result)
    return results


def _size(nbytes: int) -> str:
    return f"{nbytes / MIB:.0f} MiB" if nbytes >= 10 * MIB else f"{nbytes / 1024:.0f} KiB"


def _row(row: dict[str, Any], shape: str, unjudged: str | None) -> Result:
    name = row["name"]
    if "skip" in row:
        note = f"not a usable combination, the reweighter rejects these scores: {row['skip']}"
        return Result("memory", name, shape, status="skip", note=note)
    if "error" in row:
        return Result("memory", name, shape, status="error", note=row["error"])
    peak, fields = row["peak_bytes"], row["field_bytes"]
    note = f"peak extra {_size(peak)} for {_size(fields)} of fields read; {row['hook']}"
    return measured(
        "memory",
        name,
        shape,
        median_s=row["seconds"],
        baseline_s=None,
        ratio=peak / fields,
        target=MEMORY_TARGET,
        reps=1,
        unjudged=unjudged,
        note=note,
        extra={"peak_bytes": peak, "field_bytes": fields, "fields": row["fields"], "hook": row["hook"]},
    )
