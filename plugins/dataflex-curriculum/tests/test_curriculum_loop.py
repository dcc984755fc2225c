"""The components inside core's curriculum step: rollouts stop being spent on prompts that teach nothing.

A simulated task stands in for a framework: each prompt has a fixed solve
probability (a third always solved, a third never, a third half the time);
every step draws 8 prompts with the curriculum sampler, rolls each out 4
times, and feeds the rewards back through the step, as a host does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_core import Batch
from dataflex_core.runner import mount_step
from dataflex_core.session import GenerationRounds
from dataflex_core.step import (
    CurriculumSampler,
    FieldSupport,
    HostCapabilities,
    PromptHistory,
    PromptIds,
    SeamSupport,
    TrainSampler,
)
from dataflex_lab.testing import PromptDataset

HOST = HostCapabilities(
    name="simulated",
    seams={TrainSampler: SeamSupport(True)},
    timings=("pre_rollout", "post_reward"),
    fields={"rm_scores": FieldSupport(True)},
)
PROMPTS = 60
#: Solve probability of each prompt: 0 (hopeless), 1 (solved) or 0.5 (learnable), by thirds.
SOLVE = torch.tensor([0.0, 1.0, 0.5]).repeat(PROMPTS // 3)
BATCH, ROLLOUTS = 8, 4
#: The simulated task's prompt ids (column ``index``): row ``i`` is prompt ``1000 + i``.
IDS = list(range(1000, 1000 + PROMPTS))


def simulate(scorer: dict, sampler: dict, steps: int, seed: int = 0) -> torch.Tensor:
    """Rows drawn per step, ``(steps, BATCH)``, under the given curriculum."""
    block = {"mechanism": "curriculum", "scorer": scorer, "actuator": sampler}
    step = mount_step(block, HOST, loss_unit="token")
    history = PromptHistory(PromptIds(IDS, "index"))
    curriculum = CurriculumSampler(step, history, {}, BATCH, seed=seed)
    step.sampler = curriculum
    generator = torch.Generator().manual_seed(seed)
    drawn = []
    for t in range(1, steps + 1):
        rows = torch.tensor(curriculum.next_block())
        drawn.append(rows)
        per_row = rows.repeat_interleave(ROLLOUTS)
        rewards = (torch.rand(len(per_row), generator=generator) < SOLVE[per_row]).float()
        scores = torch.zeros(len(per_row), 2)
        scores[:, -1] = rewards
        batch = Batch(
            {"response_mask": torch.ones(len(per_row), 2, dtype=torch.long), "rm_scores": scores},
            {"index": np.asarray((per_row + 1000).tolist(), dtype=object)},
        )
        step.run(batch, t)
    return torch.stack(drawn)


def learnable_share(drawn: torch.Tensor) -> float:
    return float((SOLVE[drawn.flatten()] == 0.5).double().mean())


@pytest.mark.parametrize(
    "scorer",
    [{"name": "solve_rate_ema", "params": {"alpha": 0.8}}, {"name": "mopps", "params": {"seed": 1}}],
    ids=["solve_rate_ema", "mopps"],
)
def test_learnability_turns_rollouts_to_the_prompts_that_teach(scorer):
    drawn = simulate(scorer, {"name": "learnability"}, steps=40)
    uniform = simulate(scorer, {"name": "temperature", "params": {"temperature": 1e9}}, steps=40)
    # a uniform draw gives the learnable third a third of the rollouts; the curriculum, once it has seen
    # the prompts, gives them most of the batch
    assert learnable_share(uniform[20:]) == pytest.approx(1 / 3, abs=0.1)
    assert learnable_share(drawn[20:]) > 0.5


def test_no_prompt_is_starved_by_the_floor():
    drawn = simulate({"name": "solve_rate_ema", "params": {"alpha": 1.0}}, {"name": "learnability"}, steps=150)
    # the hopeless and the solved prompts keep a share of about exploration * 2/3 of the draws
    never = set(range(PROMPTS)) - set(drawn.flatten().tolist())
    assert not never, f"prompts never drawn: {sorted(never)}"


def zero_variance_share(drawn: torch.Tensor) -> float:
    return float((SOLVE[drawn.flatten()] != 0.5).double().mean())


def test_greso_skips_the_prompts_whose_visits_keep_giving_no_signal():
    greso = {"name": "greso"}
    proportional = {"name": "temperature", "params": {"temperature": 1.0, "exploration": 0.0}}
    drawn = simulate(greso, proportional, steps=60)
    uniform = simulate(greso, {"name": "temperature", "params": {"temperature": 1e9}}, steps=60)
    assert zero_variance_share(uniform[40:]) == pytest.approx(2 / 3, abs=0.1)
    # solved and hopeless prompts fall to the floor's 0.05 after a few visits (40 x 0.05 = 2 against the
    # learnable 20 x about 0.9: about 10 % of the draws), learnable ones rarely leave 1
    assert zero_variance_share(drawn[40:]) < 0.2
    assert set(drawn.flatten().tolist()) == set(range(PROMPTS))  # the floor: every prompt still tried


def group_batch(rows: torch.Tensor, rewards: torch.Tensor) -> Batch:
    """ROLLOUTS responses per prompt of ``rows`` with these rewards, one group (uid) each."""
    per_row = rows.repeat_interleave(ROLLOUTS)
    scores = torch.zeros(len(per_row), 2)
    scores[:, -1] = rewards
    return Batch(
        {"response_mask": torch.ones(len(per_row), 2, dtype=torch.long), "rm_scores": scores},
        {
            "index": np.asarray((per_row + 1000).tolist(), dtype=object),
            "uid": np.asarray(torch.arange(len(rows)).repeat_interleave(ROLLOUTS).tolist(), dtype=object),
        },
    )


def test_greso_drawing_for_filter_keeps_every_batch_full_and_spends_fewer_rollouts_per_trained_group():
    from dataflex_core.session import DataFlexSession

    host = HostCapabilities(
        name="simulated", seams={GenerationRounds: SeamSupport(True), TrainSampler: SeamSupport(True)}, timings=("pre_rollout", "post_reward"),
        fields={name: FieldSupport(True) for name in ("response_mask", "rm_scores", "uid")},
    )  # fmt: skip

    def run(draw_scorer: dict) -> tuple[float, list[int]]:
        block = {
            "mechanism": "filter", "scorer": {"name": "group_reward_variance"},
            "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
            "filter": {"max_rounds": 16, "draw": {
                "mechanism": "curriculum", "scorer": draw_scorer,
                "actuator": {"name": "temperature", "params": {"temperature": 1.0, "exploration": 0.0}},
            }},
        }  # fmt: skip
        flex = DataFlexSession(block)
        flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
        sampler = flex.train_sampler(PromptDataset(IDS), batch_size=BATCH, seed=0)
        flex.seam(GenerationRounds).prepare(PROMPTS, batch_size=BATCH, seed=0)  # where a host builds its loader
        generator = torch.Generator().manual_seed(0)
        trained = []
        for step in range(1, 31):
            rounds, drawn = flex.seam(GenerationRounds).rounds(BATCH), []
            block_rows = sampler.next_block()
            while True:
                rows = torch.tensor(block_rows)
                rewards = (
                    torch.rand(len(rows) * ROLLOUTS, generator=generator) < SOLVE[rows].repeat_interleave(ROLLOUTS)
                ).float()
                drawn.append((rows, rewards))
                flex.seam(GenerationRounds).admit(rounds, group_batch(rows, rewards), step)
                if not rounds.needs_refill:
                    break
                block_rows = flex.seam(GenerationRounds).refill_rows(rounds)
            chosen = rounds.chosen()
            trained.append(sum(len(keep) for keep in chosen))
            keep_rows = torch.cat([rows[keep] for (rows, _), keep in zip(drawn, chosen)])
            keep_rewards = torch.cat([r.view(-1, ROLLOUTS)[keep].reshape(-1) for (_, r), keep in zip(drawn, chosen)])
            flex.run(group_batch(keep_rows, keep_rewards), step, generation=rounds)
        totals = flex.compute_totals.totals
        return totals["rollouts_generated"] / (30 * BATCH), trained

    uniform_cost, uniform_trained = run({"name": "greso", "params": {"exploration": 1.0}})  # never skips
    greso_cost, greso_trained = run({"name": "greso"})
    adaptive_cost, adaptive_trained = run({"name": "greso_adaptive"})  # GRESO as published
    assert uniform_trained == greso_trained == adaptive_trained == [BATCH] * 30  # skips never shrink the batch
    # rollouts generated per trained group: 13.5 admitting all (4 / (1/3 x 7/8) by hand), 8.9 with greso
    assert greso_cost < 0.75 * uniform_cost, (greso_cost, uniform_cost)
    assert adaptive_cost < 0.75 * uniform_cost, (adaptive_cost, uniform_cost)


def test_greso_adaptive_drawing_for_filter_resumes_from_the_checkpoint_file_and_refuses_an_altered_one(tmp_path):
    """Its probabilities and streaks travel with the session's checkpoint: a run saved and resumed at step 8 draws
    and decides as the run that went on; a checkpoint whose ``p_easy`` was edited is refused naming file, field and
    value."""
    from dataflex_core.session import DataFlexSession
    from dataflex_core.step.state import ComponentStateError

    host = HostCapabilities(
        name="simulated", seams={GenerationRounds: SeamSupport(True), TrainSampler: SeamSupport(True)}, timings=("pre_rollout", "post_reward"),
        fields={name: FieldSupport(True) for name in ("response_mask", "rm_scores", "uid")},
    )  # fmt: skip
    block = {
        "mechanism": "filter", "scorer": {"name": "group_reward_variance"},
        "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
        "filter": {"max_rounds": 16, "on_short": "backfill", "draw": {
            "mechanism": "curriculum", "scorer": {"name": "greso_adaptive", "params": {"adapt_step": 0.05}},
            "actuator": {"name": "temperature", "params": {"temperature": 1.0, "exploration": 0.0}},
        }},
    }  # fmt: skip

    def session(resume_from=None):
        flex = DataFlexSession(block)
        flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
        sampler = flex.train_sampler(PromptDataset(IDS), batch_size=BATCH, seed=0)
        flex.seam(GenerationRounds).prepare(PROMPTS, batch_size=BATCH, seed=0)  # where a host builds its loader
        if resume_from is not None:  # the framework restores its dataloader's sampler, then DataFlex its state
            sampler.load_state_dict(torch.load(resume_from / "sampler.pt", weights_only=True))
            flex.restore(resume_from)
        return flex, sampler

    def steps(flex, sampler, first: int, last: int) -> list[tuple[list[int], float, float]]:
        seen = []
        for step in range(first, last + 1):
            generator = torch.Generator().manual_seed(step)
            rounds, drawn, block_rows = flex.seam(GenerationRounds).rounds(BATCH), [], sampler.next_block()
            while True:
                rows = torch.tensor(block_rows)
                rewards = (
                    torch.rand(len(rows) * ROLLOUTS, generator=generator) < SOLVE[rows].repeat_interleave(ROLLOUTS)
                ).float()
                drawn.append((rows, rewards))
                flex.seam(GenerationRounds).admit(rounds, group_batch(rows, rewards), step)
                if not rounds.needs_refill:
                    break
                block_rows = flex.seam(GenerationRounds).refill_rows(rounds)
            chosen = rounds.chosen()
            keep_rows = torch.cat([rows[keep] for (rows, _), keep in zip(drawn, chosen)])
            keep_rewards = torch.cat([r.view(-1, ROLLOUTS)[keep].reshape(-1) for (_, r), keep in zip(drawn, chosen)])
            flex.run(group_batch(keep_rows, keep_rewards), step, generation=rounds)
            greso = flex.stateful()["draw_scorer"]
            seen.append((torch.cat([rows for rows, _ in drawn]).tolist(), greso.p_easy, greso.p_hard))
        return seen

    flex, sampler = session()
    straight = steps(flex, sampler, 1, 16)
    flex, sampler = session()
    first = steps(flex, sampler, 1, 8)
    flex.save(tmp_path / "global_step_8", 8)
    torch.save(sampler.state_dict(), tmp_path / "global_step_8" / "sampler.pt")
    flex, sampler = session(resume_from=tmp_path / "global_step_8")
    assert first + steps(flex, sampler, 9, 16) == straight
    assert len({(p_easy, p_hard) for _, p_easy, p_hard in straight}) > 3  # the controller moved them

    state_file = tmp_path / "global_step_8" / "dataflex_state.pt"
    saved = torch.load(state_file, weights_only=True)
    entries = [entry for entry in saved["components"].values() if entry.get("name") == "greso_adaptive"]
    assert len(entries) == 1
    entries[0]["state"]["p_easy"] = 2.0
    torch.save(saved, state_file)
    with pytest.raises(ComponentStateError) as refused:
        session(resume_from=tmp_path / "global_step_8")
    assert "dataflex_state.pt" in str(refused.value) and "p_easy" in str(refused.value) and "2.0" in str(refused.value)
