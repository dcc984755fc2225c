"""The same plugins in both hosts: one pair, equivalent batches, the same weights in verl and in TRL.

A generation batch comes out of TRL's real ``GRPOTrainer`` (DataFlex's TRL
host), the same rows go into a real TransferQueue and through verl's real
``_compute_advantage`` (DataFlex's verl host), and the weights each host hands
its framework's loss are compared: per token, with mean one over valid tokens
(TRL ``dapo``, verl ``token-mean``). A mechanism registered by this module
alone, with no change to core or either host, runs through both the same way.
"""

from __future__ import annotations

import os

import pytest
import torch

from dataflex_core.mechanisms import LossMechanism, check_rollout_time, register_mechanism, unregister_mechanism
from dataflex_lab.verl import sandbox

pytestmark = pytest.mark.verl
trl = pytest.importorskip("trl")
pytest.importorskip("dataflex_trl")

GENERATIONS = 4
PAIR = {
    "mechanism": "reweight",
    "scorer": {"name": "group_solve_rate", "params": {"success_threshold": 0.5}},
    "actuator": {"name": "difficulty_band", "params": {"low": 0.2, "high": 0.8, "outside_weight": 0.1}},
}


def trl_step(tmp_path, block=PAIR):
    """One real TRL generation batch through DataFlex's TRL host: the batch the step saw and its weights."""
    import warnings

    from dataflex_trl import DataFlexGRPOTrainer
    from trl import GRPOConfig

    from dataflex_lab.trl.toy import char_tokenizer, echo_reward, tiny_model, toy_dataset

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = char_tokenizer()

    def rollout(prompts, trainer):
        """Group g answers right g times of 4 (solve rates 0, 1/4, 1/2, 3/4), responses of 1-4 tokens."""
        prompt_ids, completion_ids = [], []
        for row, prompt in enumerate(prompts):
            group, member = divmod(row, GENERATIONS)
            text = prompt * 4 if member < group else ":" * (1 + member % 3)
            prompt_ids.append(tokenizer(prompt)["input_ids"])
            completion_ids.append(tokenizer(text)["input_ids"])
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": [[0.0] * len(c) for c in completion_ids],
        }

    args = GRPOConfig(output_dir=str(tmp_path / "trl"), per_device_train_batch_size=16, num_generations=GENERATIONS,
                      max_completion_length=6, loss_type="dapo", report_to=[], use_cpu=True, save_strategy="no",
                      disable_tqdm=True)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = DataFlexGRPOTrainer(model=tiny_model(tokenizer, seed=0), reward_funcs=echo_reward, args=args,
                                      train_dataset=toy_dataset(16, seed=0), processing_class=tokenizer,
                                      rollout_func=rollout, dataflex=block)  # fmt: skip
    trainer.model.train()
    seen = {}
    run = trainer.dataflex.run

    def recording(batch, step, **kwargs):
        seen["batch"], seen["result"] = batch, run(batch, step, **kwargs)
        return seen["result"]

    trainer.dataflex.run = recording  # the session's step, observed
    dataset = trainer.train_dataset
    output = trainer._generate_and_score_completions([dict(dataset[i]) for i in range(4) for _ in range(GENERATIONS)])
    return seen["batch"], seen["result"], output


def verl_rollout(batch, output):
    """The TRL rows in the layout verl's agent loop writes to the queue (one key per response)."""
    from tensordict import NonTensorStack, TensorDict

    mask = batch.batch["response_mask"]
    lengths = mask.sum(-1).tolist()
    uids = [f"prompt{g}" for g in batch.non_tensor_batch["uid"].tolist()]

    def jagged(padded):
        return torch.nested.as_nested_tensor([padded[i, :n] for i, n in enumerate(lengths)], layout=torch.jagged)

    prompt_ids = output["prompt_ids"]
    columns = {
        "prompts": torch.nested.as_nested_tensor([row for row in prompt_ids], layout=torch.jagged),
        "responses": jagged(output["completion_ids"]),
        "response_mask": jagged(mask.to(torch.int64)),
        "rm_scores": jagged(batch.batch["rm_scores"]),
        "old_log_probs": jagged(torch.zeros(mask.shape)),
        "entropy": jagged(torch.zeros(mask.shape)),
        "uid": NonTensorStack(*uids),
    }
    keys = [f"{uid}_{i % GENERATIONS}_0" for i, uid in enumerate(uids)]
    tags = [{"status": "finished", "response_len": n, "is_padding": False, "min_global_steps": 0} for n in lengths]
    return sandbox.SyntheticRollout(keys, tags, TensorDict(columns, batch_size=len(keys)), sorted(set(uids)))


