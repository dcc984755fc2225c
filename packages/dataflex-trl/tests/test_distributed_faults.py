"""Two accelerate processes (CPU, gloo) with one at fault (issue 58, owed case 6a): one process raising inside a
DataFlex call of the step, or the processes' replicas drawing other prompts. The run stops on every process with
an error naming the cause, before any optimizer step: no process trains a batch the others do not.

A mechanism that runs on the main process alone (``reweight``) broadcasts its result: where the main process
raises an error that does not unpickle, or its result does not pickle, every process stops naming the cause (the
other process saw a raw ``TypeError`` of unpickling, or a gloo error as the main process left the broadcast). (A
component raising there is re-raised on every process by ``distributed.from_main``: ``test_hostile``.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("distributed_faults.py")
PROCESSES = 2


def run(tmp_path: Path, fault: str) -> list[dict]:
    """Each process's record (the error that stopped it, the optimizer steps it took)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SCRIPT.parent)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={PROCESSES}",
               str(SCRIPT), str(tmp_path), fault]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    records = [tmp_path / f"rank{rank}.json" for rank in range(PROCESSES)]
    assert all(r.exists() for r in records), done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(r.read_text()) for r in records]


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("raise", r"step 1 of mechanism curriculum failed on process 1 of 2: .*the scorer's store is unreachable"),
        ("disagree", r"the processes disagree on the prompts mechanism curriculum's .* process\(es\) \[1\] of 2"),
    ],
)  # fmt: skip
def test_a_process_at_fault_stops_every_process_naming_the_cause_before_any_training(tmp_path, fault, cause):
    records = run(tmp_path, fault)
    for rank, record in enumerate(records):
        assert record["error"] is not None, f"process {rank} trained on: {record}"
        assert record["error"]["type"] == "DataFlexError", record
        assert record["steps"] == 0, f"process {rank} took an optimizer step: {record}"
        assert re.search(cause, record["error"]["message"]), record["error"]["message"]


@pytest.mark.parametrize(
    ("fault", "main_cause", "cause"),
    [
        ("main_raise", r"^the mechanism's store at db.internal is unreachable from process 0$",
         r"StoreError: the mechanism's store at db.internal is unreachable from process 0"),
        ("main_unpicklable", r"its value cannot be sent to the other processes \(TypeError: cannot pickle",
         r"its value cannot be sent to the other processes \(TypeError: cannot pickle '_thread.lock'"),
    ],
)  # fmt: skip
def test_a_main_process_failure_before_the_broadcast_stops_every_process_naming_it(tmp_path, fault, main_cause, cause):
    main, other = run(tmp_path, fault)
    assert main["error"] is not None and re.search(main_cause, main["error"]["message"]), main
    assert other["error"] is not None, f"process 1 trained on: {other}"
    assert other["error"]["type"] == "DataFlexError", other
    assert re.search(
        rf"step 1 of mechanism reweight failed on the main process \(process 0 of 2\): {cause}",
        other["error"]["message"],
    ), other["error"]["message"]
    assert main["steps"] == other["steps"] == 0, (main, other)
