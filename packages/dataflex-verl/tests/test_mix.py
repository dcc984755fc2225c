"""``mechanism: mix``: the mixture decides which prompts verl's real dataloader samples.

A parquet dataset with a ``domain`` column (half math, half code) goes through
verl's own ``_init_dataloader`` and ``_next_train_batch``; the mixer is fed by
verl's real ``_compute_advantage`` on rollouts put into a real TransferQueue.
"""

from __future__ import annotations

import collections

import pytest
import torch

from dataflex_core import ConfigError
from dataflex_lab.verl import sandbox

pytestmark = pytest.mark.verl

ROWS_PER_DOMAIN = 100
BATCH = 16


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    """200 prompts, alternating math / code, each with a unique ``extra_info.index``."""
    import pandas as pd

    rows = [
        {
            "prompt": [{"role": "user", "content": f"question {i}"}],
            "data_source": "synthetic",
            "domain": "math" if i % 2 == 0 else "code",
            "reward_model": {"ground_truth": "1"},
            "extra_info": {"index": i},
        }
        for i in range(2 * ROWS_PER_DOMAIN)
    ]
    path = tmp_path_factory.mktemp("mixdata") / "train.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def mix_trainer(make_config, dataset_path, actuator, *, scorer="reward_difficulty", **keys):
    dataflex = {
        "mechanism": "mix",
        "domains": ["math", "code"],
        "scorer": {"name": scorer},
        "actuator": actuator,
        **keys,
    }
    return sandbox.dataloader_trainer(make_config(sandbox.dataset_overrides(dataset_path, BATCH, seed=7), dataflex))


def draw(trainer, steps):
    """Prompts of ``steps`` real verl train batches: (domain, dataset index) pairs."""
    out = []
    for _ in range(steps):
        batch = trainer._next_train_batch()
        out += list(zip(batch["domain"], (info["index"] for info in batch["extra_info"])))
    return out


def rollout_for(batch_domains, reward_of, n=4, seed=0):
    """A synthetic GRPO rollout for prompts of the given domains, rewards set per domain.

    ``reward_of[d] = None`` keeps the synthetic 0/1 rewards for domain ``d``.
    """
    from tensordict import NonTensorStack

    rollout = sandbox.synthetic_rollout(num_prompts=len(batch_domains), n=n, padding_rows=1, seed=seed)
    domains = [d for d in batch_domains for _ in range(n)] + ["pad"]
    rewards = [reward_of[d] for d in batch_domains for _ in range(n)] + [0.0]
    rm = [torch.zeros_like(row) for row in rollout.fields["rm_scores"].unbind()]
    for row, old, value in zip(rm, rollout.fields["rm_scores"].unbind(), rewards):
        row[-1] = old[-1] if value is None else value
    rollout.fields["rm_scores"] = torch.nested.as_nested_tensor(rm, layout=torch.jagged)
    rollout.fields["domain"] = NonTensorStack(*domains)
    return rollout


def advantage_step(trainer, rollout):
    meta = sandbox.put_rollout(rollout)
    metrics: dict = {}
    out = trainer._compute_advantage(meta, metrics)
    sandbox.clear(out)
    return out, metrics


def test_a_skewed_mixture_decides_which_prompts_are_sampled(make_config, dataset_path):
    trainer = mix_trainer(make_config, dataset_path, {"name": "static", "params": {"proportions": [0.9, 0.1]}})
    prompts = draw(trainer, 40)  # 640 prompts from a 50/50 dataset
    counts = collections.Counter(domain for domain, _ in prompts)
    # Systematic rounding: each batch has 14 or 15 math prompts, 14.4 on average.
    assert counts["math"] / len(prompts) == pytest.approx(0.9, abs=0.02)
    # The whole dataset is drawn by domain: each domain's pool is used up before any prompt repeats.
    code = [index for domain, index in prompts if domain == "code"]
    assert len(set(code)) == len(code) == counts["code"]
    math_uses = collections.Counter(index for domain, index in prompts if domain == "math")
    assert len(math_uses) == ROWS_PER_DOMAIN and max(math_uses.values()) - min(math_uses.values()) <= 1


def test_reward_gap_moves_sampling_to_the_domain_that_fails(queue, make_config, dataset_path):
    actuator = {"name": "reward_gap", "params": {"target": 1.0, "min_share": 0.05}}
    trainer = mix_trainer(make_config, dataset_path, actuator)
    first = draw(trainer, 1)
    assert trainer.dataflex.sampler.proportions.tolist() == [0.5, 0.5]
    # Math is always solved, code never: reward_gap gives math only its floor share.
    _, metrics = advantage_step(trainer, rollout_for([d for d, _ in first], {"math": 1.0, "code": 0.0}))
    assert metrics["dataflex/mix/proportion/math"] == pytest.approx(0.05)
    assert metrics["dataflex/mix/proportion/code"] == pytest.approx(0.95)
    assert metrics["dataflex/mix/batch_fraction/math"] == pytest.approx(sum(d == "math" for d, _ in first) / BATCH)
    later = draw(trainer, 25)
    code_share = sum(domain == "code" for domain, _ in later) / len(later)
    assert code_share == pytest.approx(0.95, abs=0.02)


