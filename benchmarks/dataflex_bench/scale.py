"""Case ``scale``: the per-prompt ledger, allocation and the curriculum draw at production sizes.

Each row times DataFlex's path as a host runs it, through the session, against the plainest thing that does the
same work, side by side in one process (:func:`~.timing.measure_interleaved`, the median of per-round ratios):

- the ledger of ``mechanism: curriculum`` (``mopps`` + ``learnability``) at 1M and 10M prompts: the checkpoint
  written (``session.encode_state``) against ``torch.save`` of its columns, and read (``check_resume`` +
  ``restore`` into a session mounted beforehand) against ``torch.load`` — target <= 2; the Parquet export and
  import's peak extra memory over the ledger's column bytes, in a fresh process — target <= 0.5 (their times are
  informational rows);
- allocation of 262144 rollouts over 16384 prompts (``greedy_allocation`` of knapsack values, most solve rates 0 or
  1) against one top-k over the marginal-gain matrix of the same levels — target <= 3;
- the curriculum draw (the sampler's ``next_block``) with ``candidates: 4096`` from 1M prompts against from 100k —
  target <= 2; and over every prompt, every posterior observed, against torch's own Beta draw over the rows —
  target <= 3.

Quick mode runs small sizes, unjudged.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from typing import Any

import torch

from .results import Result, measured, skipped
from .timing import measure_interleaved

CHECKPOINT_TARGET = 2.0
PARQUET_MEMORY_TARGET = 0.5
ALLOCATION_TARGET = 3.0
CANDIDATES_TARGET = 2.0
DRAW_TARGET = 3.0


class Prompts:
    """A train dataset of ``n`` prompts with one column, ``index`` (the session's train-dataset protocol)."""

    def __init__(self, n: int) -> None:
        self.ids = list(range(n))

    def __len__(self) -> int:
        return len(self.ids)

    def columns(self) -> list[str]:
        return ["index"]

    def column(self, name: str) -> list[int]:
        return self.ids


def curriculum(n: int, *, candidates: int = 0, batch_size: int = 512, observed: bool = True) -> Any:
    """A session running ``mechanism: curriculum`` over ``n`` prompts, its train sampler built, one step recorded.

    ``observed``: every posterior moved off the prior (both shapes in ``(1, 6)``: the draw's dearest case); else
    every prompt at the prior ``Beta(1, 1)``, as in a run's first pass.
    """
    from dataflex_core.session import DataFlexSession, FieldSupport, HostCapabilities, SeamSupport, TrainSampler

    host = HostCapabilities(
        name="benchmark host", seams={TrainSampler: SeamSupport(True)}, timings=("pre_rollout", "post_reward"),
        fields={"rm_scores": FieldSupport(True)},
    )  # fmt: skip
    block = {
        "mechanism": "curriculum", "prompt_key": "index", "candidates": candidates,
        "scorer": {"name": "mopps"}, "actuator": {"name": "learnability"},
    }  # fmt: skip
    session = DataFlexSession(block)
    session.mount(host, loss_unit="token")
    session.train_sampler(Prompts(n), batch_size=batch_size, seed=0)
    g = torch.Generator().manual_seed(n)
    rows = torch.randint(0, n, (min(n, 512) * 16,), generator=g)
    rewards = torch.rand(len(rows), generator=g, dtype=torch.float64)
    session.ledger.record(rows, rewards, 1, tokens=torch.ones_like(rows))
    if observed:
        table = session.pipeline.scorer.table
        table.grow(n)
        for column in ("alpha", "beta"):
            table.columns[column] += 0.01 + torch.rand(n, generator=g, dtype=torch.float64) * 5
    return session


def _columns(ledger: Any) -> dict[str, torch.Tensor]:
    from dataflex_core.ledger import COLUMNS

    return {"ids": torch.as_tensor(ledger.ids.values), **{c: getattr(ledger, c) for c in COLUMNS}}


def _row(name: str, shape: str, timings, reps: int, target: float | None, unjudged: str | None, note: str) -> Result:
    return measured(
        "scale", name, shape, median_s=timings.median("ours"), baseline_s=timings.median("baseline"),
        ratio=timings.paired_ratio("ours", "baseline"), target=target, reps=reps,
        unjudged=unjudged if target is not None else None, note=note,
    )  # fmt: skip


def ledger_rows(n: int, reps: int, unjudged: str | None, progress) -> list[Result]:
    shape = f"{n:,} prompts"
    progress(f"  scale: the ledger at {shape}")
    session, resumed = curriculum(n), curriculum(n)  # a resume reads into the session the run mounted
    columns = _columns(session.ledger)
    reps = reps * 5 if n <= 1_000_000 else reps  # calls of 10-30 ms at 1M: a median of 7 is the machine's noise
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        session.save(folder, 1)
        plain, parquet, pt = (os.path.join(folder, name) for name in ("columns.pt", "l.parquet", "l.pt"))
        torch.save(columns, plain)

        def save_plain() -> bytes:
            buffer = io.BytesIO()
            torch.save(columns, buffer)
            return buffer.getvalue()

        def resume() -> None:
            resumed.check_resume(folder)
            resumed.restore(folder)

        session.export_ledger(parquet)
        torch.save(columns, pt)
        cases = {
            "checkpoint write": (lambda: session.encode_state(1), save_plain, CHECKPOINT_TARGET),
            "checkpoint read": (resume, lambda: torch.load(plain, weights_only=True), CHECKPOINT_TARGET),
            "Parquet export": (lambda: session.export_ledger(parquet), lambda: torch.save(columns, pt), None),
            "Parquet import": (lambda: resumed.ledger.load(parquet), lambda: torch.load(pt, weights_only=True), None),
        }
        for name, (ours, baseline, target) in cases.items():
            timings = measure_interleaved({"baseline": baseline, "ours": ours}, reps=reps)
            note = "against torch.save / torch.load of the ledger's columns"
            rows.append(_row(f"ledger {name}", shape, timings, reps, target, unjudged, note))
    return rows


def parquet_peaks(n: int) -> dict[str, float]:
    """In a fresh process: the peak resident bytes the Parquet export and import add beside a ledger of ``n``."""
    from .memory import PeakMeter

    session, fresh, warm = curriculum(n, observed=False), curriculum(n, observed=False), curriculum(100)
    ledger = session.ledger
    column_bytes = sum(t.nbytes for t in _columns(ledger).values())
    meter = PeakMeter()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "l.parquet")
        warm.export_ledger(os.path.join(folder, "warm.parquet"))  # pyarrow's imports are not the export's cost
        warm.ledger.load(os.path.join(folder, "warm.parquet"))
        meter.reset()
        start = time.perf_counter()
        session.export_ledger(path)
        out = {"export_s": time.perf_counter() - start, "export": meter.peak_extra()}
        meter.reset()
        start = time.perf_counter()
        fresh.ledger.load(path)
        out.update(import_s=time.perf_counter() - start, **{"import": meter.peak_extra()})
    same = all(torch.equal(a, b) for a, b in zip(_columns(ledger).values(), _columns(fresh.ledger).values()))
    return {"column_bytes": column_bytes, "same": int(same), **out}


