"""The verl host against real verl 0.9 trainer code and a real TransferQueue on a local Ray.

Each test composes verl's real ``ppo_trainer`` config, builds the trainer that
``get_trainer_cls("dataflex_sync")`` returns, puts a synthetic rollout into the
queue and calls the real ``_compute_advantage``; the loss tests feed the queued
fields to verl's real ``ppo_loss``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import transfer_queue as tq

from dataflex_core import (
    ConfigError,
    IncompatibleComponentError,
    InvalidOutputError,
    UnknownComponentError,
    get_registry,
)
from dataflex_lab.verl import sandbox
from dataflex_verl.queue_io import MissingFieldError

pytestmark = pytest.mark.verl

ADV_SOFTMAX = {
    "scorer": {"name": "advantage_magnitude"},
    "actuator": {"name": "softmax", "params": {"temperature": 0.5}},
}


def trainer_for(make_config, overrides=(), mode="dataflex_sync", **block):
    from verl.trainer.ppo.v1 import get_trainer_cls

    config = make_config(overrides, dataflex=block or ADV_SOFTMAX)
    trainer = get_trainer_cls(mode)(config)
    trainer.global_steps = 1
    return trainer


def fetch(meta, *fields):
    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=list(fields))
    return {name: data[name].to_padded_tensor(0) for name in fields if name in data.keys()}


def run(trainer, **rollout_kwargs):
    rollout = sandbox.synthetic_rollout(**{"num_prompts": 6, "n": 4, **rollout_kwargs})
    meta = sandbox.put_rollout(rollout)
    metrics: dict = {}
    out = trainer._compute_advantage(meta, metrics)
    return meta, out, metrics


def ones(meta):
    """Weights 1 on every response position: verl's loss as if no weights were written."""
    return torch.ones_like(fetch(meta, "response_mask")["response_mask"], dtype=torch.float32)


def valid_tokens(meta, mask):
    padding = torch.tensor([t["is_padding"] for t in meta.tags])
    return mask.bool() & ~padding.unsqueeze(-1)


def softmax_weights_by_hand(adv, valid, temperature):
    """advantage_magnitude + softmax, written out: per-sample weights, mean one over valid samples."""
    scores = torch.where(valid, adv.abs(), torch.zeros(())).sum(-1) / valid.sum(-1).clamp(min=1)
    rows = valid.any(-1)
    exp = torch.where(rows, torch.exp((scores - scores[rows].max()) / temperature), torch.zeros(()))
    return exp * rows.sum() / exp.sum()


def token_mean(w, valid):
    return (w * valid).sum() / valid.sum()


def sequence_mean(w, valid):
    rows = valid.any(-1)
    per_seq = (w * valid).sum(-1) / valid.sum(-1).clamp(min=1)
    return per_seq[rows].mean()


# -- registration and base behaviour -------------------------------------------------


