"""``filter`` and ``pilot`` under accelerate with 2 CPU processes (gloo), two steps of TRL's real trainer each.

Every process runs the same rounds (or stages) and takes the same decision; the trained batch, each process's
slice in process order, is exactly the batch the decision rule gives on every generated row (nothing lost,
nothing twice, nothing moved to the wrong process); it is full, its groups have reward variance, and every
process's ``num_items_in_batch`` counts the tokens of the whole trained batch; every generated rollout is in
every process's ``dataflex/compute/*``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("distributed_rounds.py")
PROMPTS, GENERATIONS, PROCESSES = 4, 4, 2


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("rounds") / "two.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SCRIPT.parent)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={PROCESSES}",
               str(SCRIPT), str(out)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = torch.load(out, weights_only=False)
    assert results["world"] == PROCESSES
    return results


def groups_of(generated: dict) -> list[tuple[list, torch.Tensor]]:
    """A round's groups: ``(rows, rewards)`` of each ``group_size`` consecutive rows."""
    size = generated["group_size"]
    rows, rewards = generated["rows"], generated["rewards"]
    return [(rows[i : i + size], rewards[i : i + size]) for i in range(0, len(rows), size)]


def has_signal(rewards: torch.Tensor) -> bool:
    return float(rewards.var(unbiased=False)) > 0


def check_trained(step: dict, expected: list) -> None:
    """The processes' slices, in process order, are ``expected``; full, even; ``num_items_in_batch`` their tokens."""
    slices = step["trained"]
    assert step["rows_per_process"] == [PROMPTS * GENERATIONS // PROCESSES] * PROCESSES
    trained = [row for part in slices for row in part]
    assert len(trained) == PROMPTS * GENERATIONS  # the batch full
    assert trained == expected  # every expected row exactly once, in its place, on its process
    tokens = sum(len(completion) for _, completion in trained)
    assert step["num_items"] == [tokens] * PROCESSES
    for group in range(PROMPTS):  # each group one prompt, its rows consecutive
        assert len({index for index, _ in trained[group * GENERATIONS : (group + 1) * GENERATIONS]}) == 1


def check_counted(results: dict) -> None:
    """Every process logs every generated rollout of each step in ``dataflex/compute/*``."""
    rows = PROMPTS * GENERATIONS
    generated = [sum(len(g["rows"]) for g in step["generated"]) for step in results["steps"]]
    for logged in results["logged"]:  # one list per process
        assert [e["dataflex/compute/rollouts_generated"] for e in logged] == generated
        assert [e["dataflex/compute/rollouts_filtered"] for e in logged] == [g - rows for g in generated]
        assert [e["dataflex/compute/generation_rounds"] for e in logged] == [
            len(s["generated"]) for s in results["steps"]
        ]
    assert results["logged"][0][-1]["dataflex/compute/rollouts_generated_total"] == sum(generated)


def test_filter_admits_once_and_trains_every_admitted_group_once(two_processes):
    check_counted(two_processes["filter"])
    steps = two_processes["filter"]["steps"]
    assert len(steps) == 2
    refills = 0
    for step in steps:
        decided = step["decided"]
        assert len({(r, tuple(map(tuple, c))) for _, r, c in decided}) == 1  # the same rounds everywhere
        ((_, rounds, _), *_) = decided
        assert rounds == len(step["generated"])
        refills += rounds - 1
        expected = []
        for generated in step["generated"]:  # first admitted groups in generation order
            for rows, rewards in groups_of(generated):
                assert generated["group_size"] == GENERATIONS
                if has_signal(rewards) and len(expected) < PROMPTS * GENERATIONS:
                    expected += rows
        check_trained(step, expected)
    assert refills > 0  # half the prompts give no signal: rounds were needed


def test_pilot_screens_once_and_trains_every_committed_group_whole(two_processes):
    check_counted(two_processes["pilot"])
    steps = two_processes["pilot"]["steps"]
    assert len(steps) == 2
    for step in steps:
        decided = step["decided"]
        assert len({(s, tuple(c), tuple(a)) for _, s, c, a in decided}) == 1  # the same stages everywhere
        *screening, commit = step["generated"]
        assert len(screening) >= 1 and decided[0][1] == len(step["generated"])
        pilots = [group for generated in screening for group in groups_of(generated)]  # uid = screening order
        admitted = [uid for uid, (_, rewards) in enumerate(pilots) if has_signal(rewards)]
        committed = admitted[:PROMPTS]
        assert decided[0][2] == committed
        assert [rows[0][0] for rows, _ in groups_of(commit)] == [pilots[uid][0][0][0] for uid in committed]
        assert commit["group_size"] == GENERATIONS - 2
        expected = []
        for (top_up, _), uid in zip(groups_of(commit), committed):  # kept: the pilot rollouts, then the top-up
            expected += pilots[uid][0] + top_up
        check_trained(step, expected)
