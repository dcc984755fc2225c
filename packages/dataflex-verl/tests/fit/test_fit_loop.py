"""DataFlex inside verl 0.9's own GRPO fit loop: what reaches the actor's update, step after step.

Every run here is verl's task runner driving rollout, reward, old log-prob,
advantage, actor update and weight sync (see conftest.py). What the actor's
loss received is observed inside verl's real ``ppo_loss`` (the harness's loss
probe), not re-read from the queue. Equality runs use SGD, so an update is
``lr * gradient`` and float noise stays float noise (an Adam first step
moves every weight by about ``lr`` whatever its gradient). Uniform against
non-uniform weights, on both trainer lines and two actor workers, is
``test_fit_ranks.py``.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from fit_helpers import dataflex_spec, reweight, sequence_mean_run, unit_mean

from dataflex_lab import toy_task
from dataflex_lab.verl.cpu_loop.runner import RunSpec

pytestmark = [pytest.mark.fit, pytest.mark.full]


def test_the_actors_loss_receives_weights_with_mean_one_per_sequence_under_a_sequence_mean(fits):
    """``seq-mean-token-mean`` averages sequences; the token unit, two workers and the equality with verl's own
    update are ``test_fit_ranks.py``."""
    loss_agg_mode, unit = "seq-mean-token-mean", "sequence"
    run = sequence_mean_run(fits)
    assert run.loss_calls, "verl's ppo_loss was never called"
    weights = torch.cat([call["rollout_is_weights"] for call in run.loss_calls])
    mask = torch.cat([call["response_mask"] for call in run.loss_calls]).bool()
    assert {call["loss_agg_mode"] for call in run.loss_calls} == {loss_agg_mode}
    assert unit_mean(weights, mask, unit) == pytest.approx(1.0, abs=1e-5)
    assert float(weights[mask].std()) > 0.05  # not uniform: the mean is a real normalisation
    assert torch.all(weights[~mask] == 0)
    assert run.metric("dataflex/weight/mean") == pytest.approx(1.0, abs=1e-5)
    assert run.metric("dataflex/weight/unit_is_sequence") == 1.0


def test_selected_out_groups_contribute_nothing_to_the_update(fits):
    """A selector drops whole groups and asks for advantages on the kept set: dropped rows reach the loss at 0."""
    block = {
        "mechanism": "select",
        "scorer": {"name": "advantage_magnitude", "params": {}},
        "actuator": {"name": "fittest_drop_half_groups", "params": {}},
    }
    run = fits.run("select_drop_half", RunSpec(trainer_mode="dataflex_sync", dataflex=block, steps=1))
    (selection,) = run.records("drop_half_groups")
    assert 0 < selection["kept_groups"] < selection["groups"]
    assert run.metric("dataflex/groups_fully_dropped") == selection["groups"] - selection["kept_groups"]
    assert run.metric("dataflex/advantage_recomputed") == 1.0

    weights = torch.cat([call["rollout_is_weights"] for call in run.loss_calls])
    advantages = torch.cat([call["advantages"] for call in run.loss_calls])
    mask = torch.cat([call["response_mask"] for call in run.loss_calls]).bool()
    dropped = ~(weights * mask).bool().any(-1) & mask.any(-1)
    assert int(dropped.sum()) == selection["rows"] - selection["kept_rows"]
    # a dropped row's policy-gradient term is weight * advantage * ratio = 0 on every token
    assert torch.all(weights[dropped] == 0)
    assert torch.all(advantages[dropped] == 0)
    assert unit_mean(weights, mask, "token") == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(("line", "steps"), [("v1", 3), ("legacy", 2)])
def test_mix_draws_domains_in_the_mixers_proportions(fits, line, steps):
    """A static 75/25 mixture on a 50/50 dataset: the prompts verl rolls out follow the mixer, step after step."""
    block = {
        "mechanism": "mix",
        "domains": list(toy_task.DOMAINS),
        "domain_key": "domain",
        "scorer": {"name": "reward_difficulty", "params": {}},
        "actuator": {"name": "static", "params": {"proportions": [0.75, 0.25]}},
    }
    spec = dataflex_spec(line, block, steps=steps, samples_per_prompt=2)
    dump = fits.root / f"mix_rollouts_{line}"
    spec.extra = [f"trainer.rollout_data_dir={dump}"]
    run = fits.run(f"mix_static_{line}", spec)
    assert len(run.steps) == steps
    vowels = set(toy_task.DOMAINS["vowel"])
    per_step = []
    for step in range(1, steps + 1):
        # verl's own dump of what it generated: one line per rollout, prompts repeated per sample
        records = [json.loads(text) for text in (dump / f"{step}.jsonl").read_text().splitlines()]
        letters = [_prompt_letter(record["input"]) for record in records]
        per_step.append(sum(letter in vowels for letter in letters) / len(letters))
    assert all(share == pytest.approx(0.75, abs=0.13) for share in per_step), per_step
    assert sum(per_step) / steps == pytest.approx(0.75, abs=0.07)
    assert run.metric("dataflex/mix/proportion/vowel", step=steps) == pytest.approx(0.75)


def _prompt_letter(rendered: str) -> str:
    """The letter of a rendered toy prompt (``<|im_start|>user\\nX<|im_end|>...``)."""
    letter = rendered.split("user\n", 1)[1][0]
    assert letter in toy_task.LETTERS, rendered
    return letter


def test_colocate_async_trains_through_its_own_fit_loop(fits):
    block = reweight("advantage_magnitude", "softmax")
    run = fits.run("colocate_async", RunSpec(trainer_mode="dataflex_colocate_async", dataflex=block, steps=2))
    assert [r["step"] for r in run.steps] == [1, 2]
    for record in run.steps:
        assert record["metrics"]["dataflex/active"] == 1.0
        assert record["metrics"]["dataflex/weight/mean"] == pytest.approx(1.0, abs=1e-5)
    # the async trainer trains on rollouts of the previous policy after the first step
    assert run.metric("training/off_policy/trajectory_staleness/max", step=2) >= 1
    assert all("rollout_is_weights" in call for call in run.loss_calls)
    assert math.isfinite(run.metric("actor/pg_loss", step=2))
