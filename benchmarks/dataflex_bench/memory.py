"""Case ``memory``: the V1 host step's peak extra memory over the bytes of the fields it reads — target <= 1.5.

The step is ``session.run`` on 8192 rows x 4096 tokens with verl's padding rows scattered in them, once per
component (each with the partner the ``components`` case picks); the row is the largest. The peak is the kernel's
(every allocation counts: torch's, numpy's, Python's), in a fresh child process (:func:`in_child`) with glibc's
mmap threshold fixed at 64 KiB: before each step the free heap goes back to the kernel (``malloc_trim``) and the
peak is reset (``5`` into ``/proc/self/clear_refs``), after it ``VmHWM`` is read, so the resident size follows the
live bytes, not what the allocator keeps for reuse.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .results import Result, measured, skipped

MEMORY_TARGET = 1.5
#: The child's allocator: every buffer above 64 KiB mapped when allocated and unmapped when freed.
CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 16)}
CLEAR_REFS, STATUS = Path("/proc/self/clear_refs"), Path("/proc/self/status")
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


class PeakMeter:
    """Peak resident bytes added since :meth:`reset`."""

    def reset(self) -> None:
        gc.collect()
        try:  # free heap kept by glibc would serve the next buffers without being counted
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):
            pass
        CLEAR_REFS.write_text("5")  # VmHWM := VmRSS
        self.start_kib = _status_kib("VmRSS")

    def peak_extra(self) -> int:
        return max(0, _status_kib("VmHWM") - self.start_kib) * 1024


def in_child(function: str, argument: Any) -> Any:
    """``dataflex_bench.<function>(argument)`` in a fresh interpreter with :data:`CHILD_ENV`; its JSON result."""
    module, name = function.rsplit(".", 1)
    code = f"import json, sys\nfrom dataflex_bench.{module} import {name} as f\n"
    code += "print(json.dumps(f(json.loads(sys.argv[1]))))"
    env = {**os.environ, **CHILD_ENV}
    here = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    command = [sys.executable, "-c", code, json.dumps(argument)]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"child process failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def step_peaks(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """In the child: each component's V1 host step on the padded batch, its peak extra bytes and field bytes."""
    import dataflex_core

    from .components import blocks, first_running
    from .synthetic import SyntheticGRPO, field_bytes, fresh, padded

    check = SyntheticGRPO(8, 4, 16, seed=0)
    synth = SyntheticGRPO(*spec["shape"], seed=1)
    meter = PeakMeter()
    out = []
    for label, candidates in blocks(dataflex_core.get_registry()):
        block, session = first_running(candidates, check.batch) if spec["only"] in label else (None, None)
        if block is None:
            continue
        fields = session.fields
        batch = padded(synth.batch(fields))
        session.run(fresh(batch), 1)  # once untimed: lazy imports are not a step's cost
        meter.reset()
        result = session.run(batch, 2)
        peak = meter.peak_extra()
        del result
        out.append({"name": label, "peak_bytes": peak, "field_bytes": field_bytes(batch, [*fields, "is_padding"])})
        del batch
    return out


def run_memory(*, quick: bool, only: str = "", unjudged: str | None = None, progress=print) -> list[Result]:
    from .components import PRODUCTION, QUICK_PRODUCTION
    from .synthetic import PADDING_ROWS, shape_label

    shape = QUICK_PRODUCTION if quick else PRODUCTION
    label = f"{shape_label(*shape)} + {PADDING_ROWS} padding rows"
    name = "V1 host step's peak extra memory / fields read, the largest over the components"
    reason = unsupported()
    if reason:
        return [skipped("memory", name, label, reason, MEMORY_TARGET)]
    progress(f"  memory: every component's V1 host step at {label} (fresh process)")
    peaks = in_child("memory.step_peaks", {"shape": list(shape), "only": only})
    if not peaks:
        return [skipped("memory", name, label, "no component's step runs", MEMORY_TARGET)]
    worst = max(peaks, key=lambda row: row["peak_bytes"] / row["field_bytes"])
    return [
        measured(
            "memory",
            name,
            label,
            ratio=worst["peak_bytes"] / worst["field_bytes"],
            target=MEMORY_TARGET,
            reps=1,
            unjudged=unjudged,
            note=f"the largest is {worst['name']}'s: {worst['peak_bytes'] / MIB:.0f} MiB for "
            f"{worst['field_bytes'] / MIB:.0f} MiB of fields",
            extra={"peaks": peaks},
        )  # fmt: skip
    ]
