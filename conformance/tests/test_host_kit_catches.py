"""The rounds and counts suites fail a host that breaks their promises, each defect in the test that names it.

The hosts here are data, not frameworks: what a harness would report for a correct host, and for one defect each
(a split group, a short batch, an admitted prompt without signal, unseeded rounds, a prompt given one
rollout too few, a rollout outside the batch's groups, counts that are not the allocator's).
"""

from __future__ import annotations

pytest_plugins = ["pytester"]

HOSTS = """
import pytest
import torch

from dataflex_conformance.host import CountsStep, HostHarness, PromptCountsSuite, RoundsStep, GenerationRoundsSuite
from dataflex_conformance.host.components import favoured_counts
from dataflex_core import InvalidOutputError
from dataflex_core.session import GenerationRounds, HostCapabilities, PromptCounts, SeamSupport

DEFECT = "{defect}"


class Reported(HostHarness):
    def capabilities(self):
        return HostCapabilities(
            name="reported", seams={{GenerationRounds: SeamSupport(True), PromptCounts: SeamSupport(True)}}
        )

    def rounds(self, block, steps):
        if block["actuator"]["params"]["bound"] > 1 and block["filter"].get("on_short", "raise") == "raise":
            raise InvalidOutputError("admitted 0 of the 2 groups after 2 generation round(s) "
                                     "(dataflex.filter.max_rounds=2)")
        prompts = torch.tensor([1, 1, 3, 3])
        uids = ["a", "a", "b", "b"]
        if DEFECT == "split_group":
            uids = ["a", "c", "b", "b"]
        if DEFECT == "short_batch":
            prompts, uids = prompts[:2], uids[:2]
        if DEFECT == "even_prompt":
            prompts = torch.tensor([1, 1, 2, 2])
        if DEFECT == "unseeded":  # other prompts at every call
            type(self).calls = getattr(type(self), "calls", 0) + 1
            prompts = prompts + 4 * type(self).calls
        rounds = 2 if block["filter"].get("on_short") == "backfill" else 3
        return [RoundsStep(prompts, uids, 2, 2, rounds) for _ in range(steps)]

    def counts(self, block, steps):
        prompts = torch.tensor([4, 5, 6, 7])
        counts = favoured_counts(prompts % 2 == 0, 16, 2)
        uids = ["p4", "p5", "p6", "p7"]
        generated = [uid for uid, n in zip(uids, counts.tolist()) for _ in range(n)]
        if DEFECT == "one_too_few":
            generated = generated[1:]
        if DEFECT == "stray_rollout":
            generated = generated + ["elsewhere"]
        if DEFECT == "uniform_counts":
            counts = torch.full((4,), 4)
        return [CountsStep(prompts, uids, counts, 4, generated) for _ in range(steps)]


class TestReported(GenerationRoundsSuite, PromptCountsSuite):
    @pytest.fixture
    def host(self):
        return Reported()
"""


def run(pytester, defect):
    pytester.makepyfile(test_reported=HOSTS.format(defect=defect))
    return pytester.runpytest("-p", "no:cacheprovider", "-q")


def test_a_host_keeping_the_promises_passes(pytester):
    run(pytester, "none").assert_outcomes(passed=6)


def test_each_defect_fails_the_test_of_its_promise(pytester):
    cases = {
        "split_group": ["*test_every_trained_group_is_whole*", "*test_on_short_backfill*"],
        "short_batch": ["*test_every_trained_group_is_whole*", "*test_on_short_backfill*"],
        "even_prompt": ["*test_every_trained_group_is_whole*"],
        "unseeded": ["*test_the_same_seed_admits_the_same_prompts*"],
        "one_too_few": ["*test_each_prompt_got_exactly_its_count*"],
        "stray_rollout": ["*test_each_prompt_got_exactly_its_count*"],
        "uniform_counts": ["*test_the_budget_holds_and_each_prompt_gets_its_allocation*",
                           "*test_each_prompt_got_exactly_its_count*"],
    }  # fmt: skip
    for defect, failing in cases.items():
        result = run(pytester, defect)
        result.assert_outcomes(failed=len(failing), passed=6 - len(failing))
        result.stdout.fnmatch_lines([f"FAILED {line}" for line in failing], consecutive=False)
