"""The curriculum's checks: correct pre_rollout scorers and samplers are certified, broken ones are caught."""

from __future__ import annotations

import pytest
from meta_prompts import BROKEN_PROMPTS, GoodFloorSampler, GoodSolveRate, PickledState, PromptReweighter, Starving

from dataflex_conformance import FAILED, PASSED, PROMPT_CHECKS, Subject, certify_subjects


def test_good_curriculum_components_pass_every_check_of_their_kind():
    report = certify_subjects([Subject.from_component(c) for c in (GoodSolveRate, GoodFloorSampler)], device="cpu")
    bad = [r for r in report.results if r.status != PASSED]
    assert not bad, [r.message for r in bad[:5]]
    for component in report.to_json()["components"]:
        ran = {c["check"] for c in component["checks"]}
        declared = {c.name for c in PROMPT_CHECKS[component["kind"]]}
        assert declared - {"check_sampler_rejects_out_of_range"} <= ran, (component["id"], declared - ran)


def test_samplers_pair_with_pre_rollout_scorers_and_reweighters_do_not():
    report = certify_subjects(
        [Subject.from_component(c) for c in (GoodSolveRate, GoodFloorSampler, PromptReweighter)], device="cpu"
    )
    subjects = {r.subject for r in report.results if r.kind in ("sampler", "reweighter")}
    assert subjects == {
        "good_floor_softmax@good_solve_rate",
        "good_floor_softmax@sample_scores",
        "good_prompt_reweighter@sample_scores",
    }


@pytest.mark.parametrize("component, check", list(BROKEN_PROMPTS.items()), ids=[c.name for c in BROKEN_PROMPTS])
def test_broken_curriculum_component_fails_its_check(component, check):
    report = certify_subjects([Subject.from_component(component)], device="cpu")
    failed = {r.check for r in report.results if r.status == FAILED}
    assert check in failed, failed
    assert not report.ok


def test_a_floor_of_zero_is_accepted_only_when_asked_for():
    asked = certify_subjects([Subject.from_component(Starving, {})], device="cpu")
    assert any(r.check == "check_no_prompt_starved" and r.status == FAILED for r in asked.results)
    message = next(r.message for r in asked.results if r.check == "check_no_prompt_starved" and r.status == FAILED)
    assert "min_probability(8) = 0 with default params, expected a positive floor" in message


def test_state_that_only_an_unsafe_load_reads_back_fails_as_a_resume_would():
    report = certify_subjects([Subject.from_component(PickledState)], device="cpu")
    failed = [r for r in report.results if r.check == "check_state_round_trip" and r.status == FAILED]
    assert failed, "state a resume's torch.load(weights_only=True) refuses was certified"
    assert "UnpicklingError" in failed[0].message and "data-only state" in failed[0].message, failed[0].message
