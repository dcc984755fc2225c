"""The staged-generation suite: what a host of the :class:`~dataflex_core.step.seams.StagedGeneration` seam owes a
user of ``mechanism: pilot`` (and any mechanism that generates a step in stages).

The harness runs steps of the framework with a pilot block of the kit's own components
(:meth:`~dataflex_conformance.host.HostHarness.staged_steps`) and reports, per step, what each stage asked for,
what the framework generated and handed back, what the seam said to train, and what the framework trained.
Promises:

- **requests honoured**: every stage generates exactly ``counts[i]`` rollouts of dataset row ``prompts[i]``
  under ``uids[i]``, nothing else;
- **groups whole across stages**: the rollouts of one uid from every stage are one trained group (the rows the
  seam kept, no other, none twice), of one prompt;
- **the batch full**: ``groups`` groups of ``rollout_n`` rollouts each, every generated rollout counted in the
  ``dataflex/compute/*`` totals;
- **determinism given the seed**: two runs stage, generate and train the same;
- **state round trip**: a run resumed from a checkpoint in the middle repeats the steps after it.

The scorer and selector (``hostkit_group_spread``, ``hostkit_spread_band``) are registered when this module is
imported, so a host needs no plugin installed.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from dataflex_core import (
    Scorer,
    Selector,
    actuator_scores,
    group_index,
    register_scorer,
    register_selector,
    segment_var,
    valid_sample_mask,
)
from dataflex_core.step.seams import StagedGeneration

from .harness import HostHarness, StagedRows, StagedStep
from .suite import SeamSuite

#: Steps of each staged run, and the step after which the resumed run's checkpoint is written.
STEPS, SAVE_AT = 3, 1
COMPUTE = "dataflex/compute/"


@register_scorer("hostkit_group_spread")
class GroupSpread(Scorer):
    """post_reward: each group's variance of its rows' summed ``rm_scores`` (valid rows only; padding scores 0)."""

    requires = ["rm_scores", "response_mask"]
    timing = "post_reward"
    granularity = "prompt"
    needs_groups = True

    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"].bool()
        reward = torch.where(mask, batch.batch["rm_scores"].double(), torch.zeros((), dtype=torch.float64)).sum(-1)
        valid = valid_sample_mask(batch).to(reward.device)
        index, groups = group_index(batch.non_tensor_batch["uid"], reward.device)
        return torch.where(valid, segment_var(reward, index, groups, valid)[index], 0.0).to(torch.float32)


@register_selector("hostkit_spread_band")
class SpreadBand(Selector):
    """Keeps the valid rows scoring above ``low``: on a group scorer's scores, whole groups (it admits groups)."""

    admits_groups = True

    def __init__(self, low: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.low = float(low)

    def act(self, scores, batch, **ctx):
        values, valid = actuator_scores(scores, batch, owner=self.describe(), granularity="sample", dtype=torch.float64)
        return valid & (values > self.low)


def pilot_block(keep: bool = True, *, low: float = 1.0e-6, rollouts: int = 2) -> dict[str, Any]:
    """A ``mechanism: pilot`` block of the kit's components; a short step is backfilled, so every step trains."""
    return {
        "mechanism": "pilot",
        "scorer": {"name": "hostkit_group_spread"},
        "actuator": {"name": "hostkit_spread_band", "params": {"low": low}},
        "pilot": {"prompts": 2, "rollouts": rollouts, "keep": keep, "max_stages": 3, "on_short": "backfill"},
    }


def _rows_multiset(rows: StagedRows, where: torch.Tensor | None = None) -> list[tuple]:
    """The rows (prompt, response) as a sorted list: equal lists are the same rows whatever their order."""
    pick = torch.arange(len(rows.group)) if where is None else where
    return sorted((int(rows.prompt[i]), *rows.response[i].flatten().tolist()) for i in pick.tolist())


def _kept_groups(step: StagedStep) -> dict[int, list[tuple]]:
    """Per stage uid, the rows every stage kept of it, as a multiset."""
    out: dict[int, list[tuple]] = {}
    for rows, keep in zip(step.generated, step.kept):
        for i in keep.tolist():
            out.setdefault(int(rows.group[i]), []).append((int(rows.prompt[i]), *rows.response[i].flatten().tolist()))
    return {uid: sorted(rows) for uid, rows in out.items()}


def _same_steps(got: list[StagedStep], want: list[StagedStep], what: str, first: int = 1) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} steps, but should be {len(want)}"
    for n, (a, b) in enumerate(zip(got, want), start=first):
        assert len(a.requests) == len(b.requests), f"{what}, step {n}: {len(a.requests)} stages, not {len(b.requests)}"
        for s, (x, y) in enumerate(zip(a.requests, b.requests), start=1):
            same = all(torch.equal(getattr(x, k), getattr(y, k)) for k in ("prompts", "counts", "uids"))
            assert same, f"{what}, step {n} stage {s}: requests {x} differ from {y}"
        assert _rows_multiset(a.trained) == _rows_multiset(b.trained), f"{what}, step {n}: another batch trained"


