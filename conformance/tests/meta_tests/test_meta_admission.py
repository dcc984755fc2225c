"""The admission checks: a whole-group selector is certified, each broken one fails exactly its check."""

from __future__ import annotations

import pytest
from meta_admission import BROKEN_ADMISSION, GoodBand, RowLengthGroupScorer

from dataflex_conformance import FAILED, PASSED, Subject, certify_subjects
from dataflex_conformance.runner import BLOCKED
from dataflex_conformance.suite import ADMISSION_CASES

ADMISSION = {
    "check_admits_whole_groups",
    "check_no_group_without_valid_row_admitted",
    "check_admission_state_round_trip",
}


def test_a_whole_group_selector_passes_the_admission_checks():
    report = certify_subjects([Subject.from_component(GoodBand)], device="cpu")
    bad = [r for r in report.results if r.status != PASSED]
    assert not bad, [r.message for r in bad[:5]]
    ran = {(r.check, r.case) for r in report.results}
    assert {(check, case.label) for check in ADMISSION for case in ADMISSION_CASES} <= ran


def test_a_selector_without_the_declaration_is_not_certified_for_admission():
    class Undeclared(GoodBand):
        name = "undeclared_band"
        admits_groups = False

    report = certify_subjects([Subject.from_component(Undeclared)], device="cpu")
    assert not {r.check for r in report.results} & ADMISSION


@pytest.mark.parametrize("component, check", list(BROKEN_ADMISSION.items()), ids=[c.name for c in BROKEN_ADMISSION])
def test_a_broken_admission_selector_fails_exactly_its_check(component, check):
    report = certify_subjects([Subject.from_component(component)], device="cpu")
    failed = {r.check for r in report.results if r.status == FAILED}
    assert failed == {check}, [r.message for r in report.results if r.status == FAILED][:3]


def test_a_group_scorer_that_splits_its_groups_is_blamed_not_the_selector_it_feeds():
    scorer = Subject.from_component(RowLengthGroupScorer)
    report = certify_subjects([Subject.from_component(GoodBand), scorer], device="cpu")
    fed = [r for r in report.results if r.check in ADMISSION and "@broken_uneven_group_scorer" in r.subject]
    assert fed, sorted({r.subject for r in report.results})
    assert FAILED not in {r.status for r in fed}, [r.message for r in fed if r.status == FAILED][:3]
    blocked = [r for r in fed if r.status == BLOCKED]  # cases whose groups' responses differ in length
    assert len(blocked) >= len(ADMISSION), [(r.check, r.case, r.status) for r in fed]
    assert {r.culprit for r in blocked} == {"broken_uneven_group_scorer"}
    assert "unequal scores within" in blocked[0].message
    on_synthetic = [
        r for r in report.results if r.check in ADMISSION and r.subject == "good_admission_band@sample_scores"
    ]
    assert on_synthetic and {r.status for r in on_synthetic} == {PASSED}
