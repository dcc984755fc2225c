"""Pilot-Commit as published: ``pilot: {preset: pilot-commit}`` against a reference written here from the paper's
code (``databricks/pilot-commit`` at 6def20e: ``recipe/pc/pc_ray_trainer.py``'s ``fit`` and ``filter_batch``,
``recipe/pc/replay_buffer.py``'s ``sample`` with ``max_variance`` and ``flush``), fed the same recorded pilot
rewards over several steps, with a save and a resume in the middle. Step by step and round by round the
project's decisions (admitted, committed, carried, evicted from the buffer and from sampling, rounds and
generation calls per step) are the reference's. The reference does not model the end of an epoch (the paper
clears its buffer there; DataFlex's sampler has passes, not epochs): the prompts it explores are the project's.
"""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest
import torch

from dataflex_core import ConfigError, InvalidOutputError
from dataflex_core.mechanisms.pilot.carry import SurvivorBuffer
from dataflex_core.mechanisms.pilot.settings import CarrySettings
from dataflex_core.session import DataFlexSession, StagedGeneration
from dataflex_core.state_fields import StateFieldError
from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport
from dataflex_core.step.state import ComponentStateError
from dataflex_lab.testing import rows_batch

HOST = HostCapabilities(
    name="stagedhost",
    seams={LossWeights: SeamSupport(True), StagedGeneration: SeamSupport(True)},
    fields={n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")},
)
BAND = {"low": 0.125, "high": 0.75, "low_inclusive": True, "high_inclusive": True}
BLOCK = {
    "mechanism": "pilot",
    "scorer": {"name": "group_solve_rate"},
    "actuator": {"name": "threshold_band", "params": BAND},
    "pilot": {"preset": "pilot-commit"},
}
GROUPS, ROLLOUT_N, POPULATION, STEPS = 4, 32, 60, 9
PILOTS = ROLLOUT_N // 4  # the preset's 25 %
#: Each row's chance to solve, by row % 7: never, sometimes, always (solved on every pilot: evicted).
SOLVE = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


def pilot_rewards(row: int, visit: int) -> list[float]:
    """The recorded stream: the pilot rewards of ``row``'s ``visit``-th exploration (0/1, as the paper's acc)."""
    gen = random.Random(row * 1009 + visit)
    return [1.0 if gen.random() < SOLVE[row % 7] else 0.0 for _ in range(PILOTS)]


class Reference:
    """The paper's loop on rows and pilot rewards: each round commits from the buffer (``sample``: all when it
    holds no more than needed, else by (std, step) descending, ties in the order entries came), then admits the
    round's explored prompts into it (mean in [0.125, 0.75], both inclusive), marks those with mean >= 1.0 to be
    excluded; a full batch flushes entries with ``step - added > 4``; more than 10 rounds raise."""

    def __init__(self) -> None:
        self.buffer: dict[int, dict[str, float]] = {}  # a dict: an overwritten key keeps its position
        self.excluded: set[int] = set()

    def sample(self, size: int) -> list[tuple[int, int]]:
        if len(self.buffer) <= size:
            chosen = list(self.buffer)
        else:
            ranked = sorted(((u, e["std"], e["step"]) for u, e in self.buffer.items()), key=lambda x: (x[1], x[2]),
                            reverse=True)  # fmt: skip
            chosen = [u for u, _, _ in ranked[:size]]
        return [(u, int(self.buffer.pop(u)["step"])) for u in chosen]

    def step(self, step: int, explored_rounds: list[dict[int, list[float]]]) -> list[dict]:
        """The step's rounds on the explored prompts and their pilot rewards, round by round."""
        in_batch, out = 0, []
        for number, explored in enumerate(explored_rounds, start=1):
            commit = self.sample(min(GROUPS - in_batch, len(self.buffer))) if self.buffer else []
            admitted = []
            for row, rewards in explored.items():
                assert row not in self.excluded, f"row {row} was excluded but explored again"
                mean = float(np.mean(rewards))
                if 0.125 <= mean <= 1 - 0.25:
                    self.buffer[row] = {"step": step, "std": float(np.std(rewards))}
                    admitted.append(row)
                if mean >= 1.0:
                    self.excluded.add(row)
            in_batch += len(commit)
            out.append({"committed": {u for u, _ in commit}, "carried": {u for u, s in commit if s < step},
                        "admitted": admitted})  # fmt: skip
            if in_batch < GROUPS:
                if number >= 10:
                    raise ValueError("too many rounds")
                continue
            out[-1]["flushed"] = self.flush(step)
            assert number == len(explored_rounds), "the project explored after its batch was full"
        return out

    def flush(self, step: int) -> int:
        old = [u for u, e in self.buffer.items() if step - e["step"] > 4]
        for u in old:
            del self.buffer[u]
        return len(old)


def session(block=None) -> DataFlexSession:
    flex = DataFlexSession(block or BLOCK)
    flex.mount(HOST, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    flex.seam(StagedGeneration).prepare(POPULATION, batch_size=GROUPS, seed=0)
    return flex


def run_step(flex: DataFlexSession, step: int, visits: dict[int, int]) -> tuple[list[dict], dict, object]:
    """One step as a host runs it (each stage generated exactly, the pilots from the recorded stream, the commits
    alternating), its trained batch run; per stage what it explored (with the rewards), committed and admitted."""
    seam = flex.seam(StagedGeneration)
    stages = seam.stages(GROUPS, rollout_n=ROLLOUT_N)
    parts, rounds = [], []
    while (asked := stages.next()) is not None:
        explored = set(stages.explored[-1].tolist())
        rewards, pilots = [], {}
        for uid, row, count in zip(asked.uids.tolist(), asked.prompts.tolist(), asked.counts.tolist()):
            if uid in explored:
                pilots[row] = pilot_rewards(row, visits.get(row, 0))
                visits[row] = visits.get(row, 0) + 1
                rewards += pilots[row]
            else:
                rewards += [float(k % 2) for k in range(count)]
        uid = asked.uids.repeat_interleave(asked.counts)
        part = rows_batch([2] * len(uid), width=3, rewards=rewards, uid=uid.tolist(),
                          columns={"index": asked.prompts.repeat_interleave(asked.counts).tolist()})  # fmt: skip
        seam.observe(stages, part, step)
        parts.append((part, uid))
        topped = stages.topped[-1]
        rounds.append(
            {
                "explored": pilots,
                "committed": set(stages.prompt[topped].tolist()),
                "carried": set(stages.prompt[topped[stages.carried[topped]]].tolist()),
                "admitted": stages.prompt[stages.explored[-1][stages.admitted[stages.explored[-1]]]].tolist(),
            }
        )
    kept = [(part, uid, keep) for (part, uid), keep in zip(parts, stages.trained()) if len(keep)]
    uid = torch.cat([uid[keep] for _, uid, keep in kept])
    assert torch.unique(uid, return_counts=True)[1].tolist() == [ROLLOUT_N] * GROUPS  # whole groups, each once
    trained = rows_batch([2] * len(uid), width=3, uid=uid.tolist(),
                         rewards=torch.cat([p.batch["rm_scores"][k].sum(-1) for p, _, k in kept]).tolist())  # fmt: skip
    return rounds, flex.run(trained, step, generation=stages).metrics, stages


def check_against_reference(flex_at, save_at=None, tmp_path=None) -> list[list[int]]:
    """Every step of the project (resumed after ``save_at`` when given) against the reference; the rows each step
    explored, per round."""
    reference, visits, explored = Reference(), {}, []
    flex = flex_at()
    for step in range(1, STEPS + 1):
        rounds, metrics, stages = run_step(flex, step, visits)
        expected = reference.step(step, [r["explored"] for r in rounds])
        for got, want in zip(rounds, expected):
            assert got["committed"] == want["committed"], step
            assert got["carried"] == want["carried"], step
            assert got["admitted"] == want["admitted"], step
        assert len(rounds) == len(expected) == metrics["dataflex/pilot/rounds"]  # one generation call a round
        assert metrics["dataflex/pilot/stages"] == len(expected)
        assert metrics["dataflex/pilot/buffer_evicted_prompts"] == expected[-1]["flushed"], step
        buffered = flex.mechanism.buffer
        assert dict(zip(buffered.row.tolist(), buffered.step.tolist())) == {
            u: e["step"] for u, e in reference.buffer.items()
        }, step
        assert set(flex.mechanism.refill.evicted.tolist()) == reference.excluded, step
        explored.append([row for r in rounds for row in r["explored"]])
        if step == save_at:
            flex.save(tmp_path / f"global_step_{step}", step)
            flex = flex_at()
            flex.restore(tmp_path / f"global_step_{step}")
    return explored


def test_the_preset_makes_the_papers_decisions_step_by_step_and_resumes_them(tmp_path):
    straight = check_against_reference(session)
    resumed = check_against_reference(session, save_at=4, tmp_path=tmp_path)
    assert resumed == straight  # the resumed run draws and decides as the uninterrupted one
    # the stream exercises every part: one-round steps after the first, carried prompts, age and solved evictions
    assert any(len(rows) == GROUPS * 3 for rows in straight[1:])


def test_the_stream_exercises_carry_eviction_and_the_inclusive_band():
    flex, visits = session(), {}
    seen = {"carried": 0, "flushed": 0, "calls": [], "edges": 0}
    for step in range(1, STEPS + 1):
        rounds, metrics, _ = run_step(flex, step, visits)
        seen["carried"] += metrics["dataflex/pilot/carried_prompts"]
        seen["flushed"] += metrics["dataflex/pilot/buffer_evicted_prompts"]
        seen["calls"].append(int(metrics["dataflex/pilot/stages"]))
        admitted = {row for r in rounds for row in r["admitted"]}
        seen["edges"] += sum(1 for r in rounds for row, rw in r["explored"].items()
                             if np.mean(rw) in (0.125, 0.75) and row in admitted)  # fmt: skip
        assert metrics["dataflex/pilot/pilot_age_max"] <= 5  # flushed after 4 steps, committed on the 5th at most
    assert seen["calls"][0] >= 2 and seen["calls"][1:].count(1) >= STEPS - 3  # one call a step once buffered
    assert seen["carried"] > 0 and seen["flushed"] > 0 and seen["edges"] > 0
    assert len(flex.mechanism.refill.evicted) > 0


# -- the preset at mount, and the state's checks ----------------------------------------------------------


def test_the_preset_logs_its_resolved_settings_and_explicit_keys_override(caplog):
    with caplog.at_level(logging.INFO, logger="dataflex_core.step"):
        flex = session({**BLOCK, "pilot": {"preset": "pilot-commit", "max_rounds": 3, "carry": {"order": "recency"}}})
    text = caplog.text
    assert "preset pilot-commit" in text and "prompts=3" in text and "rollouts=25% of rollout.n" in text
    assert "carry={max_off_steps: 4, order: recency}" in text and "max_rounds=3" in text
    assert "on_short=raise" in text and "evict_solved=true" in text and "threshold_band" in text
    assert "not the paper's band" not in text
    settings = flex.mechanism.settings
    assert (settings.max_rounds, settings.carry.order, settings.keep) == (3, "recency", True)
    flex.seam(StagedGeneration).stages(GROUPS, rollout_n=16)
    assert flex.mechanism.settings.rollouts == 4  # 25 % of the group, computed where rollout.n is known
    dropped = session({**BLOCK, "pilot": {"preset": "pilot-commit", "carry": None, "rollouts": 2}})
    assert dropped.mechanism.settings.carry is None and dropped.mechanism.settings.rollouts == 2


def test_the_preset_warns_when_the_blocks_admission_is_not_the_papers_band(caplog):
    block = {**BLOCK, "actuator": {"name": "threshold_band", "params": {"low": 0.125, "high": 0.75}}}
    with caplog.at_level(logging.INFO, logger="dataflex_core.step"):
        session(block)
    assert "not the paper's band" in caplog.text and "low_inclusive" in caplog.text


@pytest.mark.parametrize(
    ("pilot", "message"),
    [
        ({"preset": "pilot_commit"}, r"pilot.preset='pilot_commit' is not one of pilot-commit"),
        ({"carry": {"order": "variance"}}, r"carry.order='variance' is not one of std, recency, random"),
        ({"carry": {"max_off_steps": -1}}, r"carry.max_off_steps must be an integer >= 0"),
        ({"carry": {"max_off": 4}}, r"unknown keys \['max_off'\]"),
        ({"max_rounds": 0}, r"pilot.max_rounds must be an integer >= 1"),
        ({"evict_solved": "yes"}, r"pilot.evict_solved must be true"),
    ],
)
def test_bad_pilot_commit_keys_are_refused_at_mount_naming_key_and_value(pilot, message):
    with pytest.raises(ConfigError, match=message):
        session({**BLOCK, "pilot": pilot})


def test_carry_needs_pilots_below_the_group():
    flex = session({**BLOCK, "pilot": {"preset": "pilot-commit", "rollouts": 4}})
    with pytest.raises(ConfigError, match=r"pilot.rollouts=4 must be below rollout.n=4"):
        flex.seam(StagedGeneration).stages(GROUPS, rollout_n=4)


def test_explore_more_stops_at_max_rounds_and_raises_as_the_paper():
    flex = session({**BLOCK, "pilot": {"preset": "pilot-commit", "max_rounds": 3}})
    seam = flex.seam(StagedGeneration)
    stages = seam.stages(GROUPS, rollout_n=ROLLOUT_N)
    with pytest.raises(InvalidOutputError, match=r"admitted 0 of the 4 prompts.*max_rounds=3"):
        while (asked := stages.next()) is not None:  # every pilot solved: nothing admitted, ever
            uid = asked.uids.repeat_interleave(asked.counts)
            seam.observe(stages, rows_batch([2] * len(uid), width=3, rewards=[1.0] * len(uid), uid=uid.tolist()), 1)
    assert stages.rounds == 3 and stages.stages == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(rows=torch.tensor([5, 5])), r"state\['rows'\]"),
        (lambda s: s.update(rows=torch.tensor([POPULATION])), r"state\['rows'\]"),
        (lambda s: s.update(steps=torch.tensor([1])), r"state\['steps'\].*one step >= 0 per buffered row"),
        (lambda s: s.update(std=torch.tensor([float("nan")] * len(s["rows"]), dtype=torch.float64)),
         r"state\['std'\].*finite"),
        (lambda s: s.pop("generator"), r"state\['generator'\] is 'missing'"),
        (lambda s: s.update(population=POPULATION + 1), r"state\['population'\]"),
    ],
)  # fmt: skip
def test_a_changed_buffer_in_the_checkpoint_is_refused_naming_file_field_and_value(tmp_path, change, message):
    flex, visits = session(), {}
    for step in (1, 2):
        run_step(flex, step, visits)
    assert len(flex.mechanism.buffer) >= 2
    folder = tmp_path / "global_step_2"
    flex.save(folder, 2)
    (path,) = folder.rglob("dataflex_state.pt")
    state = torch.load(path, weights_only=True)
    change(state["components"]["carry"]["state"])
    torch.save(state, path)
    with pytest.raises(ComponentStateError, match=rf"dataflex_state.pt.*carry.*{message}"):
        session().restore(folder)


