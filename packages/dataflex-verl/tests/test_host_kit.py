"""The host kit's shared tests on the verl host: verl's real step, loss and checkpoints on a real TransferQueue.

A step is verl's real ``_compute_advantage`` on a rollout put into the session's shared queue (verl's padding
rows included), its loss verl's real ``ppo_loss`` on the fields the actor receives; a save is two such steps
then verl's real ``_save_checkpoint``, a resume verl's real ``_load_checkpoint`` (the actor's FSDP workers,
which need GPUs, are the sandbox's ``LocalActorGroup``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transfer_queue as tq

from dataflex_conformance.host import HostHarness, HostStep, HostSuite
from dataflex_lab.verl import sandbox

pytestmark = pytest.mark.verl

#: verl's ``loss_agg_mode`` -> the unit its loss averages over.
LOSS_UNITS = {"token-mean": "token", "seq-mean-token-mean": "sequence"}


class VerlHarness(HostHarness):
    def __init__(self, make_config, root: Path, loss_agg_mode: str) -> None:
        self.make_config, self.root, self.loss_agg_mode = make_config, root, loss_agg_mode

    def trainer(self, block):
        from omegaconf import open_dict
        from verl.trainer.ppo.v1 import get_trainer_cls

        config = self.make_config([f"actor_rollout_ref.actor.loss_agg_mode={self.loss_agg_mode}"], dataflex=block)
        with open_dict(config):
            config.trainer.default_local_dir = str(self.root / "checkpoints")
        trainer = get_trainer_cls("sync" if block is None else "dataflex_sync")(config)
        trainer.global_steps = 1
        return trainer

    def capabilities(self):
        from dataflex_verl.mount import capabilities

        return capabilities(self.make_config([f"actor_rollout_ref.actor.loss_agg_mode={self.loss_agg_mode}"]), "v1")

    def advantage_step(self, trainer, seed: int):
        meta = sandbox.put_rollout(sandbox.synthetic_rollout(num_prompts=4, n=4, padding_rows=2, seed=seed))
        metrics: dict = {}
        try:
            return trainer._compute_advantage(meta, metrics), metrics
        except BaseException:
            sandbox.clear(meta)
            raise

    def step(self, block):
        trainer = self.trainer(block)
        out, metrics = self.advantage_step(trainer, seed=11)
        fields = ["response_mask", "advantages", "rm_scores"]
        fields += ["rollout_is_weights"] if "rollout_is_weights" in out.fields else []
        data = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id, select_fields=fields)
        got = {name: data[name].to_padded_tensor(0) for name in fields}
        loss = sandbox.actor_loss(out, trainer.config)
        padding = torch.tensor([bool(tag["is_padding"]) for tag in out.tags])
        sandbox.clear(out)
        mask = got["response_mask"].bool()
        inert = padding | ~mask.any(-1)
        uids = [key.rsplit("_", 2)[0] for key in out.keys]  # a trajectory key is {uid}_{session}_{index}
        return HostStep(
            loss, mask, inert, LOSS_UNITS[self.loss_agg_mode], got.get("rollout_is_weights"), metrics,
            advantages=got["advantages"], batch={**got, "uid": uids},
        )  # fmt: skip

    def advantages_alone(self, step, rows):
        """verl's own estimator (``algorithm.adv_estimator``) on ``rows`` alone."""
        import numpy as np
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        estimator = get_adv_estimator_fn(str(self.make_config().algorithm.adv_estimator))
        batch, rows = step.batch, rows.tolist()
        advantages, _ = estimator(
            token_level_rewards=batch["rm_scores"][rows],
            response_mask=batch["response_mask"][rows],
            index=np.asarray([batch["uid"][r] for r in rows], dtype=object),
        )
        return advantages

    def draws(self, block, steps, resume_after=None):
        import pandas as pd

        path = self.root / "train.parquet"  # 32 prompts, verl's layout, extra_info.index = the row
        rows = [
            {
                "prompt": [{"role": "user", "content": f"question {i}"}],
                "data_source": "synthetic",
                "reward_model": {"ground_truth": "1"},
                "extra_info": {"index": i},
            }
            for i in range(32)
        ]
        pd.DataFrame(rows).to_parquet(path)
        config = self.make_config(sandbox.dataset_overrides(str(path), 8, seed=3), dataflex=block)
        trainer = sandbox.dataloader_trainer(config)  # verl's real train dataloader, DataFlex's sampler in it
        batches = [trainer._next_train_batch() for _ in range(steps if resume_after is None else resume_after)]
        if resume_after is not None:  # what verl's checkpoint saves in data.pt, into a fresh trainer's dataloader
            state = trainer.train_dataloader.state_dict()
            trainer = sandbox.dataloader_trainer(config)
            trainer.train_dataloader.load_state_dict(state)
            batches += [trainer._next_train_batch() for _ in range(steps - resume_after)]
        return [torch.as_tensor([info["index"] for info in batch["extra_info"]]) for batch in batches]

    def save(self, block):
        trainer = sandbox.attach_workers(self.trainer(block))
        for step in (1, 2):
            trainer.global_steps = step
            out, _ = self.advantage_step(trainer, seed=step)
            sandbox.clear(out)
        trainer._save_checkpoint()
        return self.root / "checkpoints" / "global_step_2", trainer.dataflex

    def resume(self, block, folder):
        trainer = sandbox.attach_workers(self.trainer(block))
        trainer._load_checkpoint()  # verl's resume_mode auto: the tracker file names global_step_2
        assert trainer.global_steps == 2, "verl did not resume from the saved checkpoint"
        return trainer.dataflex


class TestVerlHost(HostSuite):
    @pytest.fixture(params=list(LOSS_UNITS))
    def host(self, request, make_config, queue, tmp_path):
        return VerlHarness(make_config, tmp_path, request.param)