def parquet_memory_rows(n: int, unjudged: str | None, progress) -> list[Result]:
    from .memory import MIB, in_child, unsupported

    shape = f"{n:,} prompts"
    reason = unsupported()
    if reason:
        return [skipped("scale", "ledger Parquet peak memory", shape, reason, PARQUET_MEMORY_TARGET)]
    progress(f"  scale: the ledger's Parquet peak memory at {shape} (fresh process)")
    out = in_child("scale.parquet_peaks", n)
    return [
        measured(
            "scale",
            f"ledger Parquet {name} peak memory",
            shape,
            median_s=out[f"{name}_s"],
            ratio=out[name] / out["column_bytes"],
            target=PARQUET_MEMORY_TARGET,
            reps=1,
            unjudged=unjudged or (None if out["same"] else "error"),
            note=f"peak extra {out[name] / MIB:.0f} MiB over {out['column_bytes'] / MIB:.0f} MiB of columns"
            + ("" if out["same"] else "; the import differs from the ledger exported"),
        )  # fmt: skip
        for name in ("export", "import")
    ]


def allocation_row(prompts: int, budget: int, reps: int, unjudged: str | None, progress) -> Result:
    from dataflex_allocators.knapsack import knapsack_value

    from dataflex_core import greedy_allocation

    progress(f"  scale: allocation of {budget} rollouts over {prompts} prompts")
    g = torch.Generator().manual_seed(0)
    p = torch.rand(prompts, generator=g, dtype=torch.float64)
    extreme = torch.rand(prompts, generator=g) < 0.7
    p[extreme] = (torch.rand(int(extreme.sum()), generator=g) < 0.5).double()

    def ours() -> torch.Tensor:
        return greedy_allocation(lambda n: knapsack_value(p, n), prompts, budget, 2, None, batched=True)

    levels, spare = int(ours().max()) - 1, budget - 2 * prompts

    def topk() -> torch.Tensor:
        n = torch.arange(2, 2 + levels + 1, dtype=torch.float64).unsqueeze(1)
        return torch.topk(torch.diff(knapsack_value(p.unsqueeze(0), n), dim=0).reshape(-1), spare).indices

    timings = measure_interleaved({"baseline": topk, "ours": ours}, reps=reps)
    note = f"knapsack values; against one top-k over the ({levels} levels x prompts) marginal-gain matrix"
    shape = f"{prompts} prompts / {budget} rollouts"
    return _row("allocation", shape, timings, reps, ALLOCATION_TARGET, unjudged, note)


