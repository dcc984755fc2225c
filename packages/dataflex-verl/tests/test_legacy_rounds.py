"""``mechanism: filter`` on the legacy line, where fit pulls its prompts: a step's rounds without the fit loop.

The trainer is verl's ``RayPPOTrainer`` with the DataFlex mixin, built by its real constructor and mounted with a
filter whose prompts a curriculum draws (``filter.draw``); the rollout manager stands in for verl's replicas (no
workers here): even ``index`` prompts get rewards that vary (``1, 0, 1, ...``), odd ones all 0. The end-to-end run in
verl's own fit loop is ``tests/fit/test_fit_filter.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_core import register_scorer
from dataflex_lab.testing.components import DomainPreferenceScorer

pytestmark = pytest.mark.verl

N, PROMPTS, WIDTH = 4, 4, 3


@register_scorer("legacyrounds_sized_draw")
class SizedDraw(DomainPreferenceScorer):
    """Draws every prompt alike and sizes each refill round ``size`` prompts."""

    requires = ["index"]

    def __init__(self, size=None, **kwargs):
        super().__init__(**kwargs)
        self.size = size

    def score(self, batch, step_id, **ctx):
        return torch.zeros(len(batch.non_tensor_batch["index"]), dtype=torch.float64)

    def next_draw_size(self, **asked):
        return self.size


def collate(rows):
    return {
        "input_ids": torch.tensor([[row["index"], 0] for row in rows]),
        "index": np.array([row["index"] for row in rows], dtype=object),
    }


class Replicas:
    """verl's rollout manager's place: rows echo their prompts' columns; rewards by prompt (even vary, odd all 0);
    a call's rows split evenly over its ``workers`` agent loop workers, as verl's ``DataProto.chunk`` asserts."""

    def __init__(self, workers: int) -> None:
        self.calls: list[np.ndarray] = []
        self.agent_loop_workers = [None] * workers

    def generate_sequences(self, prompts):
        from tensordict import TensorDict
        from verl import DataProto

        index = np.asarray(prompts.non_tensor_batch["index"]).astype(np.int64)
        assert len(index) % len(self.agent_loop_workers) == 0, "only support equal chunk"
        self.calls.append(index)
        k = len(index)
        scores = torch.zeros(k, WIDTH)
        scores[:, -1] = torch.tensor(np.where(index % 2 == 0, np.arange(k) % 2, 0), dtype=torch.float32)
        batch = {"responses": torch.zeros(k, WIDTH, dtype=torch.long), "rm_scores": scores,
                 "response_mask": torch.ones(k, WIDTH, dtype=torch.int64)}  # fmt: skip
        echoed = {name: np.array(value, copy=True) for name, value in prompts.non_tensor_batch.items()}
        out = DataProto(batch=TensorDict(batch, batch_size=[k]), non_tensor_batch=echoed)
        out.meta_info = {"timing": {"generate_sequences": 0.01}}
        return out


class Rows(list):
    """verl's ``RLHFDataset``'s place: row ``i`` is ``{"index": i}``; its ``dataframe`` holds the sampler's column."""

    def __init__(self, rows: int) -> None:
        from datasets import Dataset

        super().__init__({"index": i} for i in range(rows))
        self.dataframe = Dataset.from_dict({"index": list(range(rows))})


@pytest.mark.parametrize(("size", "refill", "workers"), [(3, 3, 1), (3, 3, 8), (None, PROMPTS, 8)])
def test_a_refill_round_has_as_many_prompts_as_the_drawing_scorer_sizes_it(make_config, size, refill, workers):
    """A round of 3 prompts x 4 rollouts on 8 agent loop workers: padded for verl's even split, the copies dropped."""
    import verl.trainer.main_ppo_v0 as main_ppo_v0
    from verl.trainer.ppo.ray_trainer import Role

    from dataflex_verl import legacy_rounds

    draw = {"mechanism": "curriculum", "prompt_key": "index",
            "scorer": {"name": "legacyrounds_sized_draw", "params": {"size": size}},
            "actuator": {"name": "temperature", "params": {"temperature": 1.0}}}  # fmt: skip
    block = {
        "mechanism": "filter", "scorer": {"name": "group_reward_variance"},
        "actuator": {"name": "threshold_band", "params": {"low": 0.01, "high": 1.0e9}},
        "filter": {"max_rounds": 2, "on_short": "backfill", "draw": draw},
    }  # fmt: skip
    config = make_config(
        ["trainer.use_v1=false", f"data.train_batch_size={PROMPTS}", f"actor_rollout_ref.rollout.n={N}"],
        dataflex=block,
    )
    dataset = Rows(32)
    trainer = main_ppo_v0.RayPPOTrainer(
        config, tokenizer=None, role_worker_mapping={Role.ActorRollout: object}, resource_pool_manager=None,
        train_dataset=dataset, val_dataset=dataset, collate_fn=collate,
    )  # fmt: skip
    trainer.global_steps = 1
    trainer.async_rollout_manager = Replicas(workers)
    with legacy_rounds.installed(trainer):
        replicas = trainer.async_rollout_manager.manager
        chosen = trainer.train_dataloader.rounds.step(collate([{"index": i} for i in (1, 3, 5, 0)]))
    first, second = replicas.calls  # one admitted group of four: one refill round
    assert len(first) == PROMPTS * N and len(second) == -(-refill * N // workers) * workers
    assert len(np.unique(second)) <= refill and len(trainer.dataflex_generation.admitted[1]) == refill
    assert len(chosen["index"]) == PROMPTS and trainer.dataflex_generation.rounds == 2
