"""The host kit's shared tests on the verl host: verl's real step, loss and checkpoints on a real TransferQueue.

A step is verl's real ``_compute_advantage`` on a rollout put into the session's shared queue (verl's padding
rows included), its loss verl's real ``ppo_loss`` on the fields the actor receives; a save is two such steps
then verl's real ``_save_checkpoint``, a resume verl's real ``_load_checkpoint`` (the actor's FSDP workers,
which need GPUs, are the sandbox's ``LocalActorGroup``).

The legacy line (``RayPPOTrainer``, built by its real constructor) runs the generation-rounds suite where fit pulls
its prompts: its real train dataloader under ``dataflex_verl.legacy_rounds``, then fit's own generate call; the
rollout servers, which need GPUs, are :class:`KitRollouts` (rollouts with the kit's rewards, as verl's reward
loop streams them in ``rm_scores``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transfer_queue as tq

from dataflex_conformance.host import (
    CountsStep,
    GenerationRoundsSuite,
    HostHarness,
    HostStep,
    HostSuite,
    RoundsStep,
    StagedRows,
    StagedStep,
    StagedSuite,
)
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

    def dataset(self) -> str:
        """32 prompts in verl's layout, ``extra_info.index`` the row."""
        import pandas as pd

        path = self.root / "train.parquet"
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
        return str(path)

    def draws(self, block, steps, resume_after=None):
        path = self.dataset()
        config = self.make_config(sandbox.dataset_overrides(str(path), 8, seed=3), dataflex=block)
        trainer = sandbox.dataloader_trainer(config)  # verl's real train dataloader, DataFlex's sampler in it
        batches = [trainer._next_train_batch() for _ in range(steps if resume_after is None else resume_after)]
        if resume_after is not None:  # what verl's checkpoint saves in data.pt, into a fresh trainer's dataloader
            state = trainer.train_dataloader.state_dict()
            trainer = sandbox.dataloader_trainer(config)
            trainer.train_dataloader.load_state_dict(state)
            batches += [trainer._next_train_batch() for _ in range(steps - resume_after)]
        return [torch.as_tensor([info["index"] for info in batch["extra_info"]]) for batch in batches]

    def counts(self, block, steps):
        config = self.make_config(sandbox.dataset_overrides(self.dataset(), 8, seed=3), dataflex=block)
        trainer = sandbox.dataloader_trainer(config)
        trainer.agent_loop_manager = AgentLoop(trainer.config)
        out = []
        for step in range(1, steps + 1):
            trainer.global_steps = step
            trainer._add_batch_to_generate()  # verl's dispatch: the prompts, their __rollout_n__, the agent loop
            prompts, sessions = trainer.agent_loop_manager.dispatched[-1]
            out.append(
                CountsStep(
                    torch.as_tensor(np.asarray(prompts["index"], dtype=np.int64)), list(prompts["uid"]),
                    prompts["__rollout_n__"].clone(), int(config.actor_rollout_ref.rollout.n), sessions,
                )
            )  # fmt: skip
        return out

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


