"""The legacy line's seam: verl's real ``compute_advantage`` on a ``DataProto`` laid out as ``RayPPOTrainer`` builds it.

The trainer is verl's ``RayPPOTrainer`` with the DataFlex mixin, built by its
real constructor (no workers: nothing here trains); the batch has verl's
fields at that point of ``fit`` (padded ``(bs, T)`` tensors, ``uid`` groups,
rows after ``_balance_batch``'s reordering, empty responses). The end-to-end
runs in verl's own legacy fit loop are ``tests/fit/test_fit_ranks.py`` (with the V1 ones); verl's
separated trainers (one-step-off, fully-async) are at the end.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from dataflex_core import ConfigError
from dataflex_core.step import GenerationRounds
from dataflex_lab.testing.batches import grpo_layout

pytestmark = pytest.mark.verl

ADV_SOFTMAX = {
    "scorer": {"name": "advantage_magnitude"},
    "actuator": {"name": "softmax", "params": {"temperature": 0.5}},
}
CONSTANT = {"scorer": {"name": "hosttest_constant"}, "actuator": {"name": "softmax"}}


def legacy_trainer(make_config, block, overrides=()):
    """verl's legacy trainer class as the legacy task runner gets it, constructed for a config (no workers)."""
    import verl.trainer.main_ppo_v0 as main_ppo_v0
    from verl.trainer.ppo.ray_trainer import Role

    from dataflex_verl.legacy_trainers import DataFlexRayPPOTrainer

    assert main_ppo_v0.RayPPOTrainer is DataFlexRayPPOTrainer  # installed by the verl.plugins entry point
    config = make_config(["trainer.use_v1=false", "data.train_batch_size=4", *overrides], dataflex=block)
    prompts = [{"index": i} for i in range(16)]
    trainer = main_ppo_v0.RayPPOTrainer(
        config, tokenizer=None, role_worker_mapping={Role.ActorRollout: object}, resource_pool_manager=None,
        train_dataset=prompts, val_dataset=prompts, collate_fn=lambda rows: rows,
    )  # fmt: skip
    trainer.global_steps = 1
    return trainer


def legacy_batch(groups=6, n=4, *, width=12, rollout_is_weights=False, seed=0):
    """A GRPO step's ``DataProto`` right before ``compute_advantage``: rows shuffled (``_balance_batch``), an empty response."""
    from tensordict import TensorDict
    from verl import DataProto

    layout = grpo_layout(groups, n, width=width, empty_rows=1, shuffle=True, seed=seed)
    order = layout.order
    lengths = layout.lengths[order]
    mask = (torch.arange(width) < lengths.unsqueeze(-1)).to(torch.int64)
    scores = torch.zeros(len(order), width)
    last = (lengths - 1).clamp(min=0)
    scores[torch.arange(len(order)), last] = layout.rewards[order] * (lengths > 0)
    gen = torch.Generator().manual_seed(seed)
    tensors = {
        "responses": torch.randint(3, 1000, (len(order), width), generator=gen),
        "response_mask": mask,
        "token_level_scores": scores,
        "token_level_rewards": scores.clone(),
        "rm_scores": scores.clone(),
        "old_log_probs": -torch.rand(len(order), width, generator=gen),
    }
    if rollout_is_weights:
        tensors["rollout_is_weights"] = (0.5 + torch.rand(len(order), width, generator=gen)) * mask
    uid = np.array([layout.uid[i] for i in order.tolist()], dtype=object)
    return DataProto(batch=TensorDict(tensors, batch_size=[len(order)]), non_tensor_batch={"uid": uid})


def at_the_seam(trainer, data):
    """``fit``'s call of ``compute_advantage``, while the trainer's fit runs."""
    from verl.trainer.ppo import ray_trainer

    from dataflex_verl.legacy import running

    config = trainer.config
    with running(trainer):
        return ray_trainer.compute_advantage(
            data, adv_estimator=config.algorithm.adv_estimator, gamma=config.algorithm.gamma,
            lam=config.algorithm.lam, num_repeat=config.actor_rollout_ref.rollout.n,
            norm_adv_by_std_in_grpo=True, config=config.algorithm,
        )  # fmt: skip


