"""Under accelerate with 2 CPU processes (gloo), the weights equal those of 1 process on the same batch.

Each process holds half of the generation batch; group statistics and the
mean-one normalisation must see all of it (gathered, as TRL gathers rewards
for its advantages), and each process must get its own rows back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("distributed_step.py")


def run(out: Path, processes: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SCRIPT.parent)}
    if processes == 1:
        command = [sys.executable, str(SCRIPT), str(out)]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                   str(SCRIPT), str(out)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return torch.load(out, weights_only=False)


def test_two_processes_give_the_weights_of_one(tmp_path):
    one = run(tmp_path / "one.pt", 1)
    two = run(tmp_path / "two.pt", 2)
    assert two["world"] == 2 and one["world"] == 1
    width = max(one["mask"].shape[1], two["mask"].shape[1])

    def padded(t):
        return torch.nn.functional.pad(t, (0, width - t.shape[1]))

    assert torch.equal(padded(one["mask"]), padded(two["mask"]))
    mask = padded(one["mask"]).bool()
    a1, a2 = padded(one["advantages"]), padded(two["advantages"])
    torch.testing.assert_close(a1[mask], a2[mask], rtol=1e-6, atol=1e-7)
    ((_, single),) = one["metrics"]
    # the weights differ between the halves: rows sent to the wrong process could not pass by accident
    assert single["dataflex/weight/std"][0] > 0.1
    assert single["dataflex/valid_samples"] == [16.0]
    for rank, metrics in two["metrics"]:  # every process logs the metrics of the whole step's batch
        for name in ("dataflex/weight/mean", "dataflex/weight/std", "dataflex/ess", "dataflex/valid_samples"):
            assert metrics[name][0] == pytest.approx(single[name][0], rel=1e-6), (rank, name)
