"""``mechanism: pilot`` on the legacy line, where fit pulls its prompts: the stages without the fit loop.

The trainer is verl's ``RayPPOTrainer`` with the DataFlex mixin, built by its real constructor and mounted with a
pilot block; the rollout manager stands in for verl's replicas (no workers here) and returns each requested row
with a reward chosen by its prompt: even ``index`` prompts get rewards that vary (``1, 0, 1, ...``), odd ones all
0. The end-to-end run in verl's own fit loop is ``tests/fit/test_fit_pilot.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_core import InvalidOutputError
from dataflex_verl.legacy_rounds import ROLLOUT_OFFSET

pytestmark = pytest.mark.verl

N, PROMPTS, WIDTH = 4, 4, 3
PILOT = {
    "mechanism": "pilot",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.01, "high": 1.0e9}},
}


def collate(rows):
    """verl's collated prompt dict: tensors for token fields, object arrays for the dataset columns."""
    return {
        "input_ids": torch.tensor([[row["index"], 0] for row in rows]),
        "index": np.array([row["index"] for row in rows], dtype=object),
    }


class Replicas:
    """verl's rollout manager's place: each row's response names its call, uid and position; rewards by prompt."""

    def __init__(self) -> None:
        self.calls: list[dict[str, np.ndarray]] = []

    def generate_sequences(self, prompts):
        from tensordict import TensorDict
        from verl import DataProto

        index = np.asarray(prompts.non_tensor_batch["index"]).astype(np.int64)
        uid = np.asarray(prompts.non_tensor_batch["uid"])
        offset = prompts.non_tensor_batch.get(ROLLOUT_OFFSET)
        self.calls.append({"index": index, "uid": uid, "offset": None if offset is None else offset.astype(np.int64)})
        k = len(index)
        seen = np.zeros(k, dtype=np.int64)  # each row's position among its uid's rows of this call
        for i in range(1, k):
            seen[i] = seen[i - 1] + 1 if uid[i] == uid[i - 1] else 0
        rewards = torch.tensor(np.where(index % 2 == 0, (seen % 2 == 0).astype(np.float32), 0.0))
        responses = torch.tensor(np.stack([np.full(k, len(self.calls)), uid.astype(np.int64), seen], -1))
        scores = torch.zeros(k, WIDTH)
        scores[:, -1] = rewards
        batch = {"responses": responses, "response_mask": torch.ones(k, WIDTH, dtype=torch.int64), "rm_scores": scores}
        echoed = {name: np.array(value, copy=True) for name, value in prompts.non_tensor_batch.items()}
        out = DataProto(batch=TensorDict(batch, batch_size=[k]), non_tensor_batch=echoed)  # verl echoes the columns
        out.meta_info = {"timing": {"generate_sequences": 0.01}}
        return out


class Rows(list):
    """verl's ``RLHFDataset``'s place: row ``i`` is ``{"index": i}``, and its ``dataframe`` holds the column a
    train sampler reads (``pilot.draw``)."""

    def __init__(self, rows: int) -> None:
        from datasets import Dataset

        super().__init__({"index": i} for i in range(rows))
        self.dataframe = Dataset.from_dict({"index": list(range(rows))})


def staged_trainer(make_config, pilot, *, rows=32, overrides=(), block=PILOT):
    import verl.trainer.main_ppo_v0 as main_ppo_v0
    from verl.trainer.ppo.ray_trainer import Role

    config = make_config(
        ["trainer.use_v1=false", f"data.train_batch_size={PROMPTS}", f"actor_rollout_ref.rollout.n={N}", *overrides],
        dataflex={**block, "pilot": pilot},
    )
    dataset = Rows(rows)
    trainer = main_ppo_v0.RayPPOTrainer(
        config, tokenizer=None, role_worker_mapping={Role.ActorRollout: object}, resource_pool_manager=None,
        train_dataset=dataset, val_dataset=dataset, collate_fn=collate,
    )  # fmt: skip
    trainer.global_steps = 1
    trainer.async_rollout_manager = Replicas()
    return trainer


def one_step(trainer, pulled):
    """fit's pull of ``pulled`` through the staged loader, then fit's own generate call on what it yielded."""
    from verl import DataProto

    from dataflex_verl import legacy_stages

    with legacy_stages.installed(trainer):
        replicas = trainer.async_rollout_manager.manager
        chosen = trainer.train_dataloader.rounds.step(pulled)  # what the loader yields for fit's pull
        batch = DataProto.from_single_dict(chosen)
        batch.non_tensor_batch["uid"] = np.array([f"fit-{i}" for i in range(len(batch))], dtype=object)
        repeated = trainer._get_gen_batch(batch).repeat(repeat_times=N, interleave=True)
        out = trainer.async_rollout_manager.generate_sequences(repeated)
    return chosen, out, replicas.calls, trainer.dataflex_generation


