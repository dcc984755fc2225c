"""Expected failures match by check, component or full id; blocked checks never certify."""

from __future__ import annotations

import pytest
from meta_broken import MeanNotOneReweighter, WrongDeviceReweighter
from meta_good import MeanAbsAdvantage

from dataflex_conformance import EXPECTED_FAILURE, FAILED, PASSED, Subject, certify_subjects, check_calls
from dataflex_conformance.runner import xfail_keys


def test_an_expected_failure_key_may_name_the_check_the_component_the_pairing_or_the_call():
    call = next(
        c
        for c in check_calls([MeanNotOneReweighter, MeanAbsAdvantage], device="cpu")
        if c.check_name == "check_mean_one" and c.subject.id == "broken_mean_not_one@good_mean_abs_advantage"
    )
    assert xfail_keys(call) == [
        f"broken_mean_not_one@good_mean_abs_advantage-check_mean_one[cpu-{call.case.label}]",
        "broken_mean_not_one@good_mean_abs_advantage-check_mean_one",
        "broken_mean_not_one-check_mean_one",
        "check_mean_one",
    ]


def test_a_pairing_specific_expected_failure_leaves_the_other_pairings_failing():
    report = certify_subjects(
        [Subject.from_component(MeanNotOneReweighter), Subject.from_component(MeanAbsAdvantage)],
        device="cpu",
        expected_failures={"broken_mean_not_one@sample_scores-check_mean_one": "synthetic scores only"},
    )
    statuses = {(r.subject, r.status) for r in report.results if r.check == "check_mean_one" and r.case == "bs=8"}
    assert ("broken_mean_not_one@sample_scores", EXPECTED_FAILURE) in statuses
    assert ("broken_mean_not_one@good_mean_abs_advantage", FAILED) in statuses
    assert not report.ok


def test_blocked_checks_keep_a_component_uncertified_even_when_its_root_failure_is_expected():
    report = certify_subjects(
        [Subject.from_component(WrongDeviceReweighter)],
        device="cpu",
        expected_failures={"check_output_device": "moves weights to meta on purpose"},
    )
    assert all(r.status in (EXPECTED_FAILURE, PASSED, "blocked") for r in report.results)
    assert any(r.status == "blocked" for r in report.results)
    assert not report.ok and report.to_json()["components"][0]["certified_devices"] == []


def test_an_installed_name_that_does_not_exist_lists_what_is_installed():
    with pytest.raises(ValueError, match="component 'no_such_scorer' is not installed; installed components:"):
        check_calls(["no_such_scorer"], device="cpu")
