"""The staged-generation suite on hosts that break its promises: each break fails the test of that promise.

The host here is the seam's bookkeeping alone (no framework): a step of two stages, screening three prompts with
two rollouts each and topping the two admitted up to four, built as a correct host reports it; each break changes
one thing a broken host would get wrong. The carry runs (Pilot-Commit's rounds) drive a real session's seam with
hand-made rows (every third prompt solved on each rollout, the others 0, 1, 0, 1).
"""

from __future__ import annotations

pytest_plugins = ["pytester"]

HOST = """
import pytest
import torch
from dataflex_conformance.host import StagedRows, StagedStep, StagedSuite
from dataflex_conformance.host.harness import HostHarness
from dataflex_core.session import HostCapabilities, LossWeights, SeamSupport, StagedGeneration
from dataflex_core.session import DataFlexSession, FieldSupport
from dataflex_core.step.seams import StageRequests
from dataflex_lab.testing.staged import run_staged_step, stage_rows

BREAK = "{brake}"
L = torch.long


def response(stage, uid, k, salt=0):
    return torch.tensor([stage, uid, k, salt])


def one_step(step, salt=0):
    ask1 = StageRequests(torch.tensor([5, 6, 7]), torch.tensor([2, 2, 2]), torch.tensor([0, 1, 2]))
    ask2 = StageRequests(torch.tensor([5, 6]), torch.tensor([2, 2]), torch.tensor([0, 1]))
    rows1 = [(u, k) for u in range(3) for k in range(2)]
    rows2 = [(u, k) for u in range(2) for k in range(2)]
    if BREAK == "short-stage":
        rows2 = rows2[:-1]
    prompt = {{0: 5, 1: 6, 2: 7}}
    gen = [
        StagedRows(torch.tensor([u for u, _ in rows], dtype=L), torch.tensor([prompt[u] for u, _ in rows], dtype=L),
                   torch.stack([response(s, u, k, salt + step) for u, k in rows]))
        for s, rows in ((1, rows1), (2, rows2))
    ]
    kept = [torch.arange(4), torch.arange(len(rows2))]
    pick = [(0, i) for i in range(4)] + [(1, i) for i in range(len(rows2))]
    if BREAK == "pilot-of-another-group":
        pick[0] = (0, 4)  # a row of uid 2 (not admitted) trained in uid 0's group
    trained = StagedRows(
        torch.tensor([int(gen[s].group[i]) for s, i in pick], dtype=L),
        torch.tensor([int(gen[s].prompt[i]) for s, i in pick], dtype=L),
        torch.stack([gen[s].response[i] for s, i in pick]),
    )
    generated = sum(len(g.group) for g in gen)
    metrics = {{"dataflex/compute/rollouts_generated": generated, "dataflex/compute/generation_rounds": 2,
               "dataflex/compute/rollouts_generated_total": generated * step}}
    return StagedStep([ask1, ask2], gen, kept, trained, 2, 4, metrics)


CAPABILITIES = HostCapabilities(
    name="bookkeeping", seams={{LossWeights: SeamSupport(True), StagedGeneration: SeamSupport(True)}},
    fields={{n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")}},
)


def reward_of(prompt, k):
    return 1.0 if prompt % 3 == 0 else float(k % 2)


def carry_steps(block, steps):
    # a real session's stages over hand-made rows: each stage's rows, the kept ones, the trained batch
    flex = DataFlexSession(block)
    flex.mount(CAPABILITIES, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    flex.seam(StagedGeneration).prepare(24, batch_size=2, seed=0)
    out = []
    for n in range(1, steps + 1):
        stages, metrics = run_staged_step(flex, n, reward_of, groups=2, rollout_n=4)
        gen = []
        for s, asked in enumerate(stages.requests):
            part = stage_rows(asked, reward_of)
            uid = torch.as_tensor(part.non_tensor_batch["uid"].astype("int64"))
            k = torch.cat([torch.arange(int(c)) for c in asked.counts])
            gen.append(StagedRows(uid, torch.as_tensor(part.non_tensor_batch["index"].astype("int64")),
                                  torch.stack([uid, k, torch.full_like(uid, s), torch.full_like(uid, n)], 1),
                                  part.batch["rm_scores"].sum(-1)))
        kept = [keep.clone() for keep in stages.trained()]
        requests = [*stages.requests]
        if BREAK == "carried-short":  # a carried group trained without its last rollout
            for s, asked in enumerate(requests):
                whole = (asked.counts == 4).nonzero().flatten()
                if len(whole):
                    last = (gen[s].group[kept[s]] == int(asked.uids[whole[0]])).nonzero().flatten()[-1]
                    kept[s] = torch.cat([kept[s][:last], kept[s][last + 1 :]])
                    break
        if BREAK == "split-calls":  # a host that splits a round's commits from its explorations
            requests, parts, keeps = [], [], []
            for asked, rows, keep in zip(stages.requests, gen, kept):
                for count in asked.counts.unique().tolist():
                    m = asked.counts == count
                    rows_m = torch.isin(rows.group, asked.uids[m])
                    requests.append(StageRequests(asked.prompts[m], asked.counts[m], asked.uids[m]))
                    parts.append(StagedRows(rows.group[rows_m], rows.prompt[rows_m], rows.response[rows_m],
                                            rows.reward[rows_m]))
                    keeps.append(torch.isin(rows_m.nonzero().flatten(), keep).nonzero().flatten())
            gen, kept = parts, keeps
        trained = StagedRows(*(torch.cat([getattr(r, f)[k] for r, k in zip(gen, kept)])
                               for f in ("group", "prompt", "response", "reward")))
        out.append(StagedStep(requests, gen, kept, trained, 2, 4, metrics))
    if BREAK == "rescreens-solved":  # the host's own pull screens a solved prompt again: its first pilot request
        solved = next(p for p in out[0].requests[0].prompts.tolist() if p % 3 == 0)
        asked = out[-1].requests[0]
        prompts = asked.prompts.clone()
        prompts[asked.counts == 2] = solved
        out[-1].requests[0] = StageRequests(prompts, asked.counts, asked.uids)
    return out


class Bookkeeping(HostHarness):
    runs = 0

    def capabilities(self):
        return CAPABILITIES

    def staged_steps(self, block, steps, *, save_at=None):
        if block["pilot"].get("carry"):
            return carry_steps(block, steps), None
        Bookkeeping.runs += 1
        salt = Bookkeeping.runs if BREAK == "unseeded" else 0
        return [one_step(n, salt) for n in range(1, steps + 1)], (None if save_at is None else "folder")

    def staged_resume(self, block, folder, steps):
        first = 1 if BREAK == "resume-restarts" else 2
        return [one_step(n) for n in range(first, steps + 1)]


class TestBookkeeping(StagedSuite):
    @pytest.fixture
    def host(self):
        return Bookkeeping()
"""


