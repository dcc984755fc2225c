"""The same plugins in both hosts: one pair, equivalent batches, the same weights in verl and in TRL.

A generation batch comes out of TRL's real ``GRPOTrainer`` (DataFlex's TRL
host), the same rows go into a real TransferQueue and through verl's real
``_compute_advantage`` (DataFlex's verl host), and the weights each host hands
its framework's loss are compared: per token, with mean one over valid tokens
(TRL ``dapo``, verl ``token-mean``).
"""

from __future__ import annotations

import os

import pytest
import torch

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


def trl_step(tmp_path):
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
                                      rollout_func=rollout, dataflex=PAIR)  # fmt: skip
    trainer.model.train()
    seen = {}
    run = trainer.dataflex_step.run

    def recording(batch, step, **kwargs):
        seen["batch"], seen["result"] = batch, run(batch, step, **kwargs)
        return seen["result"]

    trainer.dataflex_step.run = recording
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


def test_one_pair_gives_the_same_weights_in_verl_and_in_trl(make_config, queue, tmp_path):
    import transfer_queue as tq
    from verl.trainer.ppo.v1 import get_trainer_cls

    batch, result, output = trl_step(tmp_path)
    mask = batch.batch["response_mask"].bool()
    assert mask.sum(-1).min() > 0
    trl_weights = result.factor.unsqueeze(-1) * mask  # one weight per valid token of each row
    assert trl_weights[mask].std() > 0.1  # a pair that actually moves weight between rows

    config = make_config(["actor_rollout_ref.actor.loss_agg_mode=token-mean"], dataflex=PAIR)
    trainer = get_trainer_cls("dataflex_sync")(config)
    trainer.global_steps = 1
    meta = sandbox.put_rollout(verl_rollout(batch, output))
    out = trainer._compute_advantage(meta, {})
    got = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id, select_fields=["rollout_is_weights"])
    verl_weights = got["rollout_is_weights"].to_padded_tensor(0)
    sandbox.clear(out)
    torch.testing.assert_close(verl_weights, trl_weights[:, : verl_weights.shape[1]], rtol=1e-6, atol=1e-6)
