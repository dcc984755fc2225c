"""``mechanism: allocate`` in verl's own V1 fit loop: verl generates exactly the rollouts the allocator gave each
prompt (through its agent loop's per-prompt ``__rollout_n__``), the budget holds, and the ledger counts them.

The allocator is a test one (fit_components.py): of a step's 8 prompts, the 4 with the smaller ids get
``n_min = 2`` rollouts and the other 4 share the rest of the budget (8 x rollout.n = 32): 6 each, where
verl's own run gives every prompt 4.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from dataflex_core.ledger import PromptIds, PromptLedger
from dataflex_core.step.state import CHECKPOINT_STATE
from dataflex_lab.verl.cpu_loop.runner import RunSpec

pytestmark = pytest.mark.fit

PROMPTS, SAMPLES, STEPS = 8, 4, 2
BLOCK = {
    "mechanism": "allocate",
    "prompt_key": "index",
    "scorer": {"name": "solve_rate_posterior", "params": {}},
    "actuator": {"name": "fittest_ranked", "params": {}},
}


def _group_sizes(dump, step: int) -> Counter:
    """Rollouts per prompt group in the batch verl trained on at ``step`` (its dump keys: ``uid_session_index``)."""
    keys = [json.loads(line)["uid"] for line in (dump / f"{step}.jsonl").read_text().splitlines()]
    return Counter(key.rsplit("_", 2)[0] for key in keys)


def test_verl_generates_the_allocated_rollouts_of_each_prompt_under_the_budget(fits):
    dump = fits.root / "allocate_rollouts"
    spec = RunSpec(
        trainer_mode="dataflex_sync", dataflex=BLOCK, steps=STEPS, samples_per_prompt=SAMPLES, save_freq=STEPS
    )
    spec.extra = [f"trainer.rollout_data_dir={dump}"]
    run = fits.run("allocate", spec)
    assert [r["step"] for r in run.steps] == [1, 2]
    given = run.records("ranked")
    assert [g["step"] for g in given] == [1, 2]
    budget = PROMPTS * SAMPLES
    for step, record in zip((1, 2), given):
        counts = record["counts"]
        assert sorted(counts.values()) == [2] * 4 + [6] * 4 and sum(counts.values()) == budget
        # verl generated and trained on groups of exactly those sizes, and nothing else
        sizes = _group_sizes(dump, step)
        assert sorted(sizes.values()) == sorted(counts.values())
        metrics = run.steps[step - 1]["metrics"]
        # the step matched every group verl handed it (by uid) with the count the allocator gave its prompt
        assert metrics["dataflex/allocate/mismatched_groups"] == 0.0
        assert metrics["dataflex/allocate/unallocated_groups"] == 0.0
        assert metrics["dataflex/allocate/groups"] == PROMPTS
        assert metrics["dataflex/allocate/budget"] == budget and metrics["dataflex/allocate/rollouts"] == budget
        assert metrics["dataflex/allocate/n_min"] == 2 and metrics["dataflex/allocate/n_max"] == 6
        assert metrics["dataflex/allocate/prompts_at_n_min"] == 4
        assert metrics["dataflex/compute/rollouts_generated"] == budget
    # the ledger (checkpointed and exported) counts each prompt's rollouts as the allocator gave them
    total = Counter()
    for record in given:
        total.update({int(k): v for k, v in record["counts"].items()})
    folder = run.checkpoints / f"global_step_{STEPS}"
    state = torch.load(folder / CHECKPOINT_STATE, weights_only=True)["components"]["ledger"]["state"]
    assert int(torch.as_tensor(state["rollouts"]).sum()) == STEPS * budget
    ledger = PromptLedger(PromptIds(PromptIds.from_state(state), state["prompt_key"]))
    ledger.load(folder)  # a warm start reads the checkpoint folder's ledger
    ids = ledger.ids.values.tolist()
    generated = {int(ids[r]): int(ledger.rollouts[r]) for r in range(len(ids)) if ledger.times_sampled[r]}
    assert generated == dict(total)
