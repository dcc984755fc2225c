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
- **state round trip**: a run resumed from a checkpoint in the middle repeats the steps after it;
- with Pilot-Commit's rounds (``pilot.carry``, :func:`carry_block`; each row's ``reward`` read):
  **one generation call a round** on a host of mixed counts (commits and explorations together), one count a call
  on a host that declared it cannot; **a carried prompt** (admitted on an earlier step, beyond its batch) trains as a
  fresh whole group before the buffer evicts it by age (at a step's end, once ``step - explored > max_off_steps``:
  the paper's flush), and the buffer's metrics equal a reference kept from the rows
  generated; **a prompt solved on every pilot is never screened again** (``evict_solved``), the host's own pull
  included.

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


#: The carry runs: steps, and the steps a buffered prompt may wait after the step that explored it.
CARRY_STEPS, MAX_OFF_STEPS = 4, 1
PILOT = "dataflex/pilot/"


def carry_block(*, evict_solved: bool = False) -> dict[str, Any]:
    """Pilot-Commit's rounds on the kit's components: each round explores 3x the batch with 2 pilots and commits
    buffered prompts; admitted prompts beyond the batch wait ``MAX_OFF_STEPS`` steps; after 4 rounds, backfill."""
    block = pilot_block()
    block["pilot"] = {
        "prompts": 3, "rollouts": 2, "keep": True, "carry": {"max_off_steps": MAX_OFF_STEPS, "order": "std"},
        "max_rounds": 4, "on_short": "backfill", "evict_solved": evict_solved,
    }  # fmt: skip
    return block


def _rewards(rows: StagedRows, where: str) -> torch.Tensor:
    if rows.reward is None:
        pytest.fail(f"StagedRows.reward is None {where}: the carry and eviction tests read each row's reward")
    return rows.reward.double().flatten()


def _step_uids(step: StagedStep, pilots: int) -> dict[int, dict[str, Any]]:
    """Per uid of the step: its prompt, the stage it was first asked in, ``explored`` (its first request was a
    pilot) or carried (a whole group asked at once), and its first stage's rewards."""
    assert step.rollout_n != pilots, f"the carry runs need rollout_n ({step.rollout_n}) above the {pilots} pilots"
    out: dict[int, dict[str, Any]] = {}
    for s, (asked, rows) in enumerate(zip(step.requests, step.generated)):
        for uid, prompt, count in zip(asked.uids.tolist(), asked.prompts.tolist(), asked.counts.tolist()):
            if uid not in out:
                rewards = _rewards(rows, f"[stage {s + 1}]")[rows.group == uid]
                out[uid] = {"prompt": prompt, "stage": s, "explored": count == pilots, "rewards": rewards}
    return out


def _trained_rows(step: StagedStep) -> dict[int, int]:
    """Per uid, how many of its rows the step trained."""
    out: dict[int, int] = {}
    for rows, keep in zip(step.generated, step.kept):
        for uid in rows.group[keep].tolist():
            out[uid] = out.get(uid, 0) + 1
    return out


def _admitted(rewards: torch.Tensor, low: float = 1.0e-6) -> bool:
    """The kit's selector on its scorer: a prompt's pilot rewards spread (variance above ``low``)."""
    rewards = rewards[~rewards.isnan()]  # rows outside the loss (empty responses) are not scored
    return len(rewards) > 1 and float(rewards.var(unbiased=False)) > low


def _solved(rewards: torch.Tensor) -> bool:
    """Solved on every pilot: each scored pilot's reward at least 1 (core's rule without ``success_threshold``)."""
    rewards = rewards[~rewards.isnan()]
    return len(rewards) > 0 and bool((rewards >= 1.0).all())


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

    # -- Pilot-Commit's parts: a round in one call, the survivor buffer, eviction of solved prompts ----------------
    def test_with_carry_each_round_is_one_generation_call_where_the_host_can(self, host):
        steps, _ = host.staged_steps(carry_block(), CARRY_STEPS)
        mixed = host.capabilities().support(StagedGeneration).mixed_counts
        both = 0
        for n, step in enumerate(steps, start=1):
            rounds = step.metrics.get(f"{PILOT}rounds")
            assert rounds is not None, f"the step's metrics hold no {PILOT}rounds [step {n}]"
            counts = [sorted(set(asked.counts.tolist())) for asked in step.requests]
            if mixed:  # a backfill after the last round is one more call
                calls = int(rounds) + (1 if step.metrics.get(f"{PILOT}backfilled_prompts", 0) else 0)
                assert len(step.requests) == calls, (
                    f"{len(step.requests)} generation calls for {int(rounds)} rounds: a host of mixed counts makes one "
                    f"call a round, commits and explorations together (counts per call {counts}) [step {n}]"
                )
                both += sum(len(c) > 1 for c in counts)
            else:
                assert all(len(c) == 1 for c in counts), (
                    f"calls asked for counts {counts}, but the host declared one rollout count per call [step {n}]"
                )
        if mixed:
            assert both, "no round both committed and explored in one call: the kit's data should admit some prompts"

    def test_a_carried_prompt_trains_as_a_fresh_whole_group_before_its_age_evicts_it(self, host):
        steps, _ = host.staged_steps(carry_block(), CARRY_STEPS)
        buffer: dict[int, int] = {}  # the reference: prompt -> the step it was explored and admitted at
        carried_in_run = 0
        for n, step in enumerate(steps, start=1):
            uids, trained = _step_uids(step, pilots=2), _trained_rows(step)
            carried = {uid: e for uid, e in uids.items() if not e["explored"]}
            for uid, entry in carried.items():
                prompt = entry["prompt"]
                assert prompt in buffer, (
                    f"prompt {prompt} was committed as a carried group, but no earlier step admitted it into a "
                    f"buffer it still waits in (buffer {sorted(buffer)}) [step {n}]"
                )
                age = n - buffer.pop(prompt)  # the paper's flush at a step's end: step - explored > max_off_steps
                assert age <= MAX_OFF_STEPS + 1, (
                    f"prompt {prompt}, explored {age} steps before, waited past max_off_steps={MAX_OFF_STEPS} step "
                    f"ends [step {n}]"
                )
                assert trained.get(uid) == step.rollout_n, (
                    f"carried prompt {prompt} trained {trained.get(uid, 0)} rows, not a fresh group of "
                    f"{step.rollout_n} [step {n}]"
                )
            for uid, entry in uids.items():  # admitted: waits (explored now), or committed now and leaves
                if entry["explored"] and _admitted(entry["rewards"]):
                    if uid in trained:
                        buffer.pop(entry["prompt"], None)
                    else:
                        buffer[entry["prompt"]] = n
            old = [prompt for prompt, at in buffer.items() if n - at > MAX_OFF_STEPS]
            for prompt in old:
                del buffer[prompt]
            got = {k: step.metrics.get(f"{PILOT}{k}") for k in ("carried_prompts", "buffer_prompts",
                                                              "buffer_evicted_prompts")}  # fmt: skip
            want = {"carried_prompts": len(carried), "buffer_prompts": len(buffer), "buffer_evicted_prompts": len(old)}
            assert got == want, f"the buffer's metrics {got}, but the rows generated give {want} [step {n}]"
            carried_in_run += len(carried)
        assert carried_in_run, "no prompt was carried: the kit's data should admit more prompts than a round commits"

    def test_a_prompt_solved_on_every_pilot_is_never_screened_again(self, host):
        steps, _ = host.staged_steps(carry_block(evict_solved=True), CARRY_STEPS)
        solved: dict[int, tuple[int, int]] = {}  # prompt -> (step, stage) where every pilot solved it
        evicted = 0
        for n, step in enumerate(steps, start=1):
            uids = _step_uids(step, pilots=2)
            for s in range(len(step.requests)):
                explored = [e for e in uids.values() if e["explored"] and e["stage"] == s]
                for entry in explored:
                    assert entry["prompt"] not in solved, (
                        f"prompt {entry['prompt']}, solved on every pilot at (step, stage) {solved[entry['prompt']]}, "
                        f"was screened again [step {n} stage {s + 1}]"
                    )
                for entry in explored:
                    if _solved(entry["rewards"]):
                        solved[entry["prompt"]] = (n, s + 1)
            evicted += int(step.metrics.get(f"{PILOT}solved_evicted_prompts", 0))
        assert solved, "no prompt was solved on every pilot (reward >= 1 each): the kit's data should hold some"
        assert evicted == len(solved), f"{evicted} prompts counted evicted, but {len(solved)} were solved"
