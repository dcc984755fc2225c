"""What a check works with: fresh components, fresh batches, and one failure-message pattern.

Every failure reads ``<what was seen>, expected <what should be> [<component>,
<case>, <device>]`` so a report line names the value, the contract and the
exact place to reproduce it. A check that cannot measure its property
because the output already breaks a more basic one (wrong shape, wrong
device, non-finite values) raises :class:`Blocked` naming the check that
reports the root cause, so one bug fails one check.
"""

from __future__ import annotations

from typing import Any

import torch

from .batches import BatchFactory, Case, Sample, score_range_of, score_shape, synthetic_scores
from .subjects import Subject

#: ``step_id`` handed to every call.
STEP_ID = 3


class CheckFailure(AssertionError):
    """The component breaks the property the check is named after."""


class Blocked(AssertionError):
    """The property cannot be measured because another check's property is broken.

    ``culprit`` names another component when that one is the cause (the scorer
    feeding an actuator): the result then counts against it, not the subject.
    """

    def __init__(self, by: str, message: str, culprit: str | None = None) -> None:
        super().__init__(f"blocked by {by}: {message}")
        self.by = by
        self.culprit = culprit


class Probe:
    """One check's view of one subject on one case and device."""

    def __init__(self, subject: Subject, case: Case, device: torch.device | str, factory: BatchFactory) -> None:
        self.subject = subject
        self.case = case
        self.device = torch.device(device)
        self.device_label = str(device)
        self.factory = factory
        self._description: str | None = None

    # -- messages -----------------------------------------------------------------
    @property
    def description(self) -> str:
        if self._description is None:
            self._description = self.subject.describe()
        return self._description

    def context(self) -> str:
        parts = [self.description]
        source = self.subject.source
        if isinstance(source, Subject):
            parts.append(f"scores={source.describe()}")
        elif isinstance(source, str):
            parts.append(f"scores={source}")
        parts += [self.case.label, self.device_label]
        return "[" + ", ".join(parts) + "]"

    def fail(self, message: str) -> CheckFailure:
        return CheckFailure(f"{message} {self.context()}")

    def blocked(self, by: str, message: str, culprit: str | None = None) -> Blocked:
        return Blocked(by, f"{message} {self.context()}", culprit)

    # -- building -----------------------------------------------------------------
    def sample(self, case: Case | None = None) -> Sample:
        return self.factory.build(case or self.case, self.device)

    def instance(self) -> Any:
        """The configured component (for reading its declarations), or :class:`CheckFailure` if it cannot be built."""
        return self.component()

    def component(self) -> Any:
        try:
            return self.subject.make()
        except Exception as exc:  # noqa: BLE001
            raise self.fail(
                f"constructing {self.subject.cls.__qualname__}(**{self.subject.params!r}) raised {exc!r}"
            ) from exc

    def scores(self, sample: Sample, case: Case | None = None) -> torch.Tensor:
        """The scores an actuator receives for ``sample``: its scorer's output or the case's distribution.

        A scorer's output is computed once per sample (clones and subsets carry it), so
        two calls of the actuator see the same scores even from a nondeterministic scorer.
        Output that breaks the scorer's own contract (a raise, not a tensor, the wrong
        shape or device, a non-finite value) blocks the check and is attributed to the
        scorer: an actuator is not judged on scores it could not have been given.
        """
        case = case or self.case
        source = self.subject.source
        if not isinstance(source, Subject):
            return synthetic_scores(case, self.subject.granularity, sample, score_range_of(self.subject.cls))
        if sample.scores is None:
            sample.scores = self._scorer_output(source, sample)
        return sample.scores.clone()

    def _scorer_output(self, source: Subject, sample: Sample) -> torch.Tensor:
        by = f"{source.component_id} (scorer)"

        def blocked(message: str) -> Blocked:
            return self.blocked(by, f"scorer {source.label} {message}", culprit=source.component_id)

        try:
            out = self._fed_scorer(source, sample).score(sample.batch, STEP_ID, **sample.ctx())
        except Exception as exc:  # noqa: BLE001
            raise blocked(f"raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(out, torch.Tensor):
            raise blocked(f"returned {type(out).__name__}, not a tensor")
        expected = self._score_shape(source, sample)
        if tuple(out.shape) != expected or out.device != sample.device or not out.is_floating_point():
            raise blocked(f"returned a {tuple(out.shape)} {out.dtype} tensor on {out.device}")
        bad = ~torch.isfinite(out.detach())
        if bad.any():
            raise blocked(f"returned {int(bad.sum())} non-finite score(s) of {out.numel()}")
        return out.detach()

    def _fed_scorer(self, source: Subject, sample: Sample) -> Any:
        """A fresh instance of the scorer feeding the subject, given what a host gives it before it scores."""
        return source.make()

    def _score_shape(self, source: Subject, sample: Sample) -> tuple[int, ...]:
        """The shape of the scores the feeding scorer owes on ``sample``."""
        return score_shape(source.cls.granularity, sample)

    # -- calling ------------------------------------------------------------------
    def call(self, component: Any, sample: Sample, scores: torch.Tensor | None = None, batch: Any = None) -> Any:
        """``score`` (scorers) or ``act`` (actuators) on ``sample``; a raise becomes a failure."""
        batch = sample.batch if batch is None else batch
        try:
            if self.subject.kind == "scorer":
                return component.score(batch, STEP_ID, **sample.ctx())
            return component.act(scores, batch, step_id=STEP_ID, **sample.ctx())
        except Exception as exc:  # noqa: BLE001
            method = "score" if self.subject.kind == "scorer" else "act"
            raise self.fail(f"{method}() raised {type(exc).__name__}: {exc}") from exc

    def run(self, sample: Sample | None = None) -> tuple[Any, Sample, torch.Tensor | None]:
        """A fresh component called on a fresh (or given) sample: ``(output, sample, scores)``."""
        sample = sample or self.sample()
        scores = None if self.subject.kind == "scorer" else self.scores(sample)
        return self.call(self.component(), sample, scores), sample, scores

    # -- preconditions --------------------------------------------------------------
    def expected_shape(self, sample: Sample) -> tuple[int, ...]:
        mask = sample.batch.batch["response_mask"]
        kind = self.subject.kind
        if kind == "mixer":
            return (len(sample.domains),)
        if kind == "selector":
            return (int(mask.shape[0]),)
        gran = self.subject.granularity
        if gran == "token":
            return tuple(mask.shape)
        if gran == "domain":
            return (len(sample.domains),)
        return (int(mask.shape[0]),)

    def readable(
        self, out: Any, sample: Sample, *, shape: bool = True, shape_check: str = "check_output_shape"
    ) -> torch.Tensor:
        """``out`` if it is a tensor on the input's device (and of the expected shape), else :class:`Blocked`."""
        if not isinstance(out, torch.Tensor):
            raise self.blocked(shape_check, f"output is a {type(out).__name__}, not a tensor")
        if out.device != sample.device:
            raise self.blocked("check_output_device", f"output on {out.device}, input on {sample.device}")
        if shape and tuple(out.shape) != self.expected_shape(sample):
            raise self.blocked(shape_check, f"output shape {tuple(out.shape)}")
        return out

    def finite(self, out: torch.Tensor, finite_check: str, what: str = "output") -> torch.Tensor:
        bad = ~torch.isfinite(out.float())
        if bad.any():
            raise self.blocked(finite_check, f"{int(bad.sum())} non-finite {what} values")
        return out
