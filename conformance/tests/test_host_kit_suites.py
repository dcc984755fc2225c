"""The host kit runs a suite on a host that declares its seam and skips it, with the host's reason, elsewhere."""

from __future__ import annotations

pytest_plugins = ["pytester"]

SUITE = """
import pytest
from dataflex_conformance.host import HostHarness, HostSuite, SeamSuite
from dataflex_core.session import HostCapabilities, LossWeights, SeamSupport, TrainSampler


class SamplerSuite(SeamSuite):
    seam = TrainSampler

    def test_drawn_prompts_follow_the_sampler(self, host):
        raise AssertionError("ran on a host without the seam")


class RecomputeSuite(SeamSuite):
    needs = ("recomputes no advantages (HostCapabilities.recompute_advantage)", lambda c: c.recompute_advantage)

    def test_kept_rows_get_new_advantages(self, host):
        raise AssertionError("ran on a host that cannot recompute")


class Walker(HostHarness):
    def capabilities(self):
        return HostCapabilities(
            name="walker", seams={LossWeights: SeamSupport(True), TrainSampler: SeamSupport(False, "walks in order")}
        )


class TestWalker(SamplerSuite, RecomputeSuite):
    @pytest.fixture
    def host(self):
        return Walker()

    def test_the_hosts_own(self, host):
        pass


def test_every_suite_is_in_the_host_suite():
    assert {c.__name__ for c in HostSuite.__mro__ if issubclass(c, SeamSuite)} >= {
        "ReweightSuite", "SelectSuite", "RecomputeSuite", "HardDropSuite", "ResamplingSuite",
        "GenerationRoundsSuite", "PromptCountsSuite",
    }
"""


def test_a_suite_whose_seam_the_host_lacks_skips_with_the_hosts_reason(pytester):
    pytester.makepyfile(test_walker=SUITE)
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["*walker does not provide the train_sampler seam: walks in order*"])
    result.stdout.fnmatch_lines(["*walker: recomputes no advantages (HostCapabilities.recompute_advantage)*"])