def test_without_a_dataflex_block_the_legacy_trainer_is_verls(make_config):
    trainer = legacy_trainer(make_config, None)
    data = at_the_seam(trainer, legacy_batch())
    assert trainer.dataflex is None
    assert "rollout_is_weights" not in data.batch.keys()


def test_weights_have_mean_one_over_valid_tokens_and_zero_elsewhere(make_config):
    trainer = legacy_trainer(make_config, ADV_SOFTMAX)
    data = at_the_seam(trainer, legacy_batch())
    weights, mask = data.batch["rollout_is_weights"], data.batch["response_mask"].bool()
    assert weights.shape == mask.shape and weights.dtype == torch.float32
    assert float(weights[mask].mean()) == pytest.approx(1.0, abs=1e-5)
    assert float(weights[mask].std()) > 0.05
    assert torch.all(weights[~mask] == 0)
    assert trainer.dataflex_metrics["dataflex/active"] == 1.0


def test_weights_multiply_into_verls_rollout_correction_weights_never_over_them(make_config):
    trainer = legacy_trainer(make_config, CONSTANT)
    data = legacy_batch(rollout_is_weights=True)
    verl_weights = data.batch["rollout_is_weights"].clone()
    out = at_the_seam(trainer, data)
    # DataFlex's weights are all 1 here: the product is verl's weights, not DataFlex's ones
    torch.testing.assert_close(out.batch["rollout_is_weights"], verl_weights)


def test_select_recomputes_advantages_on_the_kept_rows_with_verls_estimator(make_config):
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    block = {
        "mechanism": "select",
        "scorer": {"name": "reward_difficulty"},
        "actuator": {"name": "gfpo", "params": {"keep_per_group": 2, "metric": "length"}},
    }
    trainer = legacy_trainer(make_config, block)
    data = legacy_batch(groups=8, seed=3)
    out = at_the_seam(trainer, data)
    mask = out.batch["response_mask"].bool()
    kept = ((out.batch["rollout_is_weights"] * mask).sum(-1) > 0).nonzero().flatten()
    dropped = torch.ones(len(out), dtype=torch.bool)
    dropped[kept] = False
    assert 0 < len(kept) < len(out)
    expected, _ = compute_grpo_outcome_advantage(
        token_level_rewards=out.batch["token_level_rewards"][kept],
        response_mask=out.batch["response_mask"][kept],
        index=out.non_tensor_batch["uid"][kept.numpy()],
    )
    torch.testing.assert_close(out.batch["advantages"][kept], expected.float(), rtol=1e-5, atol=1e-6)
    assert torch.all(out.batch["advantages"][dropped] == 0)
    assert trainer.dataflex_metrics["dataflex/advantage_recomputed"] == 1.0


def test_a_field_verl_did_not_write_is_named(make_config):
    from dataflex_verl.adapter import MissingFieldError

    trainer = legacy_trainer(
        make_config, {"scorer": {"name": "hosttest_needs_data_source"}, "actuator": {"name": "softmax"}}
    )
    with pytest.raises(MissingFieldError, match=r"no \['data_source'\]"):
        at_the_seam(trainer, legacy_batch())


def test_a_dataflex_trainer_mode_on_the_legacy_line_is_refused_at_mount(make_config):
    with pytest.raises(ConfigError, match="never reads trainer.v1.trainer_mode"):
        legacy_trainer(make_config, ADV_SOFTMAX, ["trainer.v1.trainer_mode=dataflex_sync"])


