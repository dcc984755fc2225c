"""The staged-generation suite on hosts that break its promises: each break fails the test of that promise.

The host here is the seam's bookkeeping alone (no framework): a step of two stages, screening three prompts with
two rollouts each and topping the two admitted up to four, built as a correct host reports it; each break changes
one thing a broken host would get wrong.
"""

from __future__ import annotations

pytest_plugins = ["pytester"]

HOST = """
import pytest
import torch
from dataflex_conformance.host import StagedRows, StagedStep, StagedSuite
from dataflex_conformance.host.harness import HostHarness
from dataflex_core.session import HostCapabilities, LossWeights, SeamSupport, StagedGeneration
from dataflex_core.step.seams import StageRequests

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


class Bookkeeping(HostHarness):
    runs = 0

    def capabilities(self):
        return HostCapabilities(name="bookkeeping", seams={{LossWeights: SeamSupport(True),
                                                           StagedGeneration: SeamSupport(True)}})

    def staged_steps(self, block, steps, *, save_at=None):
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
    run(pytester, "none").assert_outcomes(passed=5)


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
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*FAILED*test_a_run_resumed_in_the_middle*"])
    result.stdout.fnmatch_lines(["*a run resumed after step 1: 3 steps, but should be 2*"])
