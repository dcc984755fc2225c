"""``mechanism: select`` inside verl's real ``_compute_advantage``, against a real TransferQueue.

The kept set must become 0/1 weights renormalised in the loss unit, and
selectors that ask for it (GFPO, PODS) must leave advantages equal to verl's
own estimator run on the kept rows alone.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_lab.verl import sandbox

pytestmark = pytest.mark.verl


def make_trainer(make_config, dataflex, overrides=()):
    import verl  # noqa: F401  (loads the verl.plugins entry point that registers the trainers)
    from verl.trainer.ppo.v1 import get_trainer_cls

    trainer = get_trainer_cls("dataflex_sync")(make_config(overrides, dataflex))
    trainer.global_steps = 1
    return trainer


def run_step(trainer, rollout):
    import transfer_queue as tq

    meta = sandbox.put_rollout(rollout)
    metrics: dict = {}
    out = trainer._compute_advantage(meta, metrics)
    fields = ["advantages", "rollout_is_weights", "response_mask", "rm_scores"]
    data = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id, select_fields=fields)
    padded = {name: data[name].to_padded_tensor(0) for name in fields}
    sandbox.clear(out)
    return out, metrics, padded


def row_uids(rollout):
    """Each row's group id, from its trajectory key ``{uid}_{session}_{index}``."""
    return [key.rsplit("_", 2)[0] for key in rollout.keys]


def row_groups(rollout):
    """``{uid: [rows]}`` over real (non-padding) rows, in row order."""
    groups: dict[str, list[int]] = {}
    for row, (uid, tag) in enumerate(zip(row_uids(rollout), rollout.tags)):
        if not tag["is_padding"]:
            groups.setdefault(uid, []).append(row)
    return groups


SOLVE_RATE_BAND = {
    "mechanism": "select",
    "scorer": {"name": "group_solve_rate"},
    "actuator": {"name": "threshold_band"},
}