def test_updates_follow_warmup_step_and_update_step(queue, make_config, dataset_path):
    actuator = {"name": "reward_gap", "params": {"min_share": 0.0, "window": 1}}
    trainer = mix_trainer(make_config, dataset_path, actuator, warmup_step=2, update_step=2)
    history = []
    for step, code_reward in [(1, 0.0), (2, 0.5), (3, 0.0), (4, 0.75)]:
        trainer.global_steps = step
        domains = [d for d, _ in draw(trainer, 1)]
        _, metrics = advantage_step(trainer, rollout_for(domains, {"math": 0.0, "code": code_reward}, seed=step))
        history.append((metrics.get("dataflex/mix/updated"), trainer.dataflex.sampler.proportions[1].item()))
    # step 1: before warmup, nothing observed; step 2: update (gaps 1 and 0.5);
    # step 3: observed only; step 4: update from the last step alone (window 1): gaps 1 and 0.25.
    assert history[0] == (None, 0.5)
    assert history[1] == (1.0, pytest.approx(0.5 / 1.5))
    assert history[2] == (0.0, pytest.approx(0.5 / 1.5))
    assert history[3] == (1.0, pytest.approx(0.25 / 1.25))


def test_dataloader_checkpoint_resumes_mixture_mixer_and_draws(queue, make_config, dataset_path):
    actuator = {"name": "dump_ucb", "params": {"temperature": 0.5}}
    original = mix_trainer(make_config, dataset_path, actuator, scorer="advantage_magnitude")
    for step in range(1, 4):
        original.global_steps = step
        domains = [d for d, _ in draw(original, 1)]
        # Math groups have mixed outcomes (|A| > 0), code groups all fail (|A| = 0).
        advantage_step(original, rollout_for(domains, {"math": None, "code": 0.0}, seed=step))
    assert original.dataflex.sampler.proportions[0] > 0.5
    state = original.train_dataloader.state_dict()  # what verl saves in its checkpoint
    resumed = mix_trainer(make_config, dataset_path, actuator, scorer="advantage_magnitude")
    resumed.train_dataloader.load_state_dict(state)  # applied when the next iterator starts
    assert draw(resumed, 3) == draw(original, 3)
    assert resumed.dataflex.pipeline.actuator.state_dict() == original.dataflex.pipeline.actuator.state_dict()
    assert resumed.dataflex.sampler.proportions.tolist() == original.dataflex.sampler.proportions.tolist()
    follow_up = rollout_for(["math"] * 4 + ["code"] * 4, {"math": None, "code": 0.0}, seed=9)
    resumed.global_steps = original.global_steps = 4
    _, a = advantage_step(original, follow_up)
    _, b = advantage_step(resumed, follow_up)
    assert a["dataflex/mix/proportion/math"] == b["dataflex/mix/proportion/math"]


def test_a_missing_domain_column_is_named_at_dataloader_setup(make_config, dataset_path):
    with pytest.raises(ConfigError, match=r"domain_key='topic' is not a column of the train dataset"):
        mix_trainer(make_config, dataset_path, {"name": "static"}, domain_key="topic")


def test_dataset_domains_outside_the_configured_list_are_an_error(make_config, dataset_path):
    import verl  # noqa: F401
    from verl.trainer.ppo.v1 import get_trainer_cls

    config = make_config(
        [f"data.train_files={dataset_path}", f"data.val_files={dataset_path}", "data.filter_overlong_prompts=false"],
        {
            "mechanism": "mix",
            "domains": ["math"],
            "scorer": {"name": "reward_difficulty"},
            "actuator": {"name": "static"},
        },
    )
    trainer = get_trainer_cls("dataflex_sync")(config)
    trainer.tokenizer = trainer.processor = None
    with pytest.raises(ConfigError, match=r"domain value\(s\) \['code'\] that are not in dataflex.domains"):
        trainer._init_dataloader()


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"mechanism": "mix", "actuator": {"name": "static"}}, "dataflex.domains must be a non-empty list.*got unset"),
        ({"mechanism": "mix", "domains": ["a"], "update_step": 0, "actuator": {"name": "static"}}, "update_step"),
        ({"mechanism": "reweight", "domains": ["a"], "actuator": {"name": "softmax"}}, "read only by mechanism: mix"),
    ],
)
def test_mix_keys_are_checked_at_mount(make_config, block, message):
    import verl  # noqa: F401
    from verl.trainer.ppo.v1 import get_trainer_cls

    block = {"scorer": {"name": "reward_difficulty"}, **block}
    with pytest.raises(ConfigError, match=message):
        get_trainer_cls("dataflex_sync")(make_config((), block))
