"""Run check calls and collect structured results, honouring the caller's expected failures.

Expected failures are declared by whoever runs the suite (a mapping
``check -> reason``), never inferred: a failing check it names is reported
as ``expected-failure`` with the reason, and a key that names no check
that ran is an error, so a typo cannot hide a failure.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from .fields import MissingFieldError
from .probe import Blocked, CheckFailure
from .suite import CheckCall

PASSED = "passed"
FAILED = "failed"
EXPECTED_FAILURE = "expected-failure"
BLOCKED = "blocked"
#: Statuses that keep a certificate valid.
OK_STATUSES = (PASSED, EXPECTED_FAILURE)


@dataclass
class CheckResult:
    """The outcome of one check call, as written into the report."""

    id: str
    component: str
    subject: str
    kind: str
    check: str
    case: str
    device: str
    status: str
    message: str | None = None
    reason: str | None = None
    blocked_by: str | None = None
    #: Another component that caused this result (the scorer feeding an actuator): it counts against that one.
    culprit: str | None = None
    xfail_key: str | None = field(default=None, repr=False)

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def xfail_keys(call: CheckCall) -> list[str]:
    """The keys an expected-failure entry may use to name ``call``, most specific first."""
    s = call.subject
    return list(
        dict.fromkeys(
            [
                call.id,
                f"{s.id}-{call.check_name}",
                f"{s.component_id}-{call.check_name}",
                f"{s.name}-{call.check_name}",
                call.check_name,
            ]
        )
    )


def match_expected(call: CheckCall, expected: Mapping[str, str]) -> str | None:
    """The key of ``expected`` that names ``call``, if any."""
    for key in xfail_keys(call):
        if key in expected:
            return key
    return None


def run_call(call: CheckCall, expected: Mapping[str, str] | None = None) -> CheckResult:
    """Run one check call and classify the outcome."""
    expected = expected or {}
    status, message, blocked_by, culprit = PASSED, None, None, None
    try:
        call()
    except Blocked as exc:
        status, message, blocked_by, culprit = BLOCKED, str(exc), exc.by, exc.culprit
    except CheckFailure as exc:
        status, message = FAILED, str(exc)
    except MissingFieldError as exc:
        status, message = FAILED, str(exc)
    except Exception as exc:  # noqa: BLE001 - a crash is a failure of that check, with where it happened
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        status, message = FAILED, f"{type(exc).__name__}: {exc} (at {tb.filename}:{tb.lineno})"
    key = match_expected(call, expected)
    reason = expected[key] if key is not None else None
    if key is not None and status in (FAILED, BLOCKED):
        status = EXPECTED_FAILURE
    return CheckResult(
        id=call.id,
        component=call.subject.component_id,
        subject=call.subject.id,
        kind=call.subject.kind,
        check=call.check_name,
        case=call.case.label,
        device=call.device,
        status=status,
        message=message,
        reason=reason,
        blocked_by=blocked_by,
        culprit=culprit,
        xfail_key=key,
    )


def unmatched_expected(calls: list[CheckCall], expected: Mapping[str, str]) -> list[str]:
    """Keys of ``expected`` that name none of ``calls``."""
    used = {key for call in calls for key in xfail_keys(call)}
    return sorted(k for k in expected if k not in used)
