"""``parametrize_with_checks``: readable ids, caller-declared expected failures, custom-field fixture."""

from __future__ import annotations

from meta_broken import MeanNotOneReweighter
from meta_good import MeanAbsAdvantage

from dataflex_conformance import check_calls

pytest_plugins = ["pytester"]

MODULE = """
from meta_good import MeanAbsAdvantage
from meta_broken import MeanNotOneReweighter
from dataflex_conformance import parametrize_with_checks

@parametrize_with_checks([MeanAbsAdvantage, MeanNotOneReweighter], device="cpu", expected_failures=XFAIL)
def test_conformance(dataflex_check, dataflex_fields):
    dataflex_check(fields=dataflex_fields)
"""


def _mean_one_calls() -> tuple[int, int]:
    """(mean-one calls that can fail, all calls); all-empty batches have no unit to average."""
    calls = check_calls([MeanAbsAdvantage, MeanNotOneReweighter], device="cpu")
    failing = sum(1 for c in calls if c.check_name == "check_mean_one" and c.case.label != "all_empty")
    return failing, len(calls)


def test_ids_read_component_check_device_and_case(pytester):
    pytester.makepyfile(test_ids=MODULE.replace("XFAIL", "None"))
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "test_conformance[good_mean_abs_advantage-check_output_shape[cpu-bs=1]]" in out
    assert "test_conformance[broken_mean_not_one@good_mean_abs_advantage-check_mean_one[cpu-empty_rows]]" in out
    assert "test_conformance[broken_mean_not_one@sample_scores-check_mean_one[cpu-scores=huge]]" in out


def test_failures_are_reported_with_the_message_pattern(pytester):
    pytester.makepyfile(test_fail=MODULE.replace("XFAIL", "None"))
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-k", "check_mean_one")
    mean_one, _ = _mean_one_calls()
    result.assert_outcomes(failed=mean_one, passed=3)  # the 3 all-empty batches have no unit to average
    result.stdout.fnmatch_lines(
        ["*weights mean=1.031 over 7 valid samples, expected 1 ± 1e-4 [[]broken_mean_not_one()*"]
    )


def test_expected_failures_declared_by_the_caller_become_xfail(pytester):
    xfail = '{"broken_mean_not_one-check_mean_one": "scales every weight by 1.031 on purpose"}'
    pytester.makepyfile(test_xfail=MODULE.replace("XFAIL", xfail))
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-rx")
    mean_one, total = _mean_one_calls()
    # Non-strict: the all-empty cases pass and show as xpassed, never as failures.
    result.assert_outcomes(passed=total - mean_one - 3, xfailed=mean_one, xpassed=3)
    result.stdout.fnmatch_lines(["*scales every weight by 1.031 on purpose*"])


def test_an_expected_failure_naming_no_check_is_a_collection_error(pytester):
    pytester.makepyfile(test_typo=MODULE.replace("XFAIL", '{"check_mean_on": "typo"}'))
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*ValueError: expected_failures key(s) [[]'check_mean_on'[]] match no check*"])
    assert result.ret != 0


def test_dataflex_fields_fixture_supplies_custom_fields(pytester):
    pytester.makeconftest(
        """
import pytest

@pytest.fixture
def dataflex_fields():
    return {"novelty": lambda ctx: ctx.rand(ctx.bs, ctx.length)}
"""
    )
    pytester.makepyfile(
        test_custom="""
import torch
from dataflex_core import Scorer, masked_seq_mean
from dataflex_conformance import parametrize_with_checks

class Novelty(Scorer):
    name = "novelty_mean"
    requires = ["novelty"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        return masked_seq_mean(batch.batch["novelty"].float(), batch.batch["response_mask"])

@parametrize_with_checks([Novelty], device="cpu", fields={"novelty": lambda ctx: ctx.rand(ctx.bs, ctx.length)})
def test_conformance(dataflex_check, dataflex_fields):
    dataflex_check(fields=dataflex_fields)
"""
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 50 and "failed" not in outcomes
