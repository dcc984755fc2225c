"""Correct components pass every check the suite has for their kind."""

from __future__ import annotations

from meta_good import GOOD

from dataflex_conformance import CHECKS, PASSED, Subject, certify_subjects, checks_admission

#: The admission checks run on selectors that declare admits_groups only.
ADMISSION = {name for name in dir(checks_admission) if name.startswith("check_")}


def test_good_components_are_certified_with_every_check_of_their_kind():
    report = certify_subjects([Subject.from_component(c) for c in GOOD], device="cpu")
    bad = [r for r in report.results if r.status != PASSED]
    assert not bad, [r.message for r in bad[:5]]
    assert report.ok and report.devices == ["cpu"]
    for component in report.to_json()["components"]:
        assert component["certified_devices"] == ["cpu"], component["id"]
        ran = {c["check"] for c in component["checks"]}
        declared = {c.name for c in CHECKS[component["kind"]]}
        optional = {"check_rejects_out_of_range", "check_scores_in_declared_range", *ADMISSION}
        assert declared - optional <= ran, (component["id"], declared - ran)


def test_reweighter_is_paired_with_installed_scorers_of_accepted_granularity_and_synthetic_scores():
    from meta_good import MeanAbsAdvantage, Softmax, TokenProb

    report = certify_subjects([Subject.from_component(c) for c in (Softmax, MeanAbsAdvantage, TokenProb)], device="cpu")
    subjects = {r.subject for r in report.results if r.kind == "reweighter"}
    assert subjects == {
        "good_softmax@good_mean_abs_advantage",
        "good_softmax@good_token_prob",
        "good_softmax@sample_scores",
        "good_softmax@token_scores",
    }
    mean_one_cases = {
        r.case for r in report.results if r.check == "check_mean_one" and r.subject.endswith("sample_scores")
    }
    assert {
        "scores=constant",
        "scores=ties",
        "scores=huge",
        "scores=tiny",
        "scores=negative",
        "bs=1",
        "L=1",
    } <= mean_one_cases


def test_bounded_reweighter_is_paired_only_with_scorers_declaring_a_range_inside_its_own():
    from meta_good import Focal, GroupSolveRate, MeanAbsAdvantage

    report = certify_subjects(
        [Subject.from_component(c) for c in (Focal, GroupSolveRate, MeanAbsAdvantage)], device="cpu"
    )
    assert report.ok, [r.message for r in report.results if r.status != PASSED][:3]
    subjects = {r.subject for r in report.results if r.kind == "reweighter"}
    assert subjects == {"good_focal@good_group_solve_rate", "good_focal@sample_scores"}
    assert report.unpaired == [
        "good_focal not paired with good_mean_abs_advantage: accepts scores in [0, 1], "
        "but the scorer declares no score_range"
    ]
    cases = {r.case for r in report.results if r.subject == "good_focal@sample_scores" and r.check == "check_mean_one"}
    assert {"scores=low", "scores=high", "scores=near_high", "scores=binary"} <= cases
    assert "scores=huge" not in cases
    assert any(r.check == "check_rejects_out_of_range" and r.status == PASSED for r in report.results)