def test_a_loss_that_ignores_rollout_is_weights_gets_the_weights_in_its_advantages(make_config):
    """``policy_loss.loss_mode=bypass_mode`` never reads ``rollout_is_weights``: the advantages carry the weights."""
    from verl.trainer.ppo import ray_trainer

    overrides = ["actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode"]
    growing = {"scorer": {"name": "hosttest_token_position"}, "actuator": {"name": "hosttest_proportional"}}
    trainer = legacy_trainer(make_config, growing, overrides)
    plain = legacy_batch(rollout_is_weights=True)
    verl_weights = plain.batch["rollout_is_weights"].clone()
    expected = ray_trainer.compute_advantage(plain.select_idxs(list(range(len(plain)))), adv_estimator="grpo")
    plain_advantages = expected.batch["advantages"]
    out = at_the_seam(trainer, plain)
    torch.testing.assert_close(out.batch["rollout_is_weights"], verl_weights)  # left as verl wrote them
    mask = out.batch["response_mask"].bool()
    moved = mask & (plain_advantages != 0)
    ratio = out.batch["advantages"][moved] / plain_advantages[moved]
    assert float(ratio.std()) > 0.05 and bool(torch.all(ratio > 0))  # the step's token weights, growing along a row
    assert trainer.dataflex_metrics["dataflex/weight/mean"] == pytest.approx(1.0, abs=1e-5)


def test_the_v1_line_still_refuses_a_loss_that_ignores_rollout_is_weights(make_config):
    from dataflex_core import IncompatibleComponentError
    from dataflex_verl.mount import mount

    config = make_config(["actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode"], dataflex=ADV_SOFTMAX)
    with pytest.raises(IncompatibleComponentError, match="on verl's legacy line .* in the advantages instead"):
        mount(config)


DAPO = {"mechanism": "filter", "scorer": {"name": "group_reward_variance"}, "actuator": {"name": "threshold_band"}}


def test_filter_mounts_with_its_refill_sampler_built_before_a_resume_restores_it(make_config):
    """The legacy trainer refills (generation rounds where fit pulls its prompts: tests/fit/test_fit_filter.py)."""
    trainer = legacy_trainer(make_config, DAPO)
    assert trainer.dataflex.host.provides(GenerationRounds)
    assert "refill" in trainer.dataflex.stateful()  # its position travels with the component state


@pytest.mark.parametrize(
    ("overrides", "block", "reason"),
    [
        (["reward.reward_model.enable=true", "reward.reward_model.enable_resource_pool=false"], DAPO,
         "verl cannot refill: with a colocated reward model"),
        ([], {**DAPO, "scorer": {"name": "advantage_magnitude"}}, "timing='post_advantage'"),
        ([], {**DAPO, "scorer": {"name": "group_reward_variance", "params": {"reward_key": "token_level_rewards"}}},
         "admits each round's groups right after rollout and reward"),
    ],
    ids=["colocated-reward-model", "post-advantage-scorer", "field-computed-after-admission"],
)  # fmt: skip
def test_filter_on_the_legacy_line_is_refused_where_its_rounds_cannot_admit(make_config, overrides, block, reason):
    from dataflex_core import IncompatibleComponentError

    with pytest.raises(IncompatibleComponentError, match=reason):
        legacy_trainer(make_config, block, overrides)


def test_fits_generate_call_gets_the_prepared_rollouts_under_its_uids_and_refuses_other_rows():
    """What fit's generate call receives in a filter run: the rounds' rollouts of exactly the rows it asks for."""
    from tensordict import TensorDict
    from verl import DataProto

    from dataflex_verl.legacy_rounds import Prepared, RoundsRollout

    class Manager:  # verl's rollout manager, for the calls the rounds did not prepare
        def generate_sequences(self, prompts):
            return "generated"

    def prompts(index, uid):
        rows = {"index": np.array(index, dtype=object), "uid": np.array(uid, dtype=object)}
        return DataProto(batch=None, non_tensor_batch=rows)

    rollouts = DataProto(
        batch=TensorDict({"responses": torch.arange(4).view(4, 1)}, batch_size=[4]),
        non_tensor_batch={"uid": np.array(["r-0", "r-0", "r-1", "r-1"], dtype=object)},
    )
    rollout = RoundsRollout(Manager())
    rollout.prepared = Prepared(rollouts, np.array([7, 7, 3, 3]))
    out = rollout.generate_sequences(prompts([7, 7, 3, 3], ["a", "a", "b", "b"]))
    assert out is rollouts and out.non_tensor_batch["uid"].tolist() == ["a", "a", "b", "b"]
    assert rollout.generate_sequences(prompts([1], ["v"])) == "generated"  # nothing prepared: verl's manager
    rollout.prepared = Prepared(rollouts, np.array([7, 7, 3, 3]))
    with pytest.raises(RuntimeError, match="verl's fit asked to generate 4 other rows"):
        rollout.generate_sequences(prompts([7, 7, 5, 5], ["a", "a", "b", "b"]))


