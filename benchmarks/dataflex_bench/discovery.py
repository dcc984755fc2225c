"""Case ``discovery``: what DataFlex adds to start-up, in fresh interpreters — target <= 1.15.

Each repetition starts new Python processes (nothing in ``sys.modules``) and times, inside each, ``import torch``
alone or ``import dataflex_core`` plus loading every installed plugin (which imports torch too); interpreter
start-up is outside both timers. The row is wall time: what a user waits.

Both timers end with one full garbage collection, Python's automatic collector off until then: importing torch
leaves a heap whose first full collection (70-80 ms) the automatic collector starts right after, inside whichever
import comes next. Left automatic, the row charged DataFlex for collecting torch's objects (1.11-1.16 for about
55 ms of its own work); with one collection in each timer each side pays for its own heap.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from dataflex_core import ENV_ALLOW_PLUGINS, ENV_BLOCK_PLUGINS, ENV_DISABLE_AUTOLOAD, ENV_STRICT

from .results import Result, measured
from .timing import Timings

DISCOVERY_TARGET = 1.15

#: Opens both children: the automatic collector off, full collections counted (``gc.callbacks``).
TIMED_START = """
import gc, json, time
full = []
gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2 and full.append(1))
gc.disable()
start = time.perf_counter()
"""

#: Closes both timers: one full collection of what the child imported, timed on its own too.
TIMED_END = """
collecting = time.perf_counter()
gc.collect()
ended = time.perf_counter()
timed = {"seconds": ended - start, "collect_seconds": ended - collecting, "full_collections": len(full)}
"""

TORCH_ONLY = (
    TIMED_START
    + """
import torch
"""
    + TIMED_END
    + """
print(json.dumps(timed))
"""
)

WITH_PLUGINS = (
    TIMED_START
    + """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import dataflex_core
    manager = dataflex_core.get_plugin_manager()
    registry = manager.registry()
"""
    + TIMED_END
    + """
print(json.dumps({
    **timed,
    "plugins": sorted(f"{i.dist}=={i.version}" if i.dist else i.name for i in manager.plugin_infos.values()),
    "components": sum(1 for _ in registry),
    "failures": [f.message for f in manager.failures],
}))
"""
)

#: Variables that would change what discovery loads; the child runs without them.
DISCOVERY_ENV = (ENV_DISABLE_AUTOLOAD, ENV_BLOCK_PLUGINS, ENV_ALLOW_PLUGINS, ENV_STRICT)


def _child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in DISCOVERY_ENV}


def run_child(code: str, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env or _child_env(), check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child interpreter failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out.get("full_collections") != 1:
        raise RuntimeError(
            f"the child's timer held {out.get('full_collections')} full garbage collections, not the one it ends "
            "with: something in the import turned Python's automatic collector back on (gc.enable()), so the two "
            "sides no longer pay for one collection each"
        )
    return out


def run_discovery(*, reps: int, warmup: int = 1, unjudged: str | None = None, progress=print) -> list[Result]:
    env = _child_env()
    timings = Timings({"torch": [], "plugins": []})
    collect_ms: dict[str, list[float]] = {"torch": [], "plugins": []}
    for round_index in range(warmup + reps):
        sides = {"torch": run_child(TORCH_ONLY, env), "plugins": run_child(WITH_PLUGINS, env)}
        ms = {side: f"{out['seconds'] * 1e3:.0f} ms" for side, out in sides.items()}
        progress(
            f"  round {round_index + 1}/{warmup + reps}: import torch {ms['torch']}, with DataFlex {ms['plugins']}"
        )
        if round_index >= warmup:
            for side, out in sides.items():
                timings.samples[side].append(out["seconds"])
                collect_ms[side].append(out["collect_seconds"] * 1e3)
    last = sides["plugins"]
    plugins, failures = last["plugins"], last["failures"]
    note = f"loaded: {', '.join(plugins) or 'no plugins'}"
    result = measured(
        "discovery", "import dataflex_core + plugins / import torch",
        f"{len(plugins)} plugins, {last['components']} components",
        median_s=timings.median("plugins"), baseline_s=timings.median("torch"),
        ratio=timings.median("plugins") / timings.median("torch"), target=DISCOVERY_TARGET, reps=reps,
        unjudged="error" if failures else unjudged, note=note + "".join(f"; FAILED: {f}" for f in failures),
        extra={
            "plugins": plugins, "failures": failures,
            "collect_ms": {side: statistics.median(ms) for side, ms in collect_ms.items()},
        },
    )  # fmt: skip
    return [result]
