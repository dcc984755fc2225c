"""verl's padding rows change nothing on the real rows of V1's step (issue 36).

verl's real ``_compute_advantage`` on a rollout with verl's padding rows (``upsample_batch_to_divisible_size``'s
layout: an empty mask, a shared ``pad<hex>`` uid, the ``is_padding`` tag), reordered as ``_balance_batch`` does
(``KVBatchMeta.reorder``), against the same rollout without them (the legacy line's is in ``test_legacy.py``).
The weights on the real rows, and every ``dataflex/*`` metric, are the same; padding rows get 0.
"""

from __future__ import annotations

import pytest
import torch
import transfer_queue as tq

from dataflex_lab.verl import sandbox

pytestmark = pytest.mark.verl

ADV_SOFTMAX = {
    "scorer": {"name": "advantage_magnitude"},
    "actuator": {"name": "softmax", "params": {"temperature": 0.5}},
}

#: Metrics that time or describe the host's I/O rather than the step's result.
NOT_COMPARED = {"dataflex/hook_time_s", "dataflex/separate_io", "dataflex/separate_io_total"}


def dataflex_metrics(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if k.startswith("dataflex/") and k not in NOT_COMPARED}


def assert_same_metrics(padded: dict, plain: dict) -> None:
    padded, plain = dataflex_metrics(padded), dataflex_metrics(plain)
    assert set(padded) == set(plain)
    for key, value in plain.items():
        assert padded[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def v1_step(make_config, block, *, padding_rows: int, seed: int):
    """verl's ``_compute_advantage`` through ``dataflex_sync`` on a rollout with ``padding_rows`` padding rows,
    reordered; ``(weights by trajectory key, padding by key, metrics)``."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    trainer = get_trainer_cls("dataflex_sync")(make_config((), dataflex=block))
    trainer.global_steps = 1
    meta = sandbox.put_rollout(sandbox.synthetic_rollout(num_prompts=5, n=4, padding_rows=padding_rows, seed=seed))
    gen = torch.Generator().manual_seed(seed)
    real = len(meta) - padding_rows  # put_rollout puts the real rows first, verl's padding rows after them
    order = torch.randperm(real, generator=gen).tolist()  # the same order of the real rows with or without padding
    for row in range(real, len(meta)):
        order.insert(int(torch.randint(0, len(order) + 1, (1,), generator=torch.Generator().manual_seed(row))), row)
    meta.reorder(order)  # as _balance_batch: the padding rows end up anywhere
    metrics: dict = {}
    out = trainer._compute_advantage(meta, metrics)
    data = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id, select_fields=["rollout_is_weights"])
    weights = data["rollout_is_weights"].to_padded_tensor(0)
    padding = [bool(tag.get("is_padding", False)) for tag in out.tags]
    return weights, padding, metrics


@pytest.mark.parametrize(
    "block",
    [ADV_SOFTMAX, {"mechanism": "select", "scorer": {"name": "group_reward_variance"},
                   "actuator": {"name": "topk_fraction", "params": {"recompute_advantage": False}}}],
    ids=["reweight", "select"],
)  # fmt: skip
def test_v1_padded_and_unpadded_steps_weigh_the_real_rows_alike(make_config, queue, block):
    padded, padding, padded_metrics = v1_step(make_config, block, padding_rows=3, seed=11)
    plain, plain_padding, plain_metrics = v1_step(make_config, block, padding_rows=0, seed=11)
    pad = torch.tensor(padding)
    assert int(pad.sum()) == 3 and not any(plain_padding)
    assert padded[pad].abs().sum() == 0
    # the real rows are in the same order in both batches (fresh uids and keys, the same layout)
    real_padded = padded[~pad]
    assert real_padded.shape[0] == plain.shape[0]
    width = min(real_padded.shape[1], plain.shape[1])
    assert real_padded[:, width:].abs().sum() == 0 and plain[:, width:].abs().sum() == 0
    torch.testing.assert_close(real_padded[:, :width], plain[:, :width], rtol=1e-5, atol=1e-6)
    assert_same_metrics(padded_metrics, plain_metrics)