def test_evicted_rows_are_saved_checked_and_never_drawn(tmp_path):
    flex = session()
    refill = flex.mechanism.refill
    assert refill.evict(torch.tensor([3, 7, 3]), keep=12) == 2
    drawn = [row for _ in range(40) for row in refill.next_block()]
    assert 3 not in drawn and 7 not in drawn and len(drawn) == 40 * GROUPS
    assert refill.evict(torch.arange(POPULATION), keep=12) == POPULATION - 12 - 2  # the cap: a round stays drawable
    assert len(set(range(POPULATION)) - set(refill.evicted.tolist())) == 12
    state = refill.state_dict()
    state["evicted"] = torch.tensor([1, 1])
    with pytest.raises(StateFieldError, match=r"state\['evicted'\]"):
        type(refill)(POPULATION, GROUPS).load_state_dict(state)


def test_an_evicted_row_the_hosts_own_pull_holds_is_not_screened_again():
    """The paper removes solved prompts from later epochs of its dataloader; a host's own pull (verl's fit draws the
    step's prompts before the stages) may hold one: the stages skip it and screen the sampler's rows instead."""
    flex = session()
    flex.mechanism.refill.evict(torch.tensor([3, 5]), keep=12)
    stages = flex.seam(StagedGeneration).stages(GROUPS, rollout_n=ROLLOUT_N, drawn=torch.tensor([3, 4, 5, 6]))
    asked = stages.next()
    assert asked.prompts[:2].tolist() == [4, 6] and len(asked.prompts) == 3 * GROUPS
    assert not {3, 5} & set(asked.prompts.tolist())


