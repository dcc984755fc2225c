"""The testing kit: batches carry the rows frameworks add, the toy components behave as documented, sites install."""

from __future__ import annotations

import importlib.metadata

import pytest
import torch

from dataflex_core import build_from_config, get_registry, valid_sample_mask
from dataflex_lab.testing import (
    DomainPreferenceScorer,
    PromptDataset,
    grpo_advantages,
    grpo_batch,
    grpo_layout,
    register_toy_components,
    rows_batch,
    run_staged_step,
    stage_rows,
)
from dataflex_lab.testing.plugin_sites import LENGTH_PLUGIN, TRIPWIRE_PLUGIN


def test_rows_batch_puts_rewards_on_the_last_token_and_advantages_on_every_token():
    batch = rows_batch([2, 0, 3], width=4, rewards=[1.0, 5.0, 0.5], advantages=[2.0, 1.0, -1.0], uid="aab")
    assert batch.batch["response_mask"].tolist() == [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0]]
    assert batch.batch["rm_scores"].tolist() == [[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0.5, 0]]  # empty: no reward
    assert batch.batch["advantages"].tolist() == [[2, 2, 0, 0], [0, 0, 0, 0], [-1, -1, -1, 0]]
    assert batch.non_tensor_batch["uid"].tolist() == ["a", "a", "b"] and "is_padding" not in batch.batch


def test_rows_batch_refuses_a_row_longer_than_the_width():
    with pytest.raises(ValueError, match="a row has 5 response tokens but the width is 4"):
        rows_batch([5], width=4)


def test_a_prompt_dataset_carries_its_ids_and_further_columns():
    dataset = PromptDataset([10, 11], {"domain": ["x", "y"]})
    assert len(dataset) == 2 and dataset.columns() == ["index", "domain"]
    assert dataset.column("index") == [10, 11] and dataset.column("domain") == ["x", "y"]
    with pytest.raises(ValueError, match="column 'domain' has 1 values for 2 prompts"):
        PromptDataset([10, 11], {"domain": ["x"]})


def test_a_simulated_stage_generates_each_request_by_rank_then_padding():
    from dataflex_core.session import StageRequests

    asked = StageRequests(torch.tensor([7, 3]), torch.tensor([2, 1]), torch.tensor([0, 1]))
    rows = stage_rows(asked, lambda prompt, k: prompt + k / 10, padding=1)
    assert rows.non_tensor_batch["uid"].tolist() == [0, 0, 1, -1]
    assert rows.non_tensor_batch["index"].tolist() == [7, 7, 3, 0]
    assert rows.batch["rm_scores"].sum(-1).tolist() == pytest.approx([7.0, 7.1, 3.0, 0.0])
    assert rows.batch["is_padding"].tolist() == [False, False, False, True]
    assert rows.batch["response_mask"].sum(-1).tolist() == [2, 2, 2, 0]
    assert "is_padding" not in stage_rows(asked, lambda prompt, k: 0.0).batch