class StagedSuite(SeamSuite):
    """The staged-generation seam: :meth:`~dataflex_conformance.host.HostHarness.staged_steps` over the framework."""

    seam = StagedGeneration

    @pytest.fixture
    def staged(self, host: HostHarness) -> list[StagedStep]:
        steps, _ = host.staged_steps(pilot_block(), STEPS)
        assert len(steps) == STEPS, f"{type(host).__name__}.staged_steps gave {len(steps)} steps, not {STEPS}"
        return steps

    def test_every_stage_generates_exactly_its_requests(self, staged):
        for n, step in enumerate(staged, start=1):
            assert len(step.requests) == len(step.generated) >= 1, (len(step.requests), len(step.generated))
            for s, (asked, rows) in enumerate(zip(step.requests, step.generated), start=1):
                where = f"[step {n} stage {s}]"
                want = dict(zip(asked.uids.tolist(), asked.counts.tolist()))
                uids, counts = rows.group.unique(return_counts=True)
                got = dict(zip(uids.tolist(), counts.tolist()))
                asked_for = {u: c for u, c in want.items() if c > 0}
                assert got == asked_for, f"rollouts per uid {got}, but should be {asked_for} {where}"
                prompt_of = dict(zip(asked.uids.tolist(), asked.prompts.tolist()))
                wrong = [i for i in range(len(rows.group)) if int(rows.prompt[i]) != prompt_of[int(rows.group[i])]]
                assert not wrong, f"rows {wrong[:3]} carry other prompts than their uid's request {where}"

    @pytest.mark.parametrize("keep", [True, False], ids=["pilots-kept", "screening-only"])
    def test_a_uids_rollouts_of_every_stage_train_as_one_whole_group(self, host, keep):
        steps, _ = host.staged_steps(pilot_block(keep), 2)
        for n, step in enumerate(steps, start=1):
            prompts: dict[int, int] = {}
            for asked in step.requests:  # a uid asked for again keeps its prompt
                for uid, prompt in zip(asked.uids.tolist(), asked.prompts.tolist()):
                    assert prompts.setdefault(uid, prompt) == prompt, f"uid {uid} changed prompt [step {n}]"
            kept = _kept_groups(step)
            trained = [_rows_multiset(step.trained, (step.trained.group == g).nonzero().flatten())
                       for g in step.trained.group.unique().tolist()]  # fmt: skip
            assert sorted(trained) == sorted(kept.values()), (
                f"the trained groups are not the rows the seam kept, uid by uid [step {n}, keep={keep}]"
            )
            for group in trained:
                assert len({row[0] for row in group}) == 1, f"a trained group mixes prompts [step {n}]"
            if not keep:  # screening only: no stage that screened a prompt trains its rows
                screened_rows = [len(k) for k, a in zip(step.kept, step.requests) if a is not step.requests[-1]]
                assert sum(screened_rows) == 0, f"screening rows trained with keep=false [step {n}]"

    def test_the_trained_batch_is_full_and_every_rollout_is_counted(self, staged):
        total = 0
        for n, step in enumerate(staged, start=1):
            groups, sizes = step.trained.group.unique(return_counts=True)
            assert len(groups) == step.groups, f"{len(groups)} trained groups, but should be {step.groups} [step {n}]"
            assert sizes.tolist() == [step.rollout_n] * step.groups, (
                f"trained group sizes {sizes.tolist()}, but should be {step.rollout_n} each [step {n}]"
            )
            generated = sum(len(rows.group) for rows in step.generated)
            total += generated
            assert step.metrics.get(f"{COMPUTE}rollouts_generated") == generated, (
                f"{COMPUTE}rollouts_generated={step.metrics.get(f'{COMPUTE}rollouts_generated')}, but the stages "
                f"generated {generated} rollouts [step {n}]"
            )
            assert step.metrics.get(f"{COMPUTE}generation_rounds") == len(step.requests), f"stages [step {n}]"
        assert staged[-1].metrics.get(f"{COMPUTE}rollouts_generated_total") == total

    def test_the_same_seed_stages_generates_and_trains_the_same(self, host, staged):
        again, _ = host.staged_steps(pilot_block(), STEPS)
        _same_steps(again, staged, "a second run with the same seed")

    def test_a_run_resumed_in_the_middle_repeats_the_steps_after_its_checkpoint(self, host):
        full, folder = host.staged_steps(pilot_block(), STEPS, save_at=SAVE_AT)
        assert folder is not None, f"{type(host).__name__}.staged_steps(save_at={SAVE_AT}) returned no checkpoint"
        resumed = host.staged_resume(pilot_block(), folder, STEPS)
        _same_steps(resumed, full[SAVE_AT:], f"a run resumed after step {SAVE_AT}", first=SAVE_AT + 1)
        got = resumed[-1].metrics.get(f"{COMPUTE}rollouts_generated_total")
        assert got == full[-1].metrics.get(f"{COMPUTE}rollouts_generated_total"), "the compute totals did not resume"