def test_remax_cannot_refill_its_greedy_baselines(make_config):
    """REMAX's greedy baseline rides in fit's generation request; a group scorer is refused before (no groups)."""
    from dataflex_verl.mount import REFILL_REASONS, refill_support

    config = make_config(["trainer.use_v1=false", "algorithm.adv_estimator=remax"], dataflex=DAPO)
    assert refill_support(config, "legacy") == REFILL_REASONS["remax"]
    assert refill_support(make_config(["trainer.use_v1=false"], dataflex=DAPO), "legacy") == ""


def test_allocate_is_refused_at_mount_because_the_legacy_fit_repeats_every_prompt_n_times(make_config):
    """RayPPOTrainer.fit repeats each prompt rollout.n times itself: a per-prompt count would be ignored."""
    from dataflex_core import IncompatibleComponentError

    block = {"mechanism": "allocate", "scorer": {"name": "solve_rate_posterior"}, "actuator": {"name": "knapsack"}}
    with pytest.raises(IncompatibleComponentError, match="verl cannot vary them: its legacy trainer .RayPPOTrainer"):
        legacy_trainer(make_config, block)


def test_a_separated_trainer_dataflex_does_not_drive_refuses_a_dataflex_block(make_config):
    from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer

    config = make_config(["trainer.use_v1=false"], dataflex=ADV_SOFTMAX)
    with pytest.raises(ConfigError, match="SeparateRayPPOTrainer .* does not run DataFlex"):
        SeparateRayPPOTrainer(config, tokenizer=None, role_worker_mapping={}, resource_pool_manager=None)


@pytest.mark.parametrize("warmup_step", [0, 5], ids=["running", "before-warmup"])
def test_the_compute_counters_count_every_rollout_of_verls_batch(make_config, warmup_step):
    trainer = legacy_trainer(make_config, {**ADV_SOFTMAX, "warmup_step": warmup_step})
    data = at_the_seam(trainer, legacy_batch(groups=5))
    mask = data.batch["response_mask"].bool()
    metrics = trainer.dataflex_metrics
    assert metrics["dataflex/active"] == (1.0 if warmup_step == 0 else 0.0)
    assert metrics["dataflex/compute/rollouts_generated"] == len(data) == 20
    assert metrics["dataflex/compute/tokens_generated"] == float(mask.sum())
    assert ("rollout_is_weights" in data.batch.keys()) == (warmup_step == 0)


# -- verl's separated trainers: one-step-off runs DataFlex, fully-async is refused before Ray starts ---------------
# The configs are verl's own one_step_off_ppo_trainer and fully_async_ppo_trainer (composed as their entry points
# compose them); the one-step-off trainer is the class verl's task runner builds, made by its real constructor, and
# its real _fit_compute_advantage runs on the batch. The run in verl's own one-step-off loop is
# tests/fit/test_fit_one_step_off.py.


