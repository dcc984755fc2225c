"""Certificates keep their check ids: a user's ``xfail`` keys and ``pytest -k`` selections name them.

``check_ids.txt`` lists the ids (and statuses) certifying the meta tests' good components of every kind gives;
it was written before the prompt-side probes were folded into the batch side's machinery (issue 35 item 5), so
a refactor that renames a check, a case or a subject, or drops or adds a result, fails here.
"""

from __future__ import annotations

from pathlib import Path

from meta_admission import GoodBand
from meta_allocators import GoodEven
from meta_good import MeanAbsAdvantage, Softmax, SoftmaxMixer, TopHalf
from meta_prompts import GoodFloorSampler, GoodSolveRate

from dataflex_conformance import Subject, certify_subjects

SNAPSHOT = Path(__file__).parent / "check_ids.txt"
#: One good component of every kind the batch side and the prompt side certify.
COMPONENTS = [MeanAbsAdvantage, Softmax, TopHalf, SoftmaxMixer, GoodBand, GoodEven, GoodSolveRate, GoodFloorSampler]


def current_ids() -> list[str]:
    report = certify_subjects([Subject.from_component(c) for c in COMPONENTS], device="cpu")
    # the scaling check's status is a timing: its ids are kept, not its statuses
    return sorted(r.id if r.check == "check_scales_linearly" else f"{r.id} {r.status}" for r in report.results)


def test_check_ids_are_unchanged():
    expected = SNAPSHOT.read_text(encoding="utf-8").splitlines()
    ids = current_ids()
    assert len(ids) > 100, len(ids)
    missing, extra = sorted(set(expected) - set(ids)), sorted(set(ids) - set(expected))
    assert not missing and not extra, {"missing": missing[:10], "extra": extra[:10]}


if __name__ == "__main__":  # the snapshot is written once, from the code before a refactor
    SNAPSHOT.write_text("\n".join(current_ids()) + "\n", encoding="utf-8")