def test_a_simulated_staged_step_trains_whole_groups_of_the_admitted_prompts():
    from dataflex_core.session import DataFlexSession
    from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport, StagedGeneration

    host = HostCapabilities(
        name="stagedhost", seams={LossWeights: SeamSupport(True), StagedGeneration: SeamSupport(True)},
        fields={n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")},
    )  # fmt: skip
    flex = DataFlexSession({"mechanism": "pilot", "scorer": {"name": "group_reward_variance"},
                            "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}}})  # fmt: skip
    flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    flex.seam(StagedGeneration).prepare(16, batch_size=2, seed=0)
    stages, metrics = run_staged_step(flex, 1, lambda prompt, k: float(prompt % 2 and k % 2), padding=1)
    assert all(int(p) % 2 for p in stages.prompt[stages.committed])  # odd prompts: rewards 0, 1, ...
    assert metrics["dataflex/compute/rollouts_trained"] == 2 * 4

    batch = grpo_batch(3, 4, width=6, empty_rows=2, singleton_groups=2, padding_rows=3, seed=1)
    mask, uid = batch.batch["response_mask"], batch.non_tensor_batch["uid"].tolist()
    padding = batch.batch["is_padding"]
    assert len(batch) == 3 * 4 + 2 + 3 and padding.tolist() == [False] * 14 + [True] * 3
    # verl's padding: one shared pad<hex> uid of no real group, an all-zero response mask, reward 0
    assert len({uid[i] for i in range(14, 17)}) == 1 and uid[14].startswith("pad") and uid[14] not in uid[:14]
    assert not mask[padding].any() and not batch.batch["rm_scores"][padding].any()
    # two real rows have an empty response; each singleton group has one row
    assert int((mask[:14].sum(-1) == 0).sum()) == 2
    assert [uid.count(name) for name in ("g3", "g4")] == [1, 1]
    assert valid_sample_mask(batch).sum() == 12
    # rewards are 0/1 on the last response token
    rewards = batch.batch["rm_scores"].sum(-1)
    assert set(rewards.tolist()) <= {0.0, 1.0}
    assert torch.equal(batch.batch["token_level_rewards"], batch.batch["rm_scores"])


def test_grpo_advantages_are_verls_formula_group_by_group():
    uid = ["a", "a", "a", "b", "c", "c"]
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    mask = torch.ones(6, 2, dtype=torch.long)
    got = grpo_advantages(rewards, uid, mask)[:, 0]
    group_a = torch.tensor([1.0, 0.0, 0.0])
    expected_a = (group_a - group_a.mean()) / (group_a.std() + 1e-6)  # unbiased std, as torch.std in verl
    torch.testing.assert_close(got[:3], expected_a)
    assert got[3].item() == pytest.approx(1.0 / (1 + 1e-6))  # a group of one keeps its reward (mean 0, std 1)
    assert got[4:].tolist() == [0.0, 0.0]  # agreeing group


def test_shuffled_rows_are_the_same_rows_in_another_order():
    plain, shuffled = grpo_batch(4, 3, seed=5), grpo_batch(4, 3, seed=5, shuffle=True)
    order = grpo_layout(4, 3, seed=5, shuffle=True).order
    assert order.tolist() != sorted(order.tolist())
    for field in ("response_mask", "rm_scores", "advantages"):
        assert torch.equal(shuffled.batch[field], plain.batch[field][order])
    assert shuffled.non_tensor_batch["uid"].tolist() == [plain.non_tensor_batch["uid"][i] for i in order.tolist()]


def test_the_same_seed_draws_the_same_step():
    a, b = grpo_batch(seed=3, policy_fields=True), grpo_batch(seed=3, policy_fields=True)
    assert all(torch.equal(a.batch[k], b.batch[k]) for k in a.batch)
    assert not torch.equal(a.batch["rm_scores"], grpo_batch(seed=4).batch["rm_scores"])
    assert (a.batch["old_log_probs"] <= 0).all() and (a.batch["entropy"] >= 0).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"group_size": 0}, "group_size >= 1"),
        ({"min_length": 9, "width": 8}, "min_length=9 must lie in"),
        ({"empty_rows": 17}, r"empty_rows=17 must lie in \[0, 16\]"),
        ({"uids": ["a", "a", "b", "c"]}, "uids must name 4 distinct groups"),
    ],
)
def test_impossible_layouts_are_refused_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        grpo_layout(**kwargs)


def test_toy_components_register_under_the_prefix_and_behave_as_documented():
    names = register_toy_components("kittest")
    assert names == {"constant": "kittest_constant", "reward": "kittest_reward", "proportional": "kittest_proportional"}
    registry = get_registry()
    assert registry.get("reweighter", "kittest_proportional") and registry.get("sampler", "kittest_proportional")
    batch = grpo_batch(2, 4, padding_rows=1, seed=2)
    constant = build_from_config({"scorer": "kittest_constant", "actuator": "kittest_proportional"})
    weights = constant.actuator.act(constant.scorer.score(batch, 0), batch)
    valid = valid_sample_mask(batch)
    assert torch.allclose(weights[valid], torch.ones(int(valid.sum()))) and weights[~valid].eq(0).all()
    reward = build_from_config({"scorer": "kittest_reward", "actuator": "kittest_proportional"})
    torch.testing.assert_close(reward.scorer.score(batch, 0), batch.batch["rm_scores"].sum(-1))
    with pytest.raises(ValueError, match="must be a non-empty identifier"):
        register_toy_components("bad-prefix")


def test_the_domain_preference_scorer_scores_by_domain_and_keeps_its_count_across_a_resume():
    class PreferMath(DomainPreferenceScorer):
        domain_scores, other_score = {"math": 2.0}, 0.5

    candidates = rows_batch([1, 1, 1], columns={"domain": ["math", "code", "math"]})
    scorer = PreferMath()
    assert scorer.score(candidates, 1).tolist() == [2.0, 0.5, 2.0]
    scorer.observe(candidates, 1)
    scorer.observe(candidates, 2)
    resumed = PreferMath()
    resumed.load_state_dict(scorer.state_dict())
    assert resumed.observed == 2


def test_pip_site_installs_a_real_wheel_that_discovery_finds(pip_site):
    pip_site.install("lk-good", "0.1.0", "lk_good", LENGTH_PLUGIN)
    dist = importlib.metadata.distribution("lk-good")
    assert dist.read_text("INSTALLER").strip() == "pip" and pip_site.file("lk_good").is_file()
    assert get_registry().get("scorer", "lk_length") is not None


def test_the_tripwire_plugin_leaves_its_marker_when_imported(fake_site, only_plugins):
    fake_site.add_dist("lk-tripwire", "0.1.0", {"lk_tripwire": TRIPWIRE_PLUGIN}, {"lk_tripwire": "lk_tripwire"})
    only_plugins("lk-tripwire")
    with pytest.warns(Warning, match="lk_tripwire must never be imported"):
        get_registry()
    assert (fake_site.root / "IMPORTED").read_text() == "lk_tripwire was imported"