@functools.cache
def _separated_config(module: str, name: str, overrides: tuple[str, ...]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from dataflex_lab.verl.sandbox import verl_config_dir

    GlobalHydra.instance().clear()
    folder = Path(importlib.util.find_spec(module).origin).parent / "config"
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(name, overrides=[*overrides, f"hydra.searchpath=[file://{verl_config_dir()}]"])


def separated_config(kind: str, overrides=(), dataflex=None):
    """verl's config of the ``one_step_off`` or ``fully_async`` entry point (a fresh copy), with a ``dataflex:`` block."""
    import copy

    from omegaconf import OmegaConf, open_dict

    module, name = {
        "one_step_off": ("verl.experimental.one_step_off_policy.main_ppo", "one_step_off_ppo_trainer"),
        "fully_async": ("verl.experimental.fully_async_policy.fully_async_main", "fully_async_ppo_trainer"),
    }[kind]
    base = ("algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.train_batch_size=4", *overrides)
    if kind == "one_step_off":  # its trainer needs the rollout on replicas of its own
        base = ("actor_rollout_ref.hybrid_engine=false", *base)
    config = copy.deepcopy(_separated_config(module, name, base))
    if dataflex is not None:
        with open_dict(config):
            config.dataflex = OmegaConf.create(dataflex)
    return config


def one_step_off_trainer(block, overrides=()):
    """The trainer verl's one-step-off task runner builds (its module's global), for a config (no workers)."""
    from verl.experimental.one_step_off_policy import ray_trainer
    from verl.trainer.ppo.utils import Role

    from dataflex_verl.one_step_off import DataFlexOneStepOffRayTrainer

    assert ray_trainer.OneStepOffRayTrainer is DataFlexOneStepOffRayTrainer  # installed by the entry point
    prompts = [{"index": i} for i in range(16)]
    return ray_trainer.OneStepOffRayTrainer(
        config=separated_config("one_step_off", overrides, block), tokenizer=None,
        role_worker_mapping={Role.Actor: object}, resource_pool_manager=None,
        train_dataset=prompts, val_dataset=prompts, collate_fn=lambda rows: rows,
    )  # fmt: skip


def fit_compute_advantage(trainer, data):
    """The separated trainer's real ``_fit_compute_advantage``, while its ``fit`` runs (rewards already extracted)."""
    from dataflex_verl.legacy import running

    trainer.reward_tensor = data.batch["token_level_scores"]
    trainer.reward_extra_infos_dict, trainer.metrics, trainer.timing_raw = {}, {}, {}
    with running(trainer):
        return trainer._fit_compute_advantage(data)


@pytest.mark.parametrize("trainer_line", ["auto", "legacy"])
def test_one_step_off_runs_dataflex_on_the_legacy_line_whatever_use_v1_says(trainer_line):
    trainer = one_step_off_trainer({**ADV_SOFTMAX, "trainer_line": trainer_line})
    assert trainer.config.trainer.use_v1 is True  # verl's default, which the one-step-off entry point never reads
    assert trainer.dataflex is not None
    assert one_step_off_trainer(None).dataflex is None  # without a block: verl's trainer


def test_the_real_fit_compute_advantage_writes_mean_one_weights_and_the_batchs_staleness():
    trainer = one_step_off_trainer(ADV_SOFTMAX)
    versions = trainer.dataflex_versions
    versions.synced_at(0)  # fit's first sync: the initial weights
    versions.synced_at(1)  # step 1's sync, before its update: still the initial weights
    versions.updated()  # step 1's update
    versions.synced_at(2)
    trainer.global_steps = 2
    data = legacy_batch()
    tags = np.array([1] * (len(data) - 2) + [2, None], dtype=object)  # verl's max_global_steps; one untagged
    data.non_tensor_batch["max_global_steps"] = tags
    out = fit_compute_advantage(trainer, data)
    weights, mask = out.batch["rollout_is_weights"], out.batch["response_mask"].bool()
    assert float(weights[mask].mean()) == pytest.approx(1.0, abs=1e-5) and float(weights[mask].std()) > 0.05
    assert torch.all(weights[~mask] == 0)
    metrics = trainer.dataflex_metrics
    # tag 1 and the untagged row (the sync before the latest) lag one update; tag 2 sent the current weights
    assert metrics["dataflex/staleness/steps"] == pytest.approx((len(data) - 1) / len(data))
    assert metrics["dataflex/staleness/max"] == 1.0
    assert metrics["dataflex/staleness/tagged"] == pytest.approx((len(data) - 1) / len(data))


def test_one_step_off_refuses_filter_with_its_own_reason():
    from dataflex_core import IncompatibleComponentError

    with pytest.raises(IncompatibleComponentError, match="verl cannot refill: its one-step-off trainer generates"):
        one_step_off_trainer(DAPO)


def test_one_step_off_refuses_the_v1_line_and_a_v1_trainer_mode():
    from dataflex_verl.lines import trainer_line

    config = separated_config("one_step_off", dataflex={**ADV_SOFTMAX, "trainer_line": "v1"})
    with pytest.raises(ConfigError, match="one-step-off trainer .* runs DataFlex on the legacy line"):
        trainer_line(config)
    config = separated_config("one_step_off", ["trainer.v1.trainer_mode=dataflex_sync"], ADV_SOFTMAX)
    with pytest.raises(ConfigError, match="one-step-off trainer .* never reads trainer.v1.trainer_mode"):
        trainer_line(config)


def test_fully_async_is_refused_in_run_ppo_before_ray_starts():
    """verl's fully-async entry point never calls validate_config; every entry point calls run_ppo."""
    import ray
    from verl.trainer import main_ppo

    config = separated_config("fully_async", dataflex=ADV_SOFTMAX)
    started = ray.is_initialized()
    with pytest.raises(ConfigError, match="fully-async trainer .* does not run DataFlex: its trainer takes rollouts"):
        main_ppo.run_ppo(config, task_runner_class=None)
    assert ray.is_initialized() == started


#: Metrics that time the host rather than describe the step's result.
NOT_COMPARED = {"dataflex/hook_time_s"}


def assert_same_metrics(padded: dict, plain: dict) -> None:
    padded = {k: float(v) for k, v in padded.items() if k.startswith("dataflex/") and k not in NOT_COMPARED}
    plain = {k: float(v) for k, v in plain.items() if k.startswith("dataflex/") and k not in NOT_COMPARED}
    assert set(padded) == set(plain)
    for key, value in plain.items():
        assert padded[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


# -- the legacy line: compute_advantage on a DataProto ------------------------------------------------------------


def with_padding_rows(data, rows: int, seed: int):
    """``data`` with ``rows`` padding rows inserted at random places (empty mask, shared pad uid, junk values, the
    ``is_padding`` column), and the kept-row positions of the real rows."""
    from tensordict import TensorDict
    from verl import DataProto

    bs = len(data)
    gen = torch.Generator().manual_seed(seed)
    is_padding = torch.zeros(bs + rows, dtype=torch.bool)
    is_padding[torch.randperm(bs + rows, generator=gen)[:rows]] = True
    source = torch.empty(bs + rows, dtype=torch.long)
    source[~is_padding] = torch.arange(bs)
    source[is_padding] = 0
    tensors = {name: value[source].clone() for name, value in data.batch.items()}
    tensors["response_mask"][is_padding] = 0
    for name in ("token_level_scores", "token_level_rewards", "rm_scores"):
        tensors[name][is_padding] = 0.0
    tensors["old_log_probs"][is_padding] = -50.0
    uid = np.asarray(data.non_tensor_batch["uid"], dtype=object)[source.numpy()]
    uid[is_padding.numpy()] = "pad0123456789abcdef"
    non_tensor = {"uid": uid, "is_padding": is_padding.numpy().astype(object)}
    return DataProto(batch=TensorDict(tensors, batch_size=[bs + rows]), non_tensor_batch=non_tensor), ~is_padding


def test_padded_and_unpadded_steps_weigh_the_real_rows_alike(make_config):
    """verl's legacy line adds no padding rows, but a batch that carries them (an ``is_padding`` column, as
    ``dataproto_io.padding_rows`` reads it) gets the same weights and metrics on its real rows (issue 36)."""
    plain_data = at_the_seam(trainer := legacy_trainer(make_config, ADV_SOFTMAX), legacy_batch(seed=3))
    plain_metrics = dict(trainer.dataflex_metrics)
    padded_input, real = with_padding_rows(legacy_batch(seed=3), 4, seed=9)
    padded_data = at_the_seam(trainer := legacy_trainer(make_config, ADV_SOFTMAX), padded_input)
    weights = padded_data.batch["rollout_is_weights"]
    torch.testing.assert_close(weights[real], plain_data.batch["rollout_is_weights"], rtol=1e-5, atol=1e-6)
    assert weights[~real].abs().sum() == 0
    assert_same_metrics(trainer.dataflex_metrics, plain_metrics)
