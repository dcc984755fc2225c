"""``filter`` and ``pilot`` under accelerate with 2 CPU processes (gloo), two steps of TRL's real trainer each.

Every process runs the same rounds (or stages) and takes the same decision; the trained batch, each process's
slice in process order, is exactly the batch the decision rule gives on every generated row (nothing lost,
nothing twice, nothing moved to the wrong process); it is full, its groups have reward variance, and every
process's ``num_items_in_batch`` counts the tokens of the whole trained batch; every generated rollout is in
every process's ``dataflex/compute/*``. Every process's per-prompt ledger holds the whole step's batch (not its
own slice), and ``pilot.draw`` (GRESO) asks the same prompts on every process, skipping those without signal.
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


def visits(step: dict) -> dict[int, tuple[int, int, bool]]:
    """Per prompt id of one step: its responses with a token, those trained, whether their rewards were all
    equal; counted from the generated and the trained rows (the ledger leaves empty responses out)."""
    rewards: dict[int, list[float]] = {}
    for generated in step["generated"]:
        for (index, completion), reward in zip(generated["rows"], generated["rewards"].tolist()):
            if completion:
                rewards.setdefault(index, []).append(reward)
    trained: dict[int, int] = {}
    for index, completion in (row for part in step["trained"] for row in part):
        trained[index] = trained.get(index, 0) + bool(completion)
    return {i: (len(r), trained.get(i, 0), max(r) - min(r) <= 1e-6) for i, r in rewards.items()}


def expected_ledger(steps: list[dict]) -> dict[int, tuple[int, int, int, int, int]]:
    """Per prompt id: ``(rollouts, trained, filtered, uniform-reward streak, steps sampled)`` after ``steps``."""
    want: dict[int, list[int]] = {}
    for step in steps:
        for index, (rollouts, trained, uniform) in visits(step).items():
            entry = want.setdefault(index, [0, 0, 0, 0, 0])
            entry[0] += rollouts
            entry[1] += trained
            entry[2] += rollouts - trained
            entry[3] = entry[3] + 1 if uniform else 0
            entry[4] += 1
    return {index: tuple(entry) for index, entry in want.items()}


def check_ledgers(results: dict) -> None:
    """Every process's ledger holds the whole step's batch: the counts of every generated and trained row."""
    want = expected_ledger(results["steps"])
    assert len(results["ledgers"]) == PROCESSES
    for state in results["ledgers"]:
        got = {
            int(index): tuple(int(state[c][i]) for c in ("rollouts", "rollouts_trained", "rollouts_filtered",
                                                         "uniform_reward_streak", "times_sampled"))
            for i, index in enumerate(state["ids"]) if int(state["times_sampled"][i])
        }  # fmt: skip
        assert got == want


def test_filter_admits_once_and_trains_every_admitted_group_once(two_processes):
    check_counted(two_processes["filter"])
    check_ledgers(two_processes["filter"])
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


def test_filter_skip_constant_keeps_the_same_prompts_out_of_the_refills_on_every_process(two_processes):
    """``filter.skip_constant: 1``: every process takes the prompts the step's ledger saw constant out of its refills,
    the same ones (each process's ledger records the whole step), and a later refill never asks for one."""
    steps = two_processes["filter"]["steps"]
    constant = [{i for i, entry in expected_ledger(steps[: k + 1]).items() if entry[3]} for k in range(len(steps))]
    assert constant[0]  # the even prompts' rewards are all 1
    for state in two_processes["filter"]["ledgers"]:
        assert set(state["skipped"]) == set().union(*constant)
    later = {index for generated in steps[1]["generated"][1:] for index, _ in generated["rows"]}
    assert not later & constant[0]


def test_filter_draw_sizes_every_refill_round_alike_on_every_process(two_processes):
    """``filter.draw`` by ``greso_adaptive``: every process asks the same rows for each round, and a refill round has
    GRESO's size for the round before it (missing groups over its share with signal, x 1.25, within [1, the batch])."""
    steps = two_processes["filter_sized"]["steps"]
    sizes = []
    for step in steps:
        admitted = 0
        for before, after in zip(step["generated"], step["generated"][1:]):
            groups = groups_of(before)
            admitted += sum(has_signal(rewards) for _, rewards in groups)
            share = float(torch.tensor(sum(not has_signal(r) for _, r in groups) / len(groups), dtype=torch.float32))
            missing = (PROMPTS - admitted) * GENERATIONS
            expected = PROMPTS if share == 1 else max(min(int(missing / (1 - share) / GENERATIONS * 1.25), PROMPTS), 1)
            asked = after["asked"]
            assert asked == [asked[0]] * PROCESSES  # the same rows on every process
            assert len(asked[0]) == expected * GENERATIONS  # each prompt GENERATIONS times
            sizes.append(expected)
    assert sizes and min(sizes) < PROMPTS  # a round smaller than the batch was generated


def test_pilot_screens_once_and_trains_every_committed_group_whole(two_processes):
    check_counted(two_processes["pilot"])
    check_ledgers(two_processes["pilot"])
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


def test_pilot_draw_asks_the_same_prompts_on_every_process_and_skips_those_without_signal(two_processes):
    steps = two_processes["pilot"]["steps"]
    for step in steps:
        for generated in step["generated"]:  # each process drew its stage's prompts from its own curriculum
            assert len(generated["asked"]) == PROCESSES
            assert all(asked == generated["asked"][0] for asked in generated["asked"])
    silent = {index for index, (_, _, _, streak, _) in expected_ledger(steps[:1]).items() if streak}
    screened = {index for generated in steps[1]["generated"][:-1] for index, _ in generated["rows"]}
    assert silent and not silent & screened  # GRESO skips what step 1 recorded without signal


def test_pilot_commit_takes_the_same_decisions_on_every_process_and_trains_each_admitted_group_once(two_processes):
    """``pilot: {preset: pilot-commit}`` at groups of 16 and pilots of 4 on 2 processes: every process asks the same
    prompts in every call and decides the same; the trained batch, the slices in process order, is 2 whole groups,
    each of a prompt explored with its pilot mean in the band, in this step (its 4 pilots, then a top-up of 12) or
    carried from the step before (16 fresh rollouts); every rollout generated is counted on every process, and every
    process's ledger holds the whole step's batch."""
    run = two_processes["pilot_commit"]
    prompts, group, pilots = 2, 16, 4
    explored: dict[int, list[tuple[int, list, float]]] = {}  # prompt -> [(step, pilot rows, pilot mean)]
    carried = 0
    for step, record in enumerate(run["steps"], start=1):
        decided = record["decided"]
        assert len({(s, tuple(c), tuple(a)) for _, s, c, a in decided}) == 1  # the same stages everywhere
        assert decided[0][1] == len(record["generated"])
        commits = {}
        for generated in record["generated"]:
            asked = generated["asked"]
            assert asked == [asked[0]] * PROCESSES  # the same prompts asked on every process
            for rows, rewards in groups_of(generated):
                (prompt,) = {index for index, _ in rows}
                if generated["group_size"] == pilots:
                    explored.setdefault(prompt, []).append((step, rows, float(rewards.mean())))
                else:
                    assert prompt not in commits  # committed once a step
                    commits[prompt] = (generated["group_size"], rows)
        assert len(commits) == prompts
        trained = [row for part in record["trained"] for row in part]
        assert record["rows_per_process"] == [prompts * group // PROCESSES] * PROCESSES
        assert record["num_items"] == [sum(len(completion) for _, completion in trained)] * PROCESSES
        for g in range(prompts):
            rows = trained[g * group : (g + 1) * group]
            (prompt,) = {index for index, _ in rows}  # one prompt, its rows consecutive
            size, commit_rows = commits[prompt]
            if size == group - pilots:  # explored in this step: its pilots, then the top-up
                at, pilot_rows, mean = explored[prompt][-1]
                assert at == step and rows == pilot_rows + commit_rows
            else:  # carried from the step before: a whole fresh group
                at, _, mean = [e for e in explored[prompt] if e[0] < step][-1]
                assert size == group and rows == commit_rows and step - at <= 1
                carried += 1
            assert 0.125 <= mean <= 0.75, (step, prompt, mean)
    assert carried > 0
    generated = [sum(len(g["rows"]) for g in record["generated"]) for record in run["steps"]]
    for logged in run["logged"]:
        assert [e["dataflex/compute/rollouts_generated"] for e in logged] == generated
        assert [e["dataflex/compute/rollouts_trained"] for e in logged] == [prompts * group] * len(generated)
        assert sum(e["dataflex/pilot/carried_prompts"] for e in logged) == carried
    check_ledgers(run)
