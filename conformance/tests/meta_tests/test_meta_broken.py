"""The suite can fail: each broken component fails exactly the check meant to catch it."""

from __future__ import annotations

import re

import pytest
from meta_broken import BROKEN

from dataflex_conformance import BLOCKED, FAILED, Subject, certify_subjects

#: The one failure-message pattern: "<seen>, expected <contract> [<component>, ..., <case>, <device>]".
MESSAGE = re.compile(r"^.+, expected .+ \[[a-z_]+\(.*\), .+, (cpu|meta|cuda(:\d+)?)\]$", re.S)


#: Checks a broken component may fail beside its own: one that groups rows by position is split by a padding row
#: inserted inside a group as by a reorder. (One that lets empty rows in, or weighs them, has the padding check
#: blocked by that check: padding rows are empty rows.)
ALSO_FAILS = {"check_permutation_equivariant": {"check_framework_padding_ignored"}}


@pytest.mark.parametrize("component, check", list(BROKEN.items()), ids=[c.name for c in BROKEN])
def test_broken_component_fails_exactly_its_check(component, check):
    report = certify_subjects([Subject.from_component(component)], device="cpu")
    failed = {r.check for r in report.results if r.status == FAILED}
    blocked_by = {r.blocked_by for r in report.results if r.status == BLOCKED}
    assert check in failed and failed - {check} <= ALSO_FAILS.get(check, set()), [
        r.message for r in report.results if r.status == FAILED and r.check != check
    ][:3]
    assert blocked_by <= {check}
    assert not report.ok
    messages = [r.message for r in report.results if r.status == FAILED]
    assert all(MESSAGE.match(m) for m in messages), messages[:3]
    component_report = report.to_json()["components"][0]
    assert component_report["certified_devices"] == []
    assert component_report["status"] == "failed"


def test_mean_not_one_message_names_mean_units_and_tolerance():
    from meta_broken import MeanNotOneReweighter

    report = certify_subjects([Subject.from_component(MeanNotOneReweighter)], device="cpu")
    first = next(r for r in report.results if r.status == FAILED and r.case == "bs=8")
    assert first.message.startswith(
        "weights mean=1.031 over 7 valid samples, expected 1 ± 1e-4 [broken_mean_not_one(), "
    )
    assert first.message.endswith(", bs=8, cpu]")
    token = next(r for r in report.results if r.status == FAILED and "@token_scores" in r.subject)
    assert " valid tokens, expected 1 ± 1e-4" in token.message


def test_wrong_device_is_caught_and_blocks_numeric_checks():
    from meta_broken import WrongDeviceReweighter

    report = certify_subjects([Subject.from_component(WrongDeviceReweighter)], device="cpu")
    device_failures = [r for r in report.results if r.check == "check_output_device"]
    assert device_failures and all(r.status == FAILED for r in device_failures)
    assert "output.device=meta, expected the input's device cpu" in device_failures[0].message
    blocked = {r.check for r in report.results if r.status == BLOCKED}
    assert {"check_mean_one", "check_weights_nonnegative", "check_empty_rows_ignored"} <= blocked


def test_an_input_mutation_names_the_field_and_the_fix():
    """Issue 40.10: the message named the field but not what to change."""
    from meta_broken import MutatesEmptyRowsScorer

    report = certify_subjects([Subject.from_component(MutatesEmptyRowsScorer)], device="cpu")
    failure = next(r for r in report.results if r.status == FAILED and r.check == "check_no_input_mutation")
    assert "old_log_probs" in failure.message and "clone a tensor before changing it" in failure.message
    assert "out-of-place ops" in failure.message and MESSAGE.match(failure.message)
