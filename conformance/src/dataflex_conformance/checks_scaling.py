"""The scaling check: a component's cost grows about linearly with the rows of the batch.

Hosts call components once per step on the whole global batch (thousands of
rollouts), so a component that is quadratic in the rows (a pairwise matrix, a
Python loop inside a loop) is fine in a unit test and stalls training. The
check measures ``time(2n rows) / time(n rows)`` in one run and fails above
:data:`MAX_RATIO` (2.5: linear work gives about 2, ``n log n`` a little more,
quadratic work 4).

Method, chosen so that a certificate does not flip on a loaded machine:

- CPU time of the calling thread (``time.thread_time``) with torch limited to
  one thread for the measurement, so time the process spends waiting for a
  core (other jobs) is not counted and both sizes run the same code path;
  on CUDA, wall time around synchronised calls.
- ``n`` grows from :data:`START_ROWS` (doubling, up to :data:`MAX_ROWS`) until
  one call costs at least :data:`MIN_SECONDS`, so fixed per-call overhead does
  not hide the growth; each measurement repeats the call until it lasts
  :data:`MIN_SECONDS`.
- One warm-up call per size, then :data:`REPEATS` measurements per size,
  interleaved (n, 2n, n, 2n, ...) so a slow phase of the machine hits both; the
  ratio is of the medians.
- A ratio above the limit is measured again, up to :data:`ATTEMPTS` times, and
  the check fails only if every attempt is above it: noise can make one attempt
  of a linear component slow, while a quadratic one stays near 4 in all.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import torch

from .probe import STEP_ID, Probe

#: Largest accepted ``time(2n) / time(n)``.
MAX_RATIO = 2.5
START_ROWS = 512
MAX_ROWS = 16384
#: Response length of the scaling batches: the growth measured is in rows.
LENGTH = 16
MIN_SECONDS = 0.01
REPEATS = 5
ATTEMPTS = 3


def _timer(device: torch.device) -> Callable[[], float]:
    if device.type == "cuda":

        def wall() -> float:
            torch.cuda.synchronize(device)
            return time.perf_counter()

        return wall
    return time.thread_time


def _measure(call: Callable[[], object], timer: Callable[[], float], repeat: int) -> float:
    start = timer()
    for _ in range(repeat):
        call()
    return (timer() - start) / repeat


def check_scales_linearly(probe: Probe) -> None:
    """Doubling the rows at most about doubles the cost: ``time(2n) / time(n) <= 2.5``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _check(probe)
    finally:
        torch.set_num_threads(threads)


def _prepared(probe: Probe, rows: int) -> Callable[[], object]:
    """A call of a fresh component on a fresh batch of ``rows`` rows (groups of 8, some empty rows)."""
    case = replace(probe.case, bs=rows, length=LENGTH, group_size=8, empty_rows=tuple(range(5, rows, 97)))
    sample = probe.sample(case)
    scores = None if probe.subject.kind == "scorer" else probe.scores(sample, case)
    component = probe.component()
    ctx = sample.ctx()
    if probe.subject.kind == "scorer":
        call = lambda: component.score(sample.batch, STEP_ID, **ctx)  # noqa: E731
    else:
        call = lambda: component.act(scores, sample.batch, step_id=STEP_ID, **ctx)  # noqa: E731
    try:
        call()  # warm-up, and a raise is a failure of this check like of any other
    except Exception as exc:  # noqa: BLE001
        method = "score" if probe.subject.kind == "scorer" else "act"
        raise probe.fail(f"{method}() raised {type(exc).__name__}: {exc} on {rows} rows") from exc
    return call


def _check(probe: Probe) -> None:
    timer = _timer(probe.device)
    rows = START_ROWS
    small = _prepared(probe, rows)
    single = _measure(small, timer, 1)
    while single < MIN_SECONDS and rows * 2 <= MAX_ROWS // 2:
        rows *= 2
        small = _prepared(probe, rows)
        single = _measure(small, timer, 1)
    large = _prepared(probe, 2 * rows)
    repeat = max(1, int(MIN_SECONDS / max(single, 1e-6)))
    ratios = []
    for _ in range(ATTEMPTS):
        t_small, t_large = [], []
        for _ in range(REPEATS):
            t_small.append(_measure(small, timer, repeat))
            t_large.append(_measure(large, timer, repeat))
        ratio = statistics.median(t_large) / max(statistics.median(t_small), 1e-9)
        ratios.append(ratio)
        if ratio <= MAX_RATIO:
            return
    raise probe.fail(
        f"time at {2 * rows} rows / time at {rows} rows = {min(ratios):.2f} (lowest of {ATTEMPTS} measurements, "
        f"{statistics.median(t_large) * 1e3:.3g} ms vs {statistics.median(t_small) * 1e3:.3g} ms), expected "
        f"<= {MAX_RATIO} (cost about linear in the rows; avoid pairwise (bs, bs) work and Python loops over rows)"
    )