def agent_loop_worker():
    """verl V1's agent-loop worker class (``AgentLoopWorkerTQ``, a Ray actor class in verl: its own class here)."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    return AgentLoopWorkerTQ.__ray_metadata__.modified_class


class AgentLoop:
    """verl V1's agent-loop manager, whose workers start model servers (GPUs): one of verl's own agent-loop workers
    in this process, whose ``generate_sequences`` and ``_run_prompt`` (verl's code: it reads each prompt's
    ``__rollout_n__`` and starts that many sessions under the prompt's uid) run as they do in a worker; only the
    model's session (``_run_agent_loop``) is recorded instead of generated."""

    def __init__(self, config) -> None:
        class Sessions(agent_loop_worker()):
            def __init__(self) -> None:  # the worker's state _run_prompt reads; no servers
                self.config, self.background_tasks, self.started = config, set(), []

            async def _run_agent_loop(self, sampling_params, trajectory, trace=False, session_id=0, **prompt):
                self.started.append(prompt["uid"])

        self.worker = Sessions()
        #: ``(prompts, the uid of every session started)`` per dispatch.
        self.dispatched: list[tuple] = []

    def generate_sequences(self, prompts) -> None:
        import asyncio

        async def dispatch() -> None:
            await self.worker.generate_sequences(prompts.clone())
            await asyncio.gather(*list(self.worker.background_tasks))

        begun = len(self.worker.started)
        asyncio.run(dispatch())
        self.dispatched.append((prompts, self.worker.started[begun:]))


class TestVerlHost(HostSuite):
    @pytest.fixture(params=list(LOSS_UNITS))
    def host(self, request, make_config, queue, tmp_path):
        return VerlHarness(make_config, tmp_path, request.param)


class KitRollouts:
    """verl's rollout manager on the legacy line (its servers need GPUs): ``generate_sequences`` gives each
    prompt row its rollouts with the kit's rewards (an even prompt's all 1, an odd one's 0, 1, 0, 1 within its
    group), seeded, in the layout fit reads (``responses``, ``response_mask``, ``rm_scores`` on the last token)."""

    def __init__(self, seed: int = 0, width: int = 6) -> None:
        self.gen, self.width = torch.Generator().manual_seed(seed), width

    def generate_sequences(self, prompts):
        from tensordict import TensorDict
        from verl import DataProto

        index = torch.as_tensor(np.asarray(prompts.non_tensor_batch["index"], dtype=np.int64))
        rows = len(index)
        starts = torch.ones(rows, dtype=torch.bool)
        starts[1:] = index[1:] != index[:-1]  # fit repeats each prompt n times, interleaved
        start = torch.cummax(torch.where(starts, torch.arange(rows), torch.zeros(rows, dtype=torch.long)), 0).values
        reward = torch.where(index % 2 == 0, 1.0, ((torch.arange(rows) - start) % 2).to(torch.float32))
        lengths = torch.randint(1, self.width + 1, (rows,), generator=self.gen)
        scores = torch.zeros(rows, self.width)
        scores[torch.arange(rows), lengths - 1] = reward
        batch = {
            "responses": torch.randint(3, 100, (rows, self.width), generator=self.gen),
            "response_mask": (torch.arange(self.width) < lengths.unsqueeze(-1)).to(torch.int64),
            "rm_scores": scores,
        }
        uid = np.array(prompts.non_tensor_batch["uid"], dtype=object, copy=True)
        return DataProto(TensorDict(batch, batch_size=[rows]), {"uid": uid}, meta_info={"timing": {}})


class LegacyRoundsHarness(HostHarness):
    """verl's legacy ``RayPPOTrainer``: its generation rounds, as fit pulls and generates its prompts."""

    def __init__(self, make_config) -> None:
        self.make_config = make_config

    def config(self, block=None):
        return self.make_config(["trainer.use_v1=false", "data.train_batch_size=4", "data.seed=3"], dataflex=block)

    def capabilities(self):
        from dataflex_verl.mount import capabilities

        return capabilities(self.config(), "legacy")

    def rounds(self, block, steps):
        import uuid

        import verl.trainer.main_ppo_v0 as main_ppo_v0
        from verl import DataProto
        from verl.trainer.ppo.ray_trainer import Role
        from verl.utils.dataset.rl_dataset import collate_fn

        from dataflex_verl.legacy import running
        from dataflex_verl.legacy_rounds import installed

        prompts = [{"index": i, "input_ids": torch.tensor([i])} for i in range(16)]
        trainer = main_ppo_v0.RayPPOTrainer(
            self.config(block), tokenizer=None, role_worker_mapping={Role.ActorRollout: object},
            resource_pool_manager=None, train_dataset=prompts, val_dataset=prompts, collate_fn=collate_fn,
        )  # fmt: skip
        trainer.async_rollout_manager = KitRollouts()
        n = int(trainer.config.actor_rollout_ref.rollout.n)
        out = []
        with running(trainer), installed(trainer):  # what fit installs
            pulls = iter(trainer.train_dataloader)
            for step in range(1, steps + 1):
                trainer.global_steps = step
                batch = DataProto.from_single_dict(next(pulls))  # fit's pull: the rounds run here
                batch.non_tensor_batch["uid"] = np.array([uuid.uuid4().hex for _ in range(len(batch))], dtype=object)
                requests = trainer._get_gen_batch(batch).repeat(repeat_times=n, interleave=True)
                rollouts = trainer.async_rollout_manager.generate_sequences(requests)  # fit's: the rounds' choice
                ids = torch.as_tensor(np.asarray(requests.non_tensor_batch["index"], dtype=np.int64))
                rounds = trainer.dataflex_generation.rounds
                out.append(RoundsStep(ids, rollouts.non_tensor_batch["uid"], len(batch), n, rounds))
        return out


class TestVerlLegacyRounds(GenerationRoundsSuite):
    @pytest.fixture
    def host(self, make_config):
        return LegacyRoundsHarness(make_config)


# -- the legacy line's staged generation (mechanism pilot) ---------------------------------------------------------
PROMPTS, N = 4, 4


def _collate(rows):
    """verl's collated prompt dict: a token tensor and the dataset columns as object arrays."""
    return {
        "input_ids": torch.tensor([[row["index"], 0] for row in rows]),
        "index": np.array([row["index"] for row in rows], dtype=object),
    }


class LegacyStagedHarness(HostHarness):
    """verl's ``RayPPOTrainer`` (its real constructor, dataloader, ``compute_advantage`` and checkpoint path), its
    step's stages generated where fit pulls its prompts; the replicas and the actor's workers, which need GPUs, are
    the sandbox's ``KeyedRollouts`` and ``LocalActorGroup``."""

    def __init__(self, make_config, root: Path) -> None:
        self.make_config, self.root, self.runs = make_config, root, 0

    def config(self, block):
        from omegaconf import open_dict

        overrides = ["trainer.use_v1=false", f"data.train_batch_size={PROMPTS}", f"actor_rollout_ref.rollout.n={N}",
                     "data.dataloader_num_workers=0", "trainer.resume_mode=auto"]  # fmt: skip
        config = self.make_config(overrides, dataflex=None if block is None else dict(block))
        with open_dict(config):
            config.trainer.default_local_dir = str(self.root / f"checkpoints{self.runs}")
        return config

    def capabilities(self):
        from dataflex_verl.mount import capabilities

        return capabilities(self.config(None), "legacy")

    def trainer(self, block, folder: Path | None = None):
        import verl.trainer.main_ppo_v0 as main_ppo_v0
        from omegaconf import open_dict
        from verl.trainer.ppo.ray_trainer import Role

        self.runs += 1
        config = self.config(block)
        if folder is not None:  # verl's resume_mode auto: the tracker file in default_local_dir names the step
            with open_dict(config):
                config.trainer.default_local_dir = str(folder.parent)
        rows = [{"index": i} for i in range(32)]
        trainer = main_ppo_v0.RayPPOTrainer(
            config, tokenizer=None, role_worker_mapping={Role.ActorRollout: object}, resource_pool_manager=None,
            train_dataset=rows, val_dataset=rows, collate_fn=_collate,
        )  # fmt: skip
        trainer.actor_rollout_wg = sandbox.LocalActorGroup()
        trainer.async_rollout_manager = sandbox.KeyedRollouts()
        trainer.global_steps = 0
        return trainer

    def train(self, trainer, steps: int, save_at: int | None = None):
        """fit's loop up to its loss: pull, generate (the stages), compute_advantage; DataFlex's step runs there."""
        from verl import DataProto
        from verl.trainer.ppo import ray_trainer

        from dataflex_verl import legacy_stages
        from dataflex_verl.legacy import running

        recorded = []
        with running(trainer), legacy_stages.installed(trainer):
            replicas = trainer.async_rollout_manager.manager
            calls = []
            generate = replicas.generate_sequences
            replicas.generate_sequences = lambda prompts: calls.append(generate(prompts)) or calls[-1]
            loader = iter(trainer.train_dataloader)
            while trainer.global_steps < steps:
                trainer.global_steps += 1
                calls.clear()
                chosen = next(loader)
                batch = DataProto.from_single_dict(chosen)
                batch.non_tensor_batch["uid"] = np.array([str(i) for i in range(len(batch))], dtype=object)
                gen_batch = trainer._get_gen_batch(batch)
                out = trainer.async_rollout_manager.generate_sequences(
                    gen_batch.repeat(repeat_times=N, interleave=True)
                )
                stages = trainer.dataflex_generation
                data = batch.repeat(repeat_times=N, interleave=True).union(out)
                data.batch["token_level_rewards"] = data.batch["rm_scores"]
                config = trainer.config
                ray_trainer.compute_advantage(
                    data, adv_estimator=config.algorithm.adv_estimator, gamma=config.algorithm.gamma,
                    lam=config.algorithm.lam, num_repeat=N, norm_adv_by_std_in_grpo=True, config=config.algorithm,
                )  # fmt: skip
                metrics, trainer.dataflex_metrics = dict(trainer.dataflex_metrics), {}
                recorded.append(StagedStep(
                    [*stages.requests], [_rows(call) for call in calls], stages.trained(), _rows(out), stages.groups,
                    stages.rollout_n, metrics,
                ))  # fmt: skip
                if trainer.global_steps == save_at:
                    trainer._save_checkpoint()
        return recorded

    def staged_steps(self, block, steps, *, save_at=None):
        trainer = self.trainer(block)
        steps_done = self.train(trainer, steps, save_at)
        folder = None if save_at is None else Path(trainer.config.trainer.default_local_dir) / f"global_step_{save_at}"
        return steps_done, folder

    def staged_resume(self, block, folder, steps):
        trainer = self.trainer(block, folder)
        trainer._load_checkpoint()
        assert trainer.global_steps == int(folder.name.rsplit("_", 1)[1]), "verl did not resume the checkpoint"
        return self.train(trainer, steps)


def _rows(rollouts) -> StagedRows:
    """Rollout rows as the kit reads them: their group (an int), their prompt's dataset row, their response."""
    uid = rollouts.non_tensor_batch["uid"]
    return StagedRows(
        torch.as_tensor(np.asarray(uid).astype(np.int64)),
        torch.as_tensor(np.asarray(rollouts.non_tensor_batch["index"]).astype(np.int64)),
        rollouts.batch["responses"],
        rollouts.batch["rm_scores"].sum(-1),
    )


class TestVerlLegacyStaged(StagedSuite):
    @pytest.fixture
    def host(self, make_config, tmp_path):
        return LegacyStagedHarness(make_config, tmp_path)