def draw_rows(small: int, large: int, candidates: int, reps: int, unjudged: str | None, progress) -> list[Result]:
    progress(f"  scale: curriculum draws from {small:,} and {large:,} prompts")
    batch = min(512, candidates)
    few, many = (curriculum(n, candidates=candidates, batch_size=batch).sampler for n in (small, large))
    every = curriculum(large, batch_size=batch)
    table = every.pipeline.scorer.table.columns
    alpha, beta = table["alpha"], table["beta"]
    # draws of 2-5 ms: ten times the repetitions
    candidates_timings = measure_interleaved({"baseline": few.next_block, "ours": many.next_block}, reps=10 * reps)
    beta_timings = measure_interleaved(
        {"baseline": lambda: torch.distributions.Beta(alpha, beta).sample(), "ours": every.sampler.next_block},
        reps=reps,
    )
    return [
        _row(
            f"curriculum draw, candidates: {candidates}", f"{large:,} vs {small:,} prompts", candidates_timings,
            10 * reps, CANDIDATES_TARGET, unjudged, f"the sampler's next_block ({batch} prompts); mopps, learnability",
        ),
        _row(
            "curriculum draw, every prompt vs torch's Beta", f"{large:,} prompts", beta_timings, reps, DRAW_TARGET,
            unjudged, "next_block without candidates, every posterior observed, against torch.distributions.Beta",
        ),
    ]  # fmt: skip


def run_scale(*, quick: bool, reps: int, unjudged: str | None = None, progress=print) -> list[Result]:
    rows: list[Result] = []
    for n in (20_000,) if quick else (1_000_000, 10_000_000):
        rows += ledger_rows(n, reps, unjudged, progress)
        rows += parquet_memory_rows(n, unjudged, progress)
    prompts, budget = (256, 4096) if quick else (16384, 262144)
    rows.append(allocation_row(prompts, budget, reps, unjudged, progress))
    small, large, candidates = (2_000, 20_000, 256) if quick else (100_000, 1_000_000, 4096)
    return rows + draw_rows(small, large, candidates, reps, unjudged, progress)