@pytest.mark.parametrize(("loss_agg_mode", "unit"), [("token-mean", "token"), ("seq-mean-token-mean", "sequence")])
def test_threshold_band_keeps_exactly_the_mixed_groups_and_renormalises(queue, make_config, loss_agg_mode, unit):
    trainer = make_trainer(make_config, SOLVE_RATE_BAND, [f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode}"])
    rollout = sandbox.synthetic_rollout(num_prompts=12, n=4, padding_rows=3, seed=3)
    out, metrics, got = run_step(trainer, rollout)
    assert {"rollout_is_weights", "advantages"} <= set(out.fields)

    reward = got["rm_scores"].sum(-1)
    expected = torch.zeros(len(reward), dtype=torch.bool)
    dropped_groups = 0
    for rows in row_groups(rollout).values():
        rate = float((reward[rows] > 0).float().mean())
        keep = 0.0 < rate < 1.0
        expected[rows] = keep
        dropped_groups += not keep
    assert 0 < dropped_groups < 12, "the synthetic batch must contain both kinds of groups"

    mask = got["response_mask"].bool()
    weights = got["rollout_is_weights"]
    per_row_max = torch.where(mask, weights, torch.zeros(())).amax(-1)
    assert ((per_row_max > 0) == expected).all(), "kept rows must be exactly the groups with 0 < solve rate < 1"
    kept_tokens = weights[mask & expected.unsqueeze(-1)]
    assert torch.allclose(kept_tokens, kept_tokens[0].expand_as(kept_tokens)), "a 0/1 selection gives one weight"
    valid_rows = mask.any(-1)
    if unit == "token":
        assert weights[mask].mean().item() == pytest.approx(1.0, abs=1e-5)
        assert kept_tokens[0].item() == pytest.approx(mask.sum().item() / mask[expected].sum().item(), rel=1e-5)
    else:
        per_seq = (weights * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        assert per_seq[valid_rows].mean().item() == pytest.approx(1.0, abs=1e-5)
        assert kept_tokens[0].item() == pytest.approx(valid_rows.sum().item() / expected.sum().item(), rel=1e-5)

    assert metrics["dataflex/kept_fraction"] == pytest.approx(expected.sum().item() / valid_rows.sum().item())
    assert metrics["dataflex/groups_fully_dropped"] == dropped_groups
    assert metrics["dataflex/groups_total"] == 12
    assert metrics["dataflex/advantage_recomputed"] == 0.0


def grpo_on(rows, got, uids, estimator="grpo"):
    """verl's group estimator run on ``rows`` alone (the reference the host must match)."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, compute_rloo_outcome_advantage

    index = np.asarray([uids[r] for r in rows], dtype=object)
    fn = {"grpo": compute_grpo_outcome_advantage, "rloo": compute_rloo_outcome_advantage}[estimator]
    adv, _ = fn(token_level_rewards=got["rm_scores"][rows], response_mask=got["response_mask"][rows], index=index)
    return adv


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_gfpo_keeps_the_shortest_and_recomputes_advantages_on_the_kept_subset(queue, make_config, estimator):
    dataflex = {
        "mechanism": "select",
        "scorer": {"name": "reward_difficulty"},
        "actuator": {"name": "gfpo", "params": {"keep_per_group": 2, "metric": "length"}},
    }
    trainer = make_trainer(make_config, dataflex, [f"algorithm.adv_estimator={estimator}"])
    rollout = sandbox.synthetic_rollout(num_prompts=10, n=4, padding_rows=2, seed=5)
    out, metrics, got = run_step(trainer, rollout)
    uids = row_uids(rollout)
    mask = got["response_mask"].bool()
    length = mask.sum(-1)
    reward = got["rm_scores"].sum(-1)

    kept: list[int] = []
    for rows in row_groups(rollout).values():
        kept += sorted(rows, key=lambda r: (int(length[r]), -float(reward[r]), r))[:2]
    kept.sort()
    weights = got["rollout_is_weights"]
    assert sorted(torch.nonzero((weights * mask).sum(-1) > 0).flatten().tolist()) == kept

    reference = grpo_on(kept, got, uids, estimator)
    torch.testing.assert_close(got["advantages"][kept] * mask[kept], reference * mask[kept], rtol=1e-5, atol=1e-6)
    dropped = [r for r in range(len(uids)) if r not in kept]
    assert torch.all(got["advantages"][dropped] == 0)
    # The subset advantages differ from the full-group ones: the recomputation did something.
    real_rows = list(range(40))  # padding rows come last
    full = grpo_on(real_rows, got, uids, estimator)
    assert metrics["dataflex/advantage_recomputed"] == 1.0
    assert not torch.allclose(got["advantages"][kept] * mask[kept], full[kept] * mask[kept])


def test_max_variance_without_recompute_keeps_verls_full_batch_advantages(queue, make_config):
    dataflex = {
        "mechanism": "select",
        "scorer": {"name": "reward_difficulty"},
        "actuator": {"name": "max_variance", "params": {"keep_per_group": 2, "recompute_advantage": False}},
    }
    trainer = make_trainer(make_config, dataflex)
    rollout = sandbox.synthetic_rollout(num_prompts=6, n=4, seed=7)
    _, metrics, got = run_step(trainer, rollout)
    rows = list(range(24))
    reference = grpo_on(rows, got, row_uids(rollout))
    mask = got["response_mask"].bool()
    torch.testing.assert_close(got["advantages"] * mask, reference * mask, rtol=1e-5, atol=1e-6)
    assert metrics["dataflex/advantage_recomputed"] == 0.0
    kept_per_group = [
        int(((got["rollout_is_weights"][r] * mask[r]).sum(-1) > 0).sum()) for r in row_groups(rollout).values()
    ]
    assert kept_per_group == [2] * 6


def test_recomputation_reads_once_and_writes_advantages_with_the_weights(queue, make_config, monkeypatch):
    """verl's one read and one write per hook: the recomputed advantages travel in the meta returned to verl."""
    import transfer_queue as tq

    calls = {"get": [], "put": []}
    real_get, real_put = tq.kv_batch_get, tq.kv_batch_put

    def counted_get(*args, **kwargs):
        calls["get"].append(list(kwargs.get("select_fields") or ()))
        return real_get(*args, **kwargs)

    def counted_put(*args, **kwargs):
        calls["put"].append(sorted(kwargs["fields"].keys()))
        return real_put(*args, **kwargs)

    dataflex = {
        "mechanism": "select",
        "scorer": {"name": "reward_difficulty"},
        "actuator": {"name": "gfpo", "params": {"keep_per_group": 2, "metric": "length"}},
    }
    trainer = make_trainer(make_config, dataflex)
    meta = sandbox.put_rollout(sandbox.synthetic_rollout(num_prompts=4, n=4, padding_rows=1, seed=11))
    monkeypatch.setattr(tq, "kv_batch_get", counted_get)
    monkeypatch.setattr(tq, "kv_batch_put", counted_put)
    metrics: dict = {}
    out = trainer._compute_advantage(meta, metrics)
    monkeypatch.undo()
    sandbox.clear(out)

    assert metrics["dataflex/advantage_recomputed"] == 1.0
    # verl's own _compute_advantage does one get and one put; the DataFlex hook rides on them and adds none.
    assert len(calls["get"]) == 1, calls["get"]
    assert {"uid", "response_mask", "rm_scores"} <= set(calls["get"][0])
    # verl's put (it rewrites response_mask under the default rollout correction) plus the weights
    assert calls["put"] == [["advantages", "response_mask", "returns", "rollout_is_weights"]]
    assert {"advantages", "returns", "rollout_is_weights"} <= set(out.fields)
