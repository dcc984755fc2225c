"""Case 3: what discovery adds to start-up, in fresh interpreters.

Each repetition starts a new Python process (nothing cached in
``sys.modules``) and times, inside it, either ``import torch`` alone or
``import dataflex_core`` plus loading every installed plugin through the
registry (which imports torch too). Interpreter start-up is outside both
timers, so the ratio is the import work only. The two kinds alternate. The
judged ratio is wall time (what a user waits); the CPU-time ratio is noted
beside it because it moves less when other processes share the cores.

Both timers end with one full garbage collection, with Python's automatic
collector off until then. Importing torch leaves a large heap whose first full
collection (70-80 ms on the bench machine) the automatic collector starts when
its allocation thresholds are crossed: just after ``import torch`` ends, so
inside whichever import comes next. Left automatic, the row charged DataFlex
for collecting torch's objects (1.11-1.16 for about 55 ms of DataFlex's own
work on a 1 s torch import); with one collection in each timer, each side pays
for collecting its own heap, and DataFlex's objects are in its side's.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from dataflex_core import ENV_ALLOW_PLUGINS, ENV_BLOCK_PLUGINS, ENV_DISABLE_AUTOLOAD, ENV_STRICT

from .results import Result, measured

DISCOVERY_TARGET = 1.15

#: Opens both children: the automatic collector off, full collections counted (``gc.callbacks``).
TIMED_START = """
import gc, json, time
full = []
gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2 and full.append(1))
gc.disable()
start, cpu = time.perf_counter(), time.process_time()
"""

#: Closes both timers: one full collection of what the child imported, timed on its own too.
TIMED_END = """
collecting = time.perf_counter()
gc.collect()
ended = time.perf_counter()
seconds, cpu_seconds = ended - start, time.process_time() - cpu
timed = {"seconds": seconds, "cpu_seconds": cpu_seconds, "collect_seconds": ended - collecting, "full_collections": len(full)}
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
    torch_s: list[float] = []
    plugins_s: list[float] = []
    torch_cpu: list[float] = []
    plugins_cpu: list[float] = []
    collect_ms: dict[str, list[float]] = {"torch": [], "with_plugins": []}
    last: dict = {}
    for round_index in range(warmup + reps):
        base = run_child(TORCH_ONLY, env)
        last = run_child(WITH_PLUGINS, env)
        if round_index >= warmup:
            torch_s.append(base["seconds"])
            plugins_s.append(last["seconds"])
            torch_cpu.append(base["cpu_seconds"])
            plugins_cpu.append(last["cpu_seconds"])
            collect_ms["torch"].append(base["collect_seconds"] * 1e3)
            collect_ms["with_plugins"].append(last["collect_seconds"] * 1e3)
        progress(
            f"  round {round_index + 1}/{warmup + reps}{' (warm-up)' if round_index < warmup else ''}: "
            f"import torch {base['seconds'] * 1e3:.0f} ms, dataflex_core + plugins {last['seconds'] * 1e3:.0f} ms "
            f"(each with its full collection: {base['collect_seconds'] * 1e3:.0f} / {last['collect_seconds'] * 1e3:.0f} ms)"
        )
    median_plugins, median_torch = statistics.median(plugins_s), statistics.median(torch_s)
    plugins = last.get("plugins", [])
    cpu_ratio = statistics.median(plugins_cpu) / statistics.median(torch_cpu)
    note = f"CPU-time ratio {cpu_ratio:.2f}; loaded: {', '.join(plugins) or 'no plugins installed'}"
    if last.get("failures"):
        note += f"; FAILED: {'; '.join(last['failures'])}"
    result = measured(
        "discovery",
        "import dataflex_core + plugins / import torch",
        f"{len(plugins)} plugins, {last.get('components', 0)} components",
        median_s=median_plugins,
        baseline_s=median_torch,
        ratio=median_plugins / median_torch,
        target=DISCOVERY_TARGET,
        reps=reps,
        unjudged=unjudged,
        note=note,
        extra={
            "plugins": plugins,
            "failures": last.get("failures", []),
            "cpu_ratio": cpu_ratio,
            # the one full collection each timer ends with (module docstring)
            "collect_ms": {side: statistics.median(ms) for side, ms in collect_ms.items()},
        },
    )
    if last.get("failures"):
        result.status = "error"
    return [result]
