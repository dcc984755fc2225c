"""``dataflex ledger filter`` at scale: a synthetic dataset and ledger of ``n`` prompts, the filter's peak memory.

:func:`measure_filter` writes both files in batches (never ``n`` rows of text at once), then runs the filter in a
fresh process and returns its time and peak resident memory: what the bench's ``scale`` case reports at 10M
prompts. The dataset has an integer ``index`` column and a prompt text of :data:`PROMPT_CHARS` characters; the
ledger is one a run over it could have written (a third never seen, the rest with 8 rollouts a visit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np

#: Characters of each synthetic prompt.
PROMPT_CHARS = 200
#: Rows per batch the synthetic files are written in.
WRITE_BATCH = 1 << 17
#: Rollouts per visit in the synthetic ledger.
GROUP = 8


def write_synthetic(prompts: int, folder: str, seed: int = 0) -> tuple[str, str]:
    """``(dataset, ledger)``: Parquet files of ``prompts`` rows, written batch by batch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dataflex_core.ledger_file import COLUMNS, LEDGER_FORMAT, PARQUET_VERSION, ids_digest

    rng = np.random.default_rng(seed)
    dataset, ledger = os.path.join(folder, "train.parquet"), os.path.join(folder, "ledger.parquet")
    ids = np.arange(prompts, dtype=np.int64)  # sorted already: the digest reads them as they are
    header = {
        "format": LEDGER_FORMAT, "version": PARQUET_VERSION, "prompt_key": "index", "prompts": prompts,
        "ids_digest": ids_digest(ids), "success_threshold": None, "last_step": 100,
    }  # fmt: skip
    ledger_schema = pa.schema(
        [pa.field("id", pa.int64())]
        + [pa.field(name, pa.float64() if dtype.is_floating_point else pa.int64()) for name, (dtype, _) in COLUMNS.items()],
        metadata={"dataflex": json.dumps(header)},
    )  # fmt: skip
    data_schema = pa.schema([pa.field("index", pa.int64()), pa.field("prompt", pa.string())])
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    with pq.ParquetWriter(dataset, data_schema) as rows, pq.ParquetWriter(ledger, ledger_schema) as book:
        for start in range(0, prompts, WRITE_BATCH):
            index = ids[start : start + WRITE_BATCH]
            n = len(index)
            text = letters[rng.integers(0, 26, size=(n, PROMPT_CHARS))].tobytes()
            offsets = np.arange(n + 1, dtype=np.int32) * PROMPT_CHARS
            prompt = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text))
            rows.write_table(pa.table([pa.array(index), prompt], schema=data_schema))
            visits = np.where(rng.random(n) < 1 / 3, 0, rng.integers(1, 4, size=n))
            rollouts = visits * GROUP
            successes = np.minimum(rng.binomial(rollouts, rng.random(n)), rollouts).astype(np.float64)
            columns = {name: np.full(n, fresh, dtype=np.float64 if dtype.is_floating_point else np.int64)
                       for name, (dtype, fresh) in COLUMNS.items()}  # fmt: skip
            columns.update(
                times_sampled=visits, rollouts=rollouts, rollouts_trained=rollouts, successes=successes,
                reward_sum=successes, reward_sq_sum=successes, last_sampled_step=np.where(visits > 0, 100, -1),
                last_success_rate=np.where(rollouts > 0, successes / np.maximum(rollouts, 1), 0.0),
            )  # fmt: skip
            book.write_table(pa.table([pa.array(index)] + [pa.array(columns[c]) for c in COLUMNS],
                                      schema=ledger_schema))  # fmt: skip
    return dataset, ledger


def _filter_and_measure(ledger: str, dataset: str, output: str) -> dict[str, Any]:
    """Run in the child process: the filter, its seconds and the process's peak resident memory."""
    import resource
    import time

    from .filter import KeepRule, filter_dataset

    started = time.perf_counter()
    report = filter_dataset(ledger, dataset, output, KeepRule(solve_rate=(0.05, 0.95), keep_unseen=False))
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"seconds": round(seconds, 2), "peak_rss_mib": round(peak_kib / 1024, 1), **report.as_dict()}


def measure_filter(prompts: int, folder: str) -> dict[str, Any]:
    """Write a synthetic dataset and ledger of ``prompts`` rows in ``folder``, filter in a fresh process; its
    ``{"prompts", "seconds", "peak_rss_mib", "rows", "kept", "dropped", "dataset_mib"}``."""
    dataset, ledger = write_synthetic(prompts, folder)
    output = os.path.join(folder, "kept.parquet")
    code = (
        "import json, sys; from dataflex_lab.ledger.scale import _filter_and_measure; "
        "print(json.dumps(_filter_and_measure(*sys.argv[1:])))"
    )
    done = subprocess.run([sys.executable, "-c", code, ledger, dataset, output], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the filter failed at {prompts} prompts:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"prompts": prompts, "dataset_mib": round(os.path.getsize(dataset) / 2**20, 1), **result}


if __name__ == "__main__":  # python -m dataflex_lab.ledger.scale N FOLDER
    print(json.dumps(measure_filter(int(sys.argv[1]), sys.argv[2])))