def verl_weights(make_config, block, batch, output):
    """The same rows through verl's real ``_compute_advantage`` on a real TransferQueue: ``rollout_is_weights``."""
    import transfer_queue as tq
    from verl.trainer.ppo.v1 import get_trainer_cls

    config = make_config(["actor_rollout_ref.actor.loss_agg_mode=token-mean"], dataflex=block)
    trainer = get_trainer_cls("dataflex_sync")(config)
    trainer.global_steps = 1
    meta = sandbox.put_rollout(verl_rollout(batch, output))
    out = trainer._compute_advantage(meta, {})
    got = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id, select_fields=["rollout_is_weights"])
    sandbox.clear(out)
    return got["rollout_is_weights"].to_padded_tensor(0)


def test_one_pair_gives_the_same_weights_in_verl_and_in_trl(make_config, queue, tmp_path):
    batch, result, output = trl_step(tmp_path)
    mask = batch.batch["response_mask"].bool()
    assert mask.sum(-1).min() > 0
    trl_weights = result.factor.unsqueeze(-1) * mask  # one weight per valid token of each row
    assert trl_weights[mask].std() > 0.1  # a pair that actually moves weight between rows

    verl = verl_weights(make_config, PAIR, batch, output)
    torch.testing.assert_close(verl, trl_weights[:, : verl.shape[1]], rtol=1e-6, atol=1e-6)


class ScoresPlusOne(LossMechanism):
    """Test-only mechanism: each row weighs its score plus one (the configured reweighter is never called)."""

    name = "crosstest_scores_plus_one"
    actuator_kind = "reweighter"

    @classmethod
    def check(cls, pipeline, host, loss_unit):
        check_rollout_time(pipeline, host, cls.name)

    def weights(self, step, batch, step_id):
        return step.pipeline.scorer.score(batch, step_id, **step.ctx).to(torch.float32) + 1.0


@pytest.fixture
def scores_plus_one():
    register_mechanism(ScoresPlusOne)
    yield {**PAIR, "mechanism": ScoresPlusOne.name}
    unregister_mechanism(ScoresPlusOne.name)


def test_a_mechanism_registered_by_a_test_runs_through_both_hosts(make_config, queue, tmp_path, scores_plus_one):
    batch, result, output = trl_step(tmp_path, scores_plus_one)
    mask = batch.batch["response_mask"].bool()
    # group g answers right g times of 4: solve rates 0, 1/4, 1/2, 3/4, so weights 1, 5/4, 3/2, 7/4 before
    # normalisation to mean one per valid token (TRL dapo)
    raw = (torch.arange(len(mask)) // GENERATIONS).to(torch.float32) / GENERATIONS + 1.0
    expected = raw / ((raw * mask.sum(-1)).sum() / mask.sum())
    torch.testing.assert_close(result.factor, expected)
    assert result.metrics["dataflex/weight/mean"] == pytest.approx(1.0)
    # TRL's loss gets it: each row's advantage times its weight on every valid token, TRL's own group
    # advantages (zero-mean in each group) once the weight is divided out
    trl_weights = expected.unsqueeze(-1) * mask
    applied = output["advantages"][:, : mask.shape[1]]
    per_row = (applied * mask).sum(-1) / mask.sum(-1)
    torch.testing.assert_close(applied, per_row.unsqueeze(-1) * mask)
    plain = per_row / expected
    assert plain.abs().max() > 0.1
    torch.testing.assert_close(plain.view(-1, GENERATIONS).sum(-1), torch.zeros(len(mask) // GENERATIONS))

    verl = verl_weights(make_config, scores_plus_one, batch, output)
    torch.testing.assert_close(verl, trl_weights[:, : verl.shape[1]], rtol=1e-6, atol=1e-6)