@pytest.mark.parametrize("keep", [True, False])
def test_admitted_prompts_are_topped_up_to_rollout_n_under_their_pilot_uid(make_config, keep):
    trainer = staged_trainer(make_config, {"prompts": 2, "rollouts": 2, "keep": keep, "max_stages": 4})
    chosen, out, calls, stages = one_step(trainer, collate([{"index": i} for i in (0, 1, 3, 5)]))
    # stage 1 screens the pulled prompts first (2 x the batch), each pilot.rollouts times
    assert calls[0]["index"][::2].tolist()[:4] == [0, 1, 3, 5] and len(calls[0]["index"]) == 2 * PROMPTS * 2
    committed = stages.committed
    assert all(int(i) % 2 == 0 for i in chosen["index"]) and len(chosen["index"]) == PROMPTS  # the batch full
    # the commit stage asks each admitted prompt for the rest of its group, under the uid of its pilot rollouts
    commit = calls[-1]
    assert sorted(set(commit["uid"].tolist())) == committed.tolist()
    assert len(commit["uid"]) == PROMPTS * (N - 2 if keep else N)
    # each request row says how many rollouts its group has so far: an agent loop keying its sampling by the
    # row's number within the group draws new samples in the commit, not the pilots' again
    assert calls[0]["offset"].tolist() == [0] * len(calls[0]["uid"])
    assert commit["offset"].tolist() == [2] * len(commit["uid"])
    assert ROLLOUT_OFFSET not in out.non_tensor_batch
    # fit's generate call gets rollout.n rows per prompt, consecutive, under fit's uids
    assert len(out) == PROMPTS * N
    assert out.non_tensor_batch["uid"].tolist() == [f"fit-{i}" for i in range(PROMPTS) for _ in range(N)]
    stage_of, uid_of = out.batch["responses"][:, 0], out.batch["responses"][:, 1]
    for group, uid in enumerate(committed.tolist()):
        rows = slice(group * N, (group + 1) * N)
        assert uid_of[rows].tolist() == [uid] * N
        pilot_rows = int((stage_of[rows] < len(calls)).sum())
        assert pilot_rows == (2 if keep else 0)
        assert out.batch["rm_scores"][rows, -1].var() > 0 or not keep


def test_a_step_short_of_admitted_prompts_raises_before_fit_generates(make_config):
    trainer = staged_trainer(make_config, {"prompts": 1, "rollouts": 2, "max_stages": 2})
    with pytest.raises(InvalidOutputError, match=r"admitted 1 of the 4 prompts.*on_short=backfill"):
        one_step(trainer, collate([{"index": i} for i in (0, 1, 3, 5)]))


def test_backfill_fills_the_batch_with_screened_prompts_without_signal(make_config):
    trainer = staged_trainer(make_config, {"prompts": 1, "rollouts": 2, "max_stages": 2, "on_short": "backfill"})
    chosen, out, calls, stages = one_step(trainer, collate([{"index": i} for i in (0, 1, 3, 5)]))
    assert chosen["index"].tolist() == [0, 1, 3, 5] and len(out) == PROMPTS * N and stages.backfilled == 3
    assert len(calls) == 2 and len(calls[0]["index"]) == PROMPTS * 2  # the cap on stages held


def test_admit_all_with_full_pilots_generates_fits_own_batch_in_one_stage(make_config):
    every = {"prompts": 1, "rollouts": N}
    admit_all = {**PILOT, "actuator": {"name": "threshold_band", "params": {"low": -1.0, "high": 1.0e9}}}
    trainer = staged_trainer(make_config, every, block=admit_all)
    pulled = collate([{"index": i} for i in (0, 1, 3, 5)])
    chosen, out, calls, _ = one_step(trainer, pulled)
    assert len(calls) == 1 and calls[0]["index"].tolist() == np.repeat([0, 1, 3, 5], N).tolist()
    assert chosen["index"].tolist() == [0, 1, 3, 5] and torch.equal(chosen["input_ids"], pulled["input_ids"])


