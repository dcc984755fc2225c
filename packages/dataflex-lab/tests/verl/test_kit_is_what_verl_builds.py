"""The testing kit's batches against verl's own code: its GRPO advantage and its padding rows."""

from __future__ import annotations

import pytest
import torch

from dataflex_lab.testing import grpo_advantages, grpo_batch
from dataflex_lab.verl import sandbox


@pytest.mark.parametrize("seed", range(3))
def test_the_kits_advantages_are_verls_grpo_estimator(seed):
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    batch = grpo_batch(4, 4, width=6, empty_rows=2, singleton_groups=2, padding_rows=3, shuffle=True, seed=seed)
    mask, uid = batch.batch["response_mask"], batch.non_tensor_batch["uid"]
    verl_advantages, _ = compute_grpo_outcome_advantage(batch.batch["token_level_rewards"], mask, uid)
    torch.testing.assert_close(batch.batch["advantages"], verl_advantages)
    torch.testing.assert_close(grpo_advantages(batch.batch["rm_scores"].sum(-1), uid, mask), verl_advantages)


def test_the_sandboxs_padding_rows_are_verls_padding_template():
    """verl's ``upsample_batch_to_divisible_size`` pads with ``construct_minimal_padding_template``."""
    from verl.trainer.ppo.padding_utils import construct_minimal_padding_template

    rollout = sandbox.synthetic_rollout(3, 4, max_response_len=8, padding_rows=2, seed=4)
    real = 3 * 4
    source = {name: rollout.fields[name][0] for name in ("prompts", "responses", "response_mask", "rm_scores")}
    template, tag = construct_minimal_padding_template(source, rollout.tags[0], eos_token_id=2)
    pad_uids = {rollout.fields["uid"][i] for i in range(real, real + 2)}
    assert len(pad_uids) == 1 and next(iter(pad_uids)).startswith("pad") and not pad_uids & set(rollout.uids)
    for i in range(real, real + 2):
        assert rollout.tags[i]["is_padding"] is tag["is_padding"] is True
        assert rollout.tags[i]["response_len"] == tag["response_len"] == 1
        for name in ("response_mask", "rm_scores"):
            assert rollout.fields[name][i].tolist() == template[name].tolist(), name
    assert not any(tag_["is_padding"] for tag_ in rollout.tags[:real])
    assert all(rollout.fields["response_mask"][i].sum() > 0 for i in range(real))