def test_plain_import_verl_registers_the_trainers_through_the_entry_point():
    code = (
        "import sys, verl\n"
        "assert 'dataflex_verl.trainers' not in sys.modules\n"
        "from verl.trainer.ppo.v1 import get_trainer_cls\n"
        "for mode in ('dataflex_sync', 'dataflex_colocate_async', 'dataflex_separate_async'):\n"
        "    print(mode, get_trainer_cls(mode).__module__, get_trainer_cls(mode).base_trainer_mode)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.split("\n")
    assert "dataflex_sync dataflex_verl.trainers sync" in lines
    assert "dataflex_colocate_async dataflex_verl.trainers colocate_async" in lines
    assert "dataflex_separate_async dataflex_verl.trainers separate_async" in lines


@pytest.mark.parametrize(
    ("mode", "base", "buffer"),
    [("dataflex_sync", "sync", "ReplayBuffer"), ("dataflex_colocate_async", "colocate_async", "ReplayBufferAsync")],
)
def test_trainer_keeps_its_base_trainer_mode(make_config, mode, base, buffer):
    trainer = trainer_for(make_config, mode=mode)
    assert trainer.trainer_mode == base
    assert trainer.config.trainer.v1.trainer_mode == base
    assert type(trainer.replay_buffer).__name__ == buffer


# -- reweighting in _compute_advantage -----------------------------------------------


def test_grpo_token_mean_writes_normalised_weights_and_returns_their_meta(make_config, queue):
    trainer = trainer_for(make_config)
    meta, out, metrics = run(trainer)
    assert "rollout_is_weights" in out.fields and "rollout_is_weights" not in meta.fields
    got = fetch(out, "rollout_is_weights", "advantages", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    per_sample = softmax_weights_by_hand(got["advantages"], valid, 0.5)
    expected = per_sample.unsqueeze(-1) * valid / token_mean(per_sample.unsqueeze(-1).expand_as(valid), valid)
    torch.testing.assert_close(got["rollout_is_weights"], expected.float(), rtol=1e-5, atol=1e-6)
    assert token_mean(got["rollout_is_weights"], valid).item() == pytest.approx(1.0, abs=1e-5)
    assert got["rollout_is_weights"].std() > 0.05  # the scores differ, so must the weights
    assert metrics["dataflex/weight/mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["dataflex/weight/max"] > metrics["dataflex/weight/min"]
    assert 0 < metrics["dataflex/ess_fraction"] <= 1
    assert metrics["dataflex/zero_weight_fraction"] == 0.0
    assert metrics["dataflex/hook_time_s"] > 0


ENTROPY_SOFTMAX = {
    "scorer": {"name": "hosttest_mean_entropy"},
    "actuator": {"name": "softmax", "params": {"temperature": 0.5}},
}


def test_the_hook_rides_on_verls_one_get_and_one_put(make_config, queue, monkeypatch):
    """No queue I/O of DataFlex's own: verl's get carries ``entropy``, verl's put the weights, verl is unchanged."""
    from verl.trainer.ppo.v1 import trainer_base

    calls: dict[str, list] = {"get": [], "put": [], "verl_sees": []}
    real_get, real_put, real_proto = tq.kv_batch_get, tq.kv_batch_put, trainer_base.DataProto

    def counted_get(**kwargs):
        calls["get"].append(sorted(kwargs["select_fields"]))
        return real_get(**kwargs)

    def counted_put(**kwargs):
        calls["put"].append(sorted(kwargs["fields"].keys()))
        return real_put(**kwargs)

    def seen_by_verl(*args, **kwargs):  # verl builds its DataProto from what its get returned
        calls["verl_sees"].append(sorted(kwargs["batch"].keys()))
        return real_proto(*args, **kwargs)

    rollout = sandbox.synthetic_rollout(num_prompts=6, n=4, padding_rows=2, seed=5)
    results = {}
    for mode in ("sync", "dataflex_sync"):
        trainer = trainer_for(make_config, mode=mode, **ENTROPY_SOFTMAX)
        meta = sandbox.put_rollout(rollout)
        monkeypatch.setattr(tq, "kv_batch_get", counted_get)
        monkeypatch.setattr(tq, "kv_batch_put", counted_put)
        monkeypatch.setattr(trainer_base, "DataProto", seen_by_verl)
        out = trainer._compute_advantage(meta, {})
        monkeypatch.undo()
        results[mode] = {name: list(value) for name, value in calls.items()}
        results[mode]["out"] = fetch(out, "advantages", "returns", "response_mask", "entropy", "rollout_is_weights")
        results[mode]["fields"] = set(out.fields)
        for value in calls.values():
            value.clear()
        sandbox.clear(out)

    plain, dataflex = results["sync"], results["dataflex_sync"]
    assert len(plain["get"]) == len(plain["put"]) == 1
    assert dataflex["get"] == [sorted([*plain["get"][0], "entropy"])]
    assert dataflex["put"] == [sorted([*plain["put"][0], "rollout_is_weights"])]
    assert dataflex["verl_sees"] == plain["verl_sees"] and "entropy" not in dataflex["verl_sees"][0]
    for name in ("advantages", "returns", "response_mask"):
        assert torch.equal(dataflex["out"][name], plain["out"][name]), name
    assert "rollout_is_weights" in dataflex["fields"] and "rollout_is_weights" not in plain["fields"]
    got = dataflex["out"]
    valid = valid_tokens(out, got["response_mask"])
    per_sample = softmax_weights_by_hand(got["entropy"], valid, 0.5)
    expected = per_sample.unsqueeze(-1) * valid / token_mean(per_sample.unsqueeze(-1).expand_as(valid), valid)
    torch.testing.assert_close(got["rollout_is_weights"], expected.float(), rtol=1e-5, atol=1e-6)


def test_without_verls_put_the_hook_does_its_own_read_and_write(make_config, queue, monkeypatch, caplog):
    """If verl's step stops calling the queue through ``trainer_base.tq``, the weights still reach the actor."""
    from verl.trainer.ppo.v1 import trainer_base

    from dataflex_verl import mixin, queue_io

    monkeypatch.setattr(queue_io, "install_verl_queue", lambda: None)
    monkeypatch.setattr(trainer_base, "tq", tq)  # verl's I/O bypasses the capture
    monkeypatch.setattr(mixin, "_warned_separate_io", False)
    trainer = trainer_for(make_config, **ENTROPY_SOFTMAX)
    with caplog.at_level("WARNING", logger="dataflex_verl"):
        _, out, metrics = run(trainer)
        _, _, second = run(trainer)
    fallbacks = [r for r in caplog.records if r.name == "dataflex_verl" and "falling back" in r.message]
    assert len(fallbacks) == 1 and fallbacks[0].levelname == "WARNING"  # once, not every step
    assert "rollout_is_weights" in out.fields and metrics["dataflex/active"] == 1.0
    # the warning comes once; the metric says it on every step
    assert (metrics["dataflex/separate_io"], metrics["dataflex/separate_io_total"]) == (1.0, 1.0)
    assert (second["dataflex/separate_io"], second["dataflex/separate_io_total"]) == (1.0, 2.0)
    got = fetch(out, "rollout_is_weights", "entropy", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    per_sample = softmax_weights_by_hand(got["entropy"], valid, 0.5)
    expected = per_sample.unsqueeze(-1) * valid / token_mean(per_sample.unsqueeze(-1).expand_as(valid), valid)
    torch.testing.assert_close(got["rollout_is_weights"], expected.float(), rtol=1e-5, atol=1e-6)


def test_verls_own_put_is_counted_as_no_separate_io(make_config, queue):
    _, _, metrics = run(trainer_for(make_config))
    assert (metrics["dataflex/separate_io"], metrics["dataflex/separate_io_total"]) == (0.0, 0.0)


def test_the_fallback_composes_with_verls_weights_and_stops_after_verls_put(make_config, queue, monkeypatch):
    """Without verl's put seen: verl's weights are still composed; an error comes after verl wrote its advantages."""
    from verl.trainer.ppo.v1 import trainer_base

    from dataflex_verl import queue_io

    monkeypatch.setattr(queue_io, "install_verl_queue", lambda: None)
    monkeypatch.setattr(trainer_base, "tq", tq)
    overrides = ["algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=false"]
    rollout = sandbox.synthetic_rollout(6, 4, seed=3, rollout_log_probs=True)
    verl_weights = verl_alone(make_config, overrides, rollout)["rollout_is_weights"]
    trainer = trainer_for(make_config, overrides)
    out = trainer._compute_advantage(sandbox.put_rollout(rollout), metrics := {})
    assert metrics["dataflex/separate_io"] == 1.0 and metrics["dataflex/weight/composed"] == 1.0
    got = fetch(out, "rollout_is_weights", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    assert token_mean(got["rollout_is_weights"], valid).item() == pytest.approx(
        token_mean(verl_weights, valid).item(), rel=1e-5
    )
    assert not torch.allclose(got["rollout_is_weights"] * valid, verl_weights * valid)
    sandbox.clear(out)

    failing = trainer_for(make_config, scorer={"name": "hosttest_nan"}, actuator={"name": "softmax"})
    meta = sandbox.put_rollout(sandbox.synthetic_rollout(4, 4))
    with pytest.raises(InvalidOutputError, match="NaN"):
        failing._compute_advantage(meta, {})
    left = fetch(meta, "rollout_is_weights", "advantages")
    assert "advantages" in left and "rollout_is_weights" not in left  # verl's put went out, DataFlex's did not
    sandbox.clear(meta)


def test_seq_mean_token_mean_normalises_per_sequence(make_config, queue):
    trainer = trainer_for(make_config, ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"])
    assert trainer.dataflex.loss_unit == "sequence"
    _, out, metrics = run(trainer)
    got = fetch(out, "rollout_is_weights", "advantages", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    per_sample = softmax_weights_by_hand(got["advantages"], valid, 0.5)
    torch.testing.assert_close(
        got["rollout_is_weights"], (per_sample.unsqueeze(-1) * valid).float(), rtol=1e-5, atol=1e-6
    )
    assert sequence_mean(got["rollout_is_weights"], valid).item() == pytest.approx(1.0, abs=1e-5)
    assert token_mean(got["rollout_is_weights"], valid).item() != pytest.approx(1.0, abs=1e-3)
    # the headline metric is the mean in the loss's unit, and says which unit that is
    assert metrics["dataflex/weight/mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["dataflex/weight/unit_is_sequence"] == 1.0
    assert metrics["dataflex/weight/token_mean"] == pytest.approx(token_mean(got["rollout_is_weights"], valid).item())


def test_sapo_policy_loss_forces_the_sequence_unit(make_config):
    trainer = trainer_for(make_config, ["actor_rollout_ref.actor.policy_loss.loss_mode=sapo"])
    assert trainer.dataflex.ctx["loss_agg_mode"] == "token-mean"
    assert trainer.dataflex.loss_unit == "sequence"


def test_token_granularity_weights_vary_within_a_sequence(make_config, queue):
    trainer = trainer_for(
        make_config, scorer={"name": "hosttest_token_position"}, actuator={"name": "hosttest_proportional"}
    )
    _, out, _ = run(trainer)
    got = fetch(out, "rollout_is_weights", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    raw = (torch.arange(valid.shape[1]) + 1.1).expand(valid.shape) * valid
    torch.testing.assert_close(got["rollout_is_weights"], (raw / token_mean(raw, valid)).float(), rtol=1e-5, atol=1e-6)


def test_real_token_plugins_under_seq_mean_token_mean(make_config, queue):
    """token_prob -> advantage_reweight: per-token weights renormalised per sequence by the host."""
    trainer = trainer_for(
        make_config,
        ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"],
        scorer={"name": "token_prob"},
        actuator={"name": "advantage_reweight", "params": {"alpha": 0.5}},
    )
    _, out, _ = run(trainer, padding_rows=2)
    got = fetch(out, "rollout_is_weights", "old_log_probs", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    raw = (0.5 * got["old_log_probs"].exp() + 0.5) * valid
    by_hand = raw / sequence_mean(raw, valid)
    torch.testing.assert_close(got["rollout_is_weights"], by_hand.float(), rtol=1e-5, atol=1e-6)
    assert sandbox.actor_loss(out, trainer.config).item() == pytest.approx(
        sandbox.actor_loss(out, trainer.config, weights=by_hand).item(), rel=1e-5
    )


def test_gae_with_a_critic_is_reweighted(make_config, queue):
    trainer = trainer_for(make_config, ["algorithm.adv_estimator=gae"])
    assert trainer.use_critic
    _, out, _ = run(trainer, values=True)
    got = fetch(out, "rollout_is_weights", "advantages", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    per_sample = softmax_weights_by_hand(got["advantages"], valid, 0.5)
    expected = per_sample.unsqueeze(-1) * valid / token_mean(per_sample.unsqueeze(-1).expand_as(valid), valid)
    torch.testing.assert_close(got["rollout_is_weights"], expected.float(), rtol=1e-5, atol=1e-6)


def test_padding_rows_get_weight_zero_and_are_shown_as_empty_rows(make_config, queue):
    SeenRowsScorer = get_registry().get("scorer", "hosttest_seen_rows").cls
    SeenRowsScorer.seen.clear()
    trainer = trainer_for(
        make_config, scorer={"name": "hosttest_seen_rows"}, actuator={"name": "hosttest_proportional"}
    )
    _, out, _ = run(trainer, padding_rows=3)
    padding = torch.tensor([t["is_padding"] for t in out.tags])
    assert int(padding.sum()) == 3
    (seen,) = SeenRowsScorer.seen
    # every row, without a copy of the real ones; the padding rows are empty rows (their weight below is 0)
    assert len(seen) == len(out) and sum(str(u).startswith("pad") for u in seen) == 3
    got = fetch(out, "rollout_is_weights", "response_mask")
    assert got["rollout_is_weights"][padding].abs().sum() == 0
    valid = valid_tokens(out, got["response_mask"])
    assert token_mean(got["rollout_is_weights"], valid).item() == pytest.approx(1.0, abs=1e-5)


def verl_alone(make_config, overrides, rollout, mode="sync"):
    """What verl's own ``_compute_advantage`` writes for ``rollout`` under ``overrides`` (no DataFlex)."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    out = get_trainer_cls(mode)(make_config(overrides))._compute_advantage(sandbox.put_rollout(rollout), {})
    got = fetch(out, "rollout_is_weights", "response_mask")
    sandbox.clear(out)
    return got


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.rollout_correction.rollout_is=token"],
        # verl decides from the rollout, not the config: a rollout that carries rollout_log_probs gets verl's
        # importance weights even with calculate_log_probs=false (trainer_base._compute_advantage)
        ["algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=false"],
    ],
    ids=["calculate_log_probs", "rollout_carries_log_probs"],
)
def test_rollout_correction_weights_are_composed_not_overwritten(make_config, queue, overrides):
    rollout = sandbox.synthetic_rollout(6, 4, seed=3, rollout_log_probs=True)
    verl_weights = verl_alone(make_config, overrides, rollout)["rollout_is_weights"]

    trainer = trainer_for(make_config, overrides)
    out = trainer._compute_advantage(sandbox.put_rollout(rollout), metrics := {})
    got = fetch(out, "rollout_is_weights", "advantages", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    per_sample = softmax_weights_by_hand(got["advantages"], valid, 0.5).unsqueeze(-1)
    product = verl_weights * per_sample * valid
    expected = product * token_mean(verl_weights, valid) / token_mean(product, valid)
    torch.testing.assert_close(got["rollout_is_weights"], expected.float(), rtol=1e-5, atol=1e-6)
    # the step size verl's own correction would take is kept
    assert token_mean(got["rollout_is_weights"], valid).item() == pytest.approx(
        token_mean(verl_weights, valid).item(), rel=1e-5
    )
    assert not torch.allclose(got["rollout_is_weights"] * valid, verl_weights * valid)
    assert metrics["dataflex/weight/composed"] == 1.0
    assert metrics["dataflex/weight/mean"] == pytest.approx(1.0, abs=1e-5)  # written over verl's, in the unit
    factor = expected / verl_weights.clamp(min=1e-30) * valid
    assert metrics["dataflex/weight/factor_mean"] == pytest.approx(token_mean(factor, valid).item(), rel=1e-4)
    sandbox.clear(out)


def test_without_verls_weights_nothing_is_composed(make_config, queue):
    """rollout_is set, but the rollout carries no rollout_log_probs: verl writes no weights, DataFlex's have mean 1."""
    overrides = ["algorithm.rollout_correction.rollout_is=token"]
    rollout = sandbox.synthetic_rollout(6, 4, seed=3, rollout_log_probs=False)
    assert "rollout_is_weights" not in verl_alone(make_config, overrides, rollout)
    trainer = trainer_for(make_config, overrides)
    out = trainer._compute_advantage(sandbox.put_rollout(rollout), metrics := {})
    got = fetch(out, "rollout_is_weights", "advantages", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    per_sample = softmax_weights_by_hand(got["advantages"], valid, 0.5).unsqueeze(-1) * valid
    torch.testing.assert_close(got["rollout_is_weights"], (per_sample / token_mean(per_sample, valid)).float())
    assert metrics["dataflex/weight/composed"] == 0.0
    sandbox.clear(out)


def test_warmup_leaves_the_batch_alone_until_warmup_step(make_config, queue):
    trainer = trainer_for(make_config, **ADV_SOFTMAX, warmup_step=5)
    trainer.global_steps = 4
    meta, out, metrics = run(trainer)
    assert "rollout_is_weights" not in out.fields
    assert metrics["dataflex/active"] == 0.0
    assert "rollout_is_weights" not in fetch(out, "rollout_is_weights", "advantages")
    trainer.global_steps = 5
    _, out, metrics = run(trainer)
    assert "rollout_is_weights" in out.fields and metrics["dataflex/active"] == 1.0


def test_every_step_counts_its_rollouts_before_and_after_warmup(make_config, queue):
    """The compute counters from verl's own get and put: verl's padding rows are no rollouts, zero-advantage
    rows are wasted, and the totals run across the idle and the active step."""
    trainer = trainer_for(make_config, **ADV_SOFTMAX, warmup_step=2)
    totals = 0.0
    for step in (1, 2):
        trainer.global_steps = step
        meta, out, metrics = run(trainer, padding_rows=2, seed=step)
        got = fetch(out, "advantages", "response_mask")
        real = ~torch.tensor([bool(tag.get("is_padding", False)) for tag in out.tags])
        mask = got["response_mask"].bool()
        trained = real & mask.any(-1)
        moving = ((got["advantages"] != 0) & mask).any(-1)
        assert metrics["dataflex/active"] == float(step == 2)
        assert metrics["dataflex/compute/rollouts_generated"] == 24.0
        assert metrics["dataflex/compute/rollouts_trained"] == float(trained.sum())
        assert metrics["dataflex/compute/rollouts_wasted"] == float((trained & ~moving).sum())
        assert metrics["dataflex/compute/tokens_generated"] == float(mask[real].sum())
        totals += 24.0
        assert metrics["dataflex/compute/rollouts_generated_total"] == totals
        sandbox.clear(out)


# -- invalid output and missing fields -------------------------------------------------


def test_on_invalid_raise_names_plugin_step_and_problem_and_writes_nothing(make_config, queue):
    trainer = trainer_for(make_config, scorer={"name": "hosttest_nan"}, actuator={"name": "softmax"})
    trainer.global_steps = 7
    rollout = sandbox.synthetic_rollout(4, 4)
    meta = sandbox.put_rollout(rollout)
    with pytest.raises(InvalidOutputError, match=r"scorer hosttest_nan returned invalid scores at step 7: .*NaN"):
        trainer._compute_advantage(meta, {})
    assert "rollout_is_weights" not in fetch(meta, "rollout_is_weights", "advantages")


@pytest.mark.parametrize(
    ("actuator", "problem"),
    # 16 rows and verl's padding row, which components see as an empty row: 17 expected, one more returned
    [("hosttest_negative", "negative"), ("hosttest_wrong_shape", r"shape \(18,\), but prompt granularity.*\(17,\)")],
)
def test_invalid_weights_raise_by_default(make_config, queue, actuator, problem):
    trainer = trainer_for(make_config, scorer={"name": "advantage_magnitude"}, actuator={"name": actuator})
    with pytest.raises(
        InvalidOutputError, match=rf"reweighter {actuator} returned invalid weights at step 1: .*{problem}"
    ):
        run(trainer, num_prompts=4, n=4, padding_rows=1)


def test_on_invalid_uniform_uses_weights_one_and_counts_it(make_config, queue):
    trainer = trainer_for(
        make_config,
        scorer={"name": "advantage_magnitude"},
        actuator={"name": "hosttest_negative"},
        on_invalid="uniform",
    )
    for expected_total in (1.0, 2.0):
        meta, out, metrics = run(trainer)
        assert "rollout_is_weights" not in out.fields
        assert metrics["dataflex/uniform_fallback"] == 1.0
        assert metrics["dataflex/uniform_fallback_total"] == expected_total
    assert sandbox.actor_loss(out, trainer.config).item() == pytest.approx(
        sandbox.actor_loss(out, trainer.config, weights=ones(out)).item(), rel=1e-6
    )


def test_a_field_missing_from_the_queue_is_named(make_config, queue):
    trainer = trainer_for(make_config, scorer={"name": "hosttest_needs_data_source"}, actuator={"name": "softmax"})
    with pytest.raises(MissingFieldError, match=r"no \['data_source'\]"):
        run(trainer)


#: mechanism allocate with the allocators package's components.
ALLOCATE = {
    "mechanism": "allocate",
    "scorer": {"name": "solve_rate_posterior"},
    "actuator": {"name": "knapsack"},
}

# -- mount-time validation --------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "block", "error", "message"),
    [
        ([], None, ConfigError, r"needs a dataflex: block.*\+dataflex\.scorer\.name"),
        ([], {"scorer": {"name": "advantage_magnitud"}, "actuator": {"name": "softmax"}}, UnknownComponentError,
         "did you mean 'advantage_magnitude'"),
        ([], {"scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax", "params": {"temp": 1.0}}},
         ConfigError, "has no param 'temp'"),
        ([], {**ADV_SOFTMAX, "on_invalid": "ignore"}, ConfigError, "on_invalid='ignore' is not one of raise, uniform"),
        (["algorithm.adv_estimator=gae"], {"scorer": {"name": "group_solve_rate"}, "actuator": {"name": "softmax"}},
         IncompatibleComponentError, "needs GRPO groups.*'gae'"),
        ([], {"scorer": {"name": "hosttest_needs_values"}, "actuator": {"name": "softmax"}},
         IncompatibleComponentError, "'values'.*critic.enable=true"),
        ([], {"scorer": {"name": "hosttest_needs_ref"}, "actuator": {"name": "softmax"}},
         IncompatibleComponentError, "'ref_log_prob'.*use_kl_loss=true"),
        (["actor_rollout_ref.rollout.calculate_log_probs=false"],
         {"scorer": {"name": "hosttest_needs_rollout_log_probs"}, "actuator": {"name": "softmax"}},
         IncompatibleComponentError, "calculate_log_probs=true"),
        (["distillation.enabled=true", "distillation.distillation_loss.use_task_rewards=false"], ADV_SOFTMAX,
         IncompatibleComponentError, "use_task_rewards=false skips the task policy loss altogether.*"
         "use_task_rewards=true"),
        (["distillation.enabled=true", "distillation.distillation_loss.use_task_rewards=false",
          "distillation.distillation_loss.use_policy_gradient=true"], {"mechanism": "select",
          "scorer": {"name": "group_solve_rate"}, "actuator": {"name": "threshold_band"}},
         IncompatibleComponentError, "'select'.*sets the task policy loss to 0.*distillation policy-gradient term"),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode"], ADV_SOFTMAX, IncompatibleComponentError,
         "loss_mode='bypass_mode'.*ignores rollout_is_weights"),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean"], ADV_SOFTMAX, IncompatibleComponentError,
         "geo_mean takes a per-sequence geometric mean"),
        ([], {"scorer": {"name": "hosttest_in_loss"}, "actuator": {"name": "softmax"}}, IncompatibleComponentError,
         "timing='in_loss'.*cannot run in mechanism 'reweight'"),
        ([], {"scorer": {"name": "hosttest_pre_rollout"}, "actuator": {"name": "softmax"}}, IncompatibleComponentError,
         "timing='pre_rollout'"),
        ([], {"mechanism": "filter", "scorer": {"name": "group_reward_variance"}, "actuator": {"name": "threshold_band"}},
         IncompatibleComponentError, "mechanism filter .* verl cannot refill: its V1 trainers refill only through "
         "their replay buffer.*Use mechanism select"),
        (["data.train_batch_size=8"], {**ALLOCATE, "allocate": {"budget": 12}}, ConfigError,
         "cannot split data.train_batch_size=8 prompts: 8 prompts x n_min=2 = 16 rollouts exceed the budget of 12"),
        ([], {**ALLOCATE, "allocate": {"n_min": 1}}, ConfigError, "n_min=1.*a group needs at least 2"),
    ],
    ids=[
        "no-block", "unknown-scorer", "unknown-param", "bad-on_invalid", "groups-under-gae",
        "values-without-critic", "ref-without-reference", "rollout-log-probs-off", "distillation-only",
        "distillation-pg-without-task-rewards", "bypass-mode-loss", "geo-mean",
        "in-loss-timing", "pre-rollout-timing", "filter-cannot-refill", "allocate-budget-too-small",
        "allocate-n-min-1",
    ],
)  # fmt: skip
def test_mount_refuses_configs_that_cannot_work(make_config, overrides, block, error, message):
    from verl.trainer.ppo.v1 import get_trainer_cls

    config = make_config(overrides, dataflex=block)
    with pytest.raises(error, match=message):
        get_trainer_cls("dataflex_sync")(config)


def test_allocate_is_refused_on_the_asynchronous_v1_trainers_with_the_reason(make_config):
    """Their dispatches follow the replay buffer's refills, so a per-batch budget has no fixed batch to hold to."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    config = make_config([], dataflex=ALLOCATE)
    with pytest.raises(IncompatibleComponentError, match="verl cannot vary them: its asynchronous V1 trainers"):
        get_trainer_cls("dataflex_colocate_async")(config)


def test_bypass_mode_is_accepted_because_the_v1_loss_still_multiplies_the_weights(make_config, queue):
    """v1 bypass_mode reuses rollout_log_probs as old_log_probs but keeps the configured policy loss."""
    import inspect

    from verl.trainer.ppo.v1 import trainer_base

    # the legacy trainer's switch to loss_mode=bypass_mode (which ignores rollout_is_weights) is not in v1
    assert "apply_bypass_mode" not in inspect.getsource(trainer_base)
    overrides = ["algorithm.rollout_correction.bypass_mode=true", "algorithm.rollout_correction.rollout_is=token"]
    trainer = trainer_for(make_config, overrides)
    assert trainer.config.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"
    _, out, metrics = run(trainer, padding_rows=2)
    got = fetch(out, "rollout_is_weights", "advantages", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    per_sample = softmax_weights_by_hand(got["advantages"], valid, 0.5).unsqueeze(-1) * valid
    by_hand = per_sample / token_mean(per_sample, valid)
    torch.testing.assert_close(got["rollout_is_weights"], by_hand.float(), rtol=1e-5, atol=1e-6)
    assert metrics["dataflex/weight/composed"] == 0.0  # v1 bypass writes no importance weights of its own
    weighted = sandbox.actor_loss(out, trainer.config)
    assert weighted.item() == pytest.approx(sandbox.actor_loss(out, trainer.config, weights=by_hand).item(), rel=1e-5)
    unweighted = sandbox.actor_loss(out, trainer.config, weights=ones(out))
    assert abs(weighted.item() - unweighted.item()) > 1e-4 * abs(unweighted.item())


def test_fields_that_the_config_produces_are_accepted(make_config):
    trainer = trainer_for(
        make_config,
        ["critic.enable=true", "actor_rollout_ref.actor.use_kl_loss=true"],
        scorer={"name": "hosttest_needs_values"},
        actuator={"name": "softmax"},
    )
    assert "values" in trainer.dataflex.fields


# -- the weights reach verl's real policy loss -----------------------------------------


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_ppo_loss_equals_the_loss_with_weights_applied_by_hand(make_config, queue, loss_agg_mode):
    trainer = trainer_for(make_config, [f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode}"])
    _, out, _ = run(trainer, padding_rows=2)
    got = fetch(out, "advantages", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    per_sample = softmax_weights_by_hand(got["advantages"], valid, 0.5).unsqueeze(-1) * valid
    unit_mean = token_mean if loss_agg_mode == "token-mean" else sequence_mean
    by_hand = per_sample / unit_mean(per_sample, valid)

    weighted = sandbox.actor_loss(out, trainer.config)
    assert weighted.item() == pytest.approx(sandbox.actor_loss(out, trainer.config, weights=by_hand).item(), rel=1e-5)
    unweighted = sandbox.actor_loss(out, trainer.config, weights=torch.ones_like(by_hand))
    assert abs(weighted.item() - unweighted.item()) > 1e-4 * abs(unweighted.item())


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_uniform_scores_leave_the_loss_unchanged(make_config, queue, loss_agg_mode):
    trainer = trainer_for(
        make_config,
        [f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode}"],
        scorer={"name": "hosttest_constant"},
        actuator={"name": "softmax"},
    )
    meta, out, _ = run(trainer, padding_rows=2)
    assert "rollout_is_weights" in out.fields
    got = fetch(out, "rollout_is_weights", "response_mask")
    valid = valid_tokens(out, got["response_mask"])
    torch.testing.assert_close(got["rollout_is_weights"], valid.float())
    plain = sandbox.actor_loss(out, trainer.config, weights=torch.ones_like(got["rollout_is_weights"]))
    assert sandbox.actor_loss(out, trainer.config).item() == pytest.approx(plain.item(), rel=1e-6)


def test_returning_the_pre_write_meta_would_drop_the_weights(make_config, queue):
    """The pitfall the host guards against: the actor only sees fields of the returned meta."""
    trainer = trainer_for(make_config)
    meta, out, _ = run(trainer)
    before_write = [name for name in out.fields if name != "rollout_is_weights"]
    stale = tq.KVBatchMeta(keys=out.keys, tags=out.tags, partition_id=out.partition_id, fields=before_write)
    unweighted = sandbox.actor_loss(out, trainer.config, weights=ones(out))
    assert sandbox.actor_loss(stale, trainer.config).item() == pytest.approx(unweighted.item(), rel=1e-6)
    assert sandbox.actor_loss(out, trainer.config).item() != pytest.approx(unweighted.item(), rel=1e-4)


# -- loud registration failures ---------------------------------------------------------


def test_verls_cli_refuses_a_dataflex_trainer_mode_on_the_legacy_line(tmp_path):
    """``trainer.use_v1=false`` never builds a ``dataflex_*`` V1 trainer: refused before Ray starts."""
    command = [
        sys.executable, "-m", "verl.trainer.main_ppo", "trainer.use_v1=false", "trainer.v1.trainer_mode=dataflex_sync",
        "+dataflex.scorer.name=advantage_magnitude", "+dataflex.actuator.name=softmax",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode != 0
    assert "ConfigError: trainer.use_v1=false runs verl's legacy trainer" in result.stderr, result.stderr[-3000:]
    assert "never reads trainer.v1.trainer_mode (here 'dataflex_sync')" in result.stderr
    assert "ray init kwargs" not in result.stdout  # refused in the driver, before Ray starts


@pytest.mark.parametrize(
    ("overrides", "block", "outcome"),
    [
        (
            ["trainer.use_v1=false", "trainer.v1.trainer_mode=dataflex_sync"],
            None,
            "never reads trainer.v1.trainer_mode",
        ),
        (["trainer.use_v1=false"], ADV_SOFTMAX, "legacy"),
        (["trainer.use_v1=false"], {**ADV_SOFTMAX, "trainer_line": "legacy"}, "legacy"),
        (
            ["trainer.use_v1=false"],
            {**ADV_SOFTMAX, "trainer_line": "v1"},
            r"trainer_line='v1', but trainer.use_v1=false",
        ),
        ([], {**ADV_SOFTMAX, "trainer_line": "legacy"}, r"trainer_line='legacy', but trainer.use_v1=true"),
        ([], {**ADV_SOFTMAX, "trainer_line": "neo"}, r"trainer_line='neo' is not one of auto, v1, legacy"),
        (["trainer.use_v1=false"], None, None),
        ([], ADV_SOFTMAX, "v1"),
    ],
    ids=[
        "legacy-dataflex-mode",
        "legacy-auto",
        "legacy-named",
        "v1-named-on-legacy",
        "legacy-named-on-v1",
        "unknown-line",
        "legacy-plain",
        "v1-auto",
    ],  # fmt: skip
)
def test_verls_validate_config_selects_the_trainer_line_or_refuses(make_config, overrides, block, outcome):
    import verl.trainer.main_ppo as main_ppo
    import verl.utils.config

    from dataflex_verl.lines import trainer_line

    assert main_ppo.validate_config is verl.utils.config.validate_config
    assert main_ppo.validate_config.dataflex_guarded
    config = make_config(overrides, dataflex=block)
    if outcome in (None, "v1", "legacy"):
        assert trainer_line(config) == outcome
        return
    with pytest.raises(ConfigError, match=outcome):
        main_ppo.validate_config(config, use_reference_policy=False, use_critic=False)


def test_a_registration_failure_is_loud_and_reaches_the_user():
    code = (
        "import sys\n"
        "sys.modules['dataflex_verl.trainers'] = None  # importing the trainers now fails\n"
        "import verl\n"
        "from verl.trainer.ppo.v1 import get_trainer_cls\n"
        "try:\n"
        "    get_trainer_cls('dataflex_sync')(None)\n"
        "except RuntimeError as exc:\n"
        "    print('RAISED', exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[dataflex-verl] WARNING: dataflex-verl" in result.stderr
    assert "could not register its trainers" in result.stderr
    assert "RAISED trainer.v1.trainer_mode='dataflex_sync' is provided by dataflex-verl" in result.stdout
    assert "ModuleNotFoundError: import of dataflex_verl.trainers halted" in result.stdout


def test_pilot_is_refused_on_the_v1_trainers_because_stages_are_not_exact_there(make_config):
    """V1 dispatches each prompt once with its __rollout_n__; a second stage could reach another step's batch."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    block = {"mechanism": "pilot", "scorer": {"name": "group_reward_variance"}, "actuator": {"name": "threshold_band"}}
    config = make_config([], dataflex=block)
    with pytest.raises(IncompatibleComponentError, match=r"verl cannot: verl V1's agent loop rolls each prompt out "
                       r"once per dispatch.*not guaranteed exactly"):  # fmt: skip
        get_trainer_cls("dataflex_sync")(config)