def run(pytester, brake):
    pytester.makepyfile(test_bookkeeping=HOST.format(brake=brake))
    return pytester.runpytest("-q", "-p", "no:cacheprovider", "-k", "not screening-only")


def test_a_correct_host_passes_every_promise(pytester):
    run(pytester, "none").assert_outcomes(passed=8)


def test_a_stage_that_generates_fewer_rollouts_than_asked_fails_the_requests_check(pytester):
    result = run(pytester, "short-stage")
    result.stdout.fnmatch_lines(["*FAILED*test_every_stage_generates_exactly_its_requests*"])
    result.stdout.fnmatch_lines(["*rollouts per uid {0: 2, 1: 1}, but should be {0: 2, 1: 2} [[]step 1 stage 2[]]*"])


def test_a_trained_group_holding_another_uids_rollout_fails_the_whole_group_check(pytester):
    result = run(pytester, "pilot-of-another-group")
    result.stdout.fnmatch_lines(["*FAILED*test_a_uids_rollouts_of_every_stage_train_as_one_whole_group*"])


def test_another_sample_on_the_same_seed_fails_the_determinism_check(pytester):
    result = run(pytester, "unseeded")
    result.stdout.fnmatch_lines(["*FAILED*test_the_same_seed_stages_generates_and_trains_the_same*"])
    result.stdout.fnmatch_lines(["*run with the same seed, step 1: another batch trained*"])


def test_a_resume_that_starts_over_fails_the_round_trip_check(pytester):
    result = run(pytester, "resume-restarts")
    result.assert_outcomes(passed=7, failed=1)
    result.stdout.fnmatch_lines(["*FAILED*test_a_run_resumed_in_the_middle*"])
    result.stdout.fnmatch_lines(["*a run resumed after step 1: 3 steps, but should be 2*"])


def test_a_carried_group_trained_short_fails_the_carry_check(pytester):
    result = run(pytester, "carried-short")
    result.assert_outcomes(passed=7, failed=1)
    result.stdout.fnmatch_lines(["*FAILED*test_a_carried_prompt_trains_as_a_fresh_whole_group_before*"])
    result.stdout.fnmatch_lines(["*trained 3 rows, not a fresh group of 4*"])


def test_a_round_split_into_two_calls_on_a_host_of_mixed_counts_fails_the_one_call_check(pytester):
    result = run(pytester, "split-calls")
    result.stdout.fnmatch_lines(["*FAILED*test_with_carry_each_round_is_one_generation_call_where_the_host_can*"])
    result.stdout.fnmatch_lines(["*a host of mixed counts makes one call a round*"])


def test_a_solved_prompt_screened_again_fails_the_eviction_check(pytester):
    result = run(pytester, "rescreens-solved")
    result.stdout.fnmatch_lines(["*FAILED*test_a_prompt_solved_on_every_pilot_is_never_screened_again*"])
    result.stdout.fnmatch_lines(["*solved on every pilot at (step, stage) (1, *was screened again*"])