def test_trained_groups_that_are_not_rollout_n_are_refused():
    from tensordict import TensorDict
    from verl import DataProto

    from dataflex_verl.legacy_stages import trained_groups

    stage = DataProto(batch=TensorDict({"x": torch.arange(6)}, batch_size=[6]))
    uids = torch.tensor([0, 0, 0, 1, 1, 1])
    out, committed = trained_groups([(stage, uids), (stage, uids)], [torch.tensor([0, 3]), torch.arange(6)], 4)
    assert committed.tolist() == [0, 1] and out.batch["x"].tolist() == [0, 0, 1, 2, 3, 3, 4, 5]
    with pytest.raises(RuntimeError, match=r"groups of \[3, 3\] rollouts.*rollout.n=4"):
        trained_groups([(stage, uids)], [torch.arange(6)], 4)


def test_pilot_mounts_on_the_legacy_line_and_keeps_its_seam_reasons_elsewhere(make_config):
    from dataflex_core import IncompatibleComponentError
    from dataflex_core.session import StagedGeneration

    trainer = staged_trainer(make_config, {"prompts": 2})
    assert trainer.dataflex.seam(StagedGeneration) is not None
    assert "refill" in trainer.dataflex.stateful()  # the screening shuffle's position travels with the state
    colocated = ["reward.reward_model.enable=true", "reward.reward_model.enable_resource_pool=false"]
    with pytest.raises(IncompatibleComponentError, match="'pilot' needs .* with a colocated reward model"):
        staged_trainer(make_config, {"prompts": 2}, overrides=colocated)


#: GRESO drawing the screened prompts (``pilot.draw``): a ``pre_rollout`` scorer run in verl's train sampler.
GRESO = {"mechanism": "curriculum", "prompt_key": "index", "scorer": {"name": "greso"},
         "actuator": {"name": "temperature", "params": {"temperature": 1.0}}}  # fmt: skip


def test_pilot_draw_mounts_on_the_legacy_line_and_its_sampler_gives_every_screened_prompt(make_config):
    """A ``pilot.draw`` curriculum (a ``pre_rollout`` scorer) draws fit's pull, verl's loader being rebuilt around its
    sampler, and the further screened prompts, as whole blocks of that sampler."""
    trainer = staged_trainer(make_config, {"prompts": 2, "on_short": "backfill", "draw": GRESO})
    sampler = trainer.dataflex.sampler
    assert trainer.train_dataloader.sampler is sampler and sampler.history is trainer.dataflex.ledger
    pulled = next(iter(trainer.train_dataloader))  # fit's pull
    drawn = sampler.state_dict()  # where the stages' draws start (the history is fed after the step)
    _, _, calls, stages = one_step(trainer, pulled)
    screening = [call["index"][::2].tolist() for call, screens in zip(calls, stages.screening) if screens]
    sampler.load_state_dict(drawn)
    expected, first = [], pulled["index"].tolist()  # stage 1 screens the pull first
    for stage in screening:
        rows, first = first, []
        while len(rows) < len(stage):  # whole blocks, less the rows the stage already screens
            rows += [row for row in sampler.next_block() if row not in rows][: len(stage) - len(rows)]
        expected.append(rows)
    assert len(screening) == 2 and screening == expected


def test_stage_time_splits_into_the_replicas_generation_and_the_seams_own_work(make_config, monkeypatch):
    """``seam_time_s`` is the stages' time less the replicas' generate calls: a slow generation lands in
    ``generation_time_s`` only, a slow generation batch built by ``roll_out`` around that call in ``seam_time_s``
    only (the bench's judged row relies on it)."""
    import time

    from dataflex_verl.legacy_stages import GENERATION_TIME, SEAM_TIME, STAGES_TIME

    generate_s, build_s = 0.05, 0.04
    trainer = staged_trainer(make_config, {"prompts": 2, "rollouts": 2, "max_stages": 4})
    replicas = trainer.async_rollout_manager
    generate, gen_batch = replicas.generate_sequences, trainer._get_gen_batch

    def slow_generate(prompts):
        time.sleep(generate_s)
        return generate(prompts)

    def slow_gen_batch(batch):  # roll_out builds each stage's generation batch with it, before the generate call
        time.sleep(build_s)
        return gen_batch(batch)

    monkeypatch.setattr(replicas, "generate_sequences", slow_generate)
    monkeypatch.setattr(trainer, "_get_gen_batch", slow_gen_batch)
    one_step(trainer, collate([{"index": i} for i in (0, 1, 3, 5)]))
    metrics, stages = trainer.dataflex_metrics, len(replicas.calls)
    assert stages >= 2  # a screening stage and the commit
    assert metrics[SEAM_TIME] == metrics[STAGES_TIME] - metrics[GENERATION_TIME]
    assert stages * generate_s <= metrics[GENERATION_TIME] < stages * (generate_s + build_s)
    assert metrics[SEAM_TIME] >= stages * build_s