def test_one_call_false_splits_each_round_by_rollout_count_for_hosts_of_one_count_per_call():
    flex, visits = session({**BLOCK, "pilot": {"preset": "pilot-commit", "one_call": False}}), {}
    for step in (1, 2, 3):
        _, metrics, stages = run_step(flex, step, visits)
        assert all(len(set(r.counts.tolist())) == 1 for r in stages.requests)  # one count a call
        assert metrics["dataflex/pilot/stages"] >= metrics["dataflex/pilot/rounds"]
    assert len(stages.requests) > stages.rounds  # a round of pilots and carried groups: two calls


def test_a_host_of_one_count_per_call_gets_one_call_off_at_mount_with_a_message(caplog):
    one_count = HostCapabilities(
        name="onecounthost",
        seams={LossWeights: SeamSupport(True), StagedGeneration: SeamSupport(True, mixed_counts=False)},
        fields=HOST.fields,
    )
    flex = DataFlexSession(BLOCK)
    with caplog.at_level(logging.INFO, logger="dataflex_core.step"):
        flex.mount(one_count, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    assert "one_call=false: onecounthost" in caplog.text and "each round runs its counts in sequence" in caplog.text
    assert flex.mechanism.settings.one_call is False and "one_call=false" in flex.mechanism.settings.describe()
    flex.seam(StagedGeneration).prepare(POPULATION, batch_size=GROUPS, seed=0)
    visits = {}
    for step in (1, 2):
        _, _, stages = run_step(flex, step, visits)
        assert all(len(set(r.counts.tolist())) == 1 for r in stages.requests)  # what the host can generate
    assert session().mechanism.settings.one_call is True  # a host of mixed counts keeps the preset's one call


def test_the_buffer_orders_by_recency_and_at_random_reproducibly_after_a_resume():
    recent = SurvivorBuffer(CarrySettings(order="recency"), POPULATION)
    recent.add(torch.tensor([1, 2]), 1, torch.tensor([0.5, 0.5]))
    recent.add(torch.tensor([3, 4]), 2, torch.tensor([0.1, 0.2]))
    assert recent.take(3)[0].tolist() == [3, 4, 1] and recent.row.tolist() == [2]  # newest first, ties as they came
    shuffled = SurvivorBuffer(CarrySettings(order="random"), POPULATION, seed=3)
    shuffled.add(torch.arange(10), 1, torch.zeros(10))
    again = SurvivorBuffer(CarrySettings(order="random"), POPULATION)
    again.load_state_dict(shuffled.state_dict())
    assert shuffled.take(4)[0].tolist() == again.take(4)[0].tolist()


def test_backfill_after_max_rounds_commits_screened_prompts_of_the_step_in_one_more_call():
    flex = session({**BLOCK, "pilot": {"preset": "pilot-commit", "max_rounds": 2, "on_short": "backfill"}})
    seam = flex.seam(StagedGeneration)
    stages = seam.stages(GROUPS, rollout_n=ROLLOUT_N)
    while (asked := stages.next()) is not None:  # every pilot solved: nothing admitted
        uid = asked.uids.repeat_interleave(asked.counts)
        seam.observe(stages, rows_batch([2] * len(uid), width=3, rewards=[1.0] * len(uid), uid=uid.tolist()), 1)
    assert (stages.rounds, stages.stages, stages.backfilled) == (2, 3, GROUPS)
    assert stages.requests[-1].counts.tolist() == [ROLLOUT_N - PILOTS] * GROUPS  # topped up, pilots kept
    assert stages.committed.tolist() == list(range(GROUPS))  # the first screened, in screening order
