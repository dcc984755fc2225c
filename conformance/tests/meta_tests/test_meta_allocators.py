"""The allocators' checks: a correct allocator is certified, each broken one fails exactly its check."""

from __future__ import annotations

import pytest
from meta_allocators import BROKEN_ALLOCATORS, GoodEven

from dataflex_conformance import FAILED, PASSED, PROMPT_CHECKS, Subject, certify_subjects


def test_a_good_allocator_passes_every_check_of_its_kind():
    report = certify_subjects([Subject.from_component(GoodEven)], device="cpu")
    bad = [r for r in report.results if r.status != PASSED]
    assert not bad, [r.message for r in bad[:5]]
    ran = {r.check for r in report.results}
    assert {c.name for c in PROMPT_CHECKS["allocator"]} <= ran


@pytest.mark.parametrize("component, check", list(BROKEN_ALLOCATORS.items()), ids=[c.name for c in BROKEN_ALLOCATORS])
def test_a_broken_allocator_fails_exactly_its_check(component, check):
    report = certify_subjects([Subject.from_component(component)], device="cpu")
    failed = {r.check for r in report.results if r.status == FAILED}
    assert failed == {check}, failed
