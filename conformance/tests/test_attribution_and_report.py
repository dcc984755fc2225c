"""Who a failure counts against, what the report leads with, and what `requires` means."""

from __future__ import annotations

import torch
from meta_broken import GuideSoftmax
from meta_good import KeyedReward, MeanAbsAdvantage, Softmax

from dataflex_conformance import FAILED, PASSED, Subject, certify_subjects
from dataflex_conformance.report import problems, summary_lines
from dataflex_core import Reweighter, Scorer, masked_seq_mean


class NanScorer(Scorer):
    """From 'another package': NaN scores on every row."""

    name = "other_nan_scorer"
    requires = ["advantages"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        return masked_seq_mean(batch.batch["advantages"].abs(), batch.batch["response_mask"]) * float("nan")


def test_a_broken_scorer_from_elsewhere_does_not_uncertify_a_correct_reweighter():
    softmax = Subject.from_component(Softmax)
    report = certify_subjects([softmax], device="cpu", scorers=[Subject.from_component(NanScorer)])
    component = report.to_json()["components"][0]
    assert component["status"] == "certified" and component["certified_devices"] == ["cpu"]
    assert component["counts"]["caused_by_another_component"] > 0
    assert report.ok
    lines = problems(report)
    assert len(lines) == 1 and lines[0].startswith("other_nan_scorer (as a score source) blocked")
    assert "non-finite" in lines[0]


def test_when_both_are_certified_only_the_broken_scorer_fails():
    subjects = [Subject.from_component(Softmax), Subject.from_component(NanScorer)]
    report = certify_subjects(subjects, device="cpu")
    status = {c["id"]: c["status"] for c in report.to_json()["components"]}
    assert status == {"good_softmax": "certified", "other_nan_scorer": "failed"}


def test_the_guides_softmax_is_refused_with_one_line_naming_its_one_issue():
    report = certify_subjects(
        [Subject.from_component(GuideSoftmax), Subject.from_component(MeanAbsAdvantage)], device="cpu"
    )
    assert not report.ok
    # an undeclared reweighter is not paired with token scores: no shape failures at all
    assert not any("token" in r.subject for r in report.results)
    lines = problems(report)
    assert len(lines) == 1, lines
    assert lines[0].startswith("softmax check_invalid_units_zero fails in ")
    assert "empty response_mask" in lines[0] and "valid_mask_for" in lines[0]
    summary = summary_lines(report)
    assert summary[1] == "problems (1):"


def test_an_actuator_that_cannot_take_one_score_shape_gets_one_line_with_the_declaration():
    class SampleOnly(Reweighter):
        name = "sample_only"
        accepts_granularity = ("prompt", "response", "token")  # claims token scores, cannot take them

        @torch.no_grad()
        def act(self, scores, batch, **ctx):
            if scores.dim() != 1:
                raise RuntimeError(f"expected (bs,) scores, got {tuple(scores.shape)}")
            from dataflex_core import mean_one, valid_sample_mask

            return mean_one(torch.where(valid_sample_mask(batch), torch.ones_like(scores.float()), 0.0), batch)

    report = certify_subjects([Subject.from_component(SampleOnly)], device="cpu")
    lines = problems(report)
    assert len(lines) == 1, lines
    assert "every check with token scores fails" in lines[0]
    assert "declare accepts_granularity = ('prompt', 'response')" in lines[0]


def test_requires_is_read_from_the_configured_instance():
    subject = Subject.from_component(KeyedReward, {"reward_key": "token_level_scores"})
    report = certify_subjects([subject], device="cpu")
    bad = [r.message for r in report.results if r.status != PASSED]
    assert not bad, bad[:3]
    assert any(r.check == "check_reads_only_declared" and r.status == PASSED for r in report.results)
    assert not [r for r in report.results if r.status == FAILED]
