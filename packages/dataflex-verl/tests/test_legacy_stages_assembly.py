"""The staged step's trained batch on verl's legacy line, assembled in one copy (``legacy_stages.trained_groups``).

Each stage's rollouts are built as verl 0.9.1's agent loop returns them (``AgentLoopWorker._postprocess``: the
token tensors, ``rm_scores`` on the last response token, ``rollout_log_probs``, ``__num_turns__``, the extra
fields as object arrays, the columns echoed from the prompts, ``meta_info`` with metrics and timing), with
awkward rows: empty responses, 3-D ``position_ids``. The batch must be the one verl's own three-copy assembly
gives (``select_idxs`` per stage, ``DataProto.concat``, a reorder into groups), field for field, dtype, order.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.verl

PROMPT, RESPONSE = 3, 5


def agent_loop_output(uids, seed: int, *, rope_3d: bool = False):
    """One stage's rollouts of prompts ``uids`` (a row per rollout, a group's rows consecutive), as verl returns them."""
    from tensordict import TensorDict
    from verl import DataProto

    g = torch.Generator().manual_seed(seed)
    uids = torch.as_tensor(uids)
    k = len(uids)
    lengths = torch.randint(0, RESPONSE + 1, (k,), generator=g)
    lengths[0] = 0  # an empty response
    response_mask = (torch.arange(RESPONSE) < lengths.unsqueeze(1)).long()
    prompts = torch.randint(1, 100, (k, PROMPT), generator=g)
    responses = torch.randint(1, 100, (k, RESPONSE), generator=g) * response_mask
    attention_mask = torch.cat([torch.ones(k, PROMPT, dtype=torch.long), response_mask], -1)
    position = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    position = position.unsqueeze(1).expand(k, 3, -1).contiguous() if rope_3d else position
    scores = torch.zeros(k, RESPONSE)
    reward = torch.randint(0, 2, (k,), generator=g).float()
    scores[torch.arange(k), (lengths - 1).clamp(min=0)] = reward
    batch = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([prompts, responses], -1),
            "attention_mask": attention_mask,
            "position_ids": position,
            "rollout_log_probs": -torch.rand(k, RESPONSE, generator=g) * response_mask,
            "rm_scores": scores,
        },
        batch_size=k,
    )
    extras = np.empty(k, dtype=object)
    extras[:] = [{"seed": seed, "row": i} for i in range(k)]
    non_tensor = {
        "__num_turns__": np.full(k, 2, dtype=np.int32),
        "acc": reward.numpy().astype(np.float64),
        "extras": extras,
        "index": np.array([f"row-{int(u)}" for u in uids], dtype=object),
        "uid": np.array(uids.tolist(), dtype=object),
    }
    meta = {"metrics": [{"generate_sequences": 0.1}] * k, "reward_extra_keys": ["acc"], "timing": {"gen": 0.2}}
    return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=meta), uids


def verls_assembly(parts, trained):
    """verl's own ops, as the host assembled before: each stage's kept rows, concatenated, reordered into groups."""
    from verl import DataProto

    uid = torch.cat([uids[keep] for (_, uids), keep in zip(parts, trained)])
    pieces = [rollouts.select_idxs(keep.numpy()) for (rollouts, _), keep in zip(parts, trained)]
    for piece in pieces:
        piece.meta_info = {}
    return DataProto.concat(pieces).select_idxs(torch.argsort(uid, stable=True).numpy())


def assert_same_batch(got, want):
    assert list(got.batch.keys()) == list(want.batch.keys())
    assert got.batch.batch_size == want.batch.batch_size
    for name in want.batch.keys():
        a, b = got.batch[name], want.batch[name]
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), name
    assert list(got.non_tensor_batch) == list(want.non_tensor_batch)
    for name, b in want.non_tensor_batch.items():
        a = got.non_tensor_batch[name]
        assert a.dtype == b.dtype and a.shape == b.shape and a.tolist() == b.tolist(), name
    assert got.meta_info == want.meta_info == {}


def rows(*values):
    return torch.tensor(values, dtype=torch.long)


# (uids of each stage's rows, the rows each stage keeps, rollout.n); uids are the groups' prompts
CASES = {
    # screening 4 prompts x 2, two evicted (uids 1, 3); the commit tops 0 and 2 up by 2 each
    "evictions and top-ups": ([[0, 0, 1, 1, 2, 2, 3, 3], [0, 0, 2, 2]], [rows(0, 1, 4, 5), rows(0, 1, 2, 3)], 4),
    # a second screening stage (uids 4, 5), one admitted; the commit tops up 0 and 4, backfills 1 as a whole group
    "backfill": (
        [[0, 0, 1, 1], [4, 4, 5, 5], [0, 0, 4, 4, 1, 1, 1, 1]],
        [rows(0, 1), rows(0, 1), torch.arange(8)],
        4,
    ),
    # groups of 2: pilots of 1, the commit adds 1 to each admitted prompt, in an order other than the uids'
    "groups of 2": ([[0, 1, 2, 3, 4], [3, 0, 4]], [rows(0, 3, 4), rows(0, 1, 2)], 2),
    # screening only: the pilots are not trained (nothing kept of stage 1), the commit generates whole groups
    "screening only": ([[0, 0, 1, 1, 2, 2], [2, 2, 2, 0, 0, 0]], [rows(), torch.arange(6)], 3),
}


@pytest.mark.parametrize("rope_3d", [False, True], ids=["position_ids 2-D", "position_ids 3-D"])
@pytest.mark.parametrize("case", list(CASES))
def test_one_copy_assembly_gives_verls_batch(case, rope_3d):
    from dataflex_verl.legacy_stages import trained_groups

    stage_uids, trained, n = CASES[case]
    parts = [agent_loop_output(uids, seed, rope_3d=rope_3d) for seed, uids in enumerate(stage_uids)]
    want = verls_assembly(parts, trained)
    got, committed = trained_groups(parts, trained, n)
    assert_same_batch(got, want)
    groups = got.non_tensor_batch["uid"].reshape(-1, n)
    assert (groups == groups[:, :1]).all() and committed.tolist() == sorted(set(groups[:, 0].tolist()))
    # the copy is the batch's own: writing it leaves the stages' rollouts as they were
    before = parts[-1][0].batch["responses"].clone()
    got.batch["responses"].fill_(-1)
    assert torch.equal(parts[-1][0].batch["responses"], before)


def test_stages_whose_fields_differ_are_refused_naming_the_field():
    from dataflex_verl.legacy_stages import trained_groups

    first, uids = agent_loop_output([0, 0, 1, 1], 0)
    second, more = agent_loop_output([0, 0, 1, 1], 1)
    second.batch["rm_scores"] = second.batch["rm_scores"].double()
    with pytest.raises(RuntimeError, match=r"stage 1 .* field 'rm_scores' as \(4, 5\) torch.float64.*torch.float32"):
        trained_groups([(first, uids), (second, more)], [rows(0, 1, 2, 3), rows(0, 1, 2, 3)], 4)
    third, more = agent_loop_output([0, 0, 1, 1], 2)
    third.non_tensor_batch.pop("acc")
    with pytest.raises(RuntimeError, match=r"stage 1 .* every stage's rollouts must have the same fields"):
        trained_groups([(first, uids), (third, more)], [rows(0, 1, 2, 3), rows(0, 1, 2, 3)], 4)
    with pytest.raises(RuntimeError, match=r"keeps rows \[0, 9\] of a stage of 4 rows"):
        trained_groups([(first, uids)], [rows(0, 9)], 2)
