"""A suite per capability: each runs on the hosts that declare its seam and skips, with the host's reason,
on the others.

A suite is a class of tests (one promise each) and the seam it needs (:mod:`dataflex_core.step.seams`),
read from :meth:`HostHarness.capabilities`; a host's test class subclasses the suites (or
:class:`~dataflex_conformance.host.HostSuite`, all of them) and provides the ``host`` fixture, as pandas'
extension arrays subclass its base tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest

from dataflex_core.session import HostCapabilities, LossWeights
from dataflex_core.step.seams import Seam

from .harness import HostHarness, HostStep


class SeamSuite:
    """The tests of one capability; a subclass names its :attr:`seam` and, when the seam is not enough, what
    else of the host it needs (:attr:`needs`)."""

    #: The seam the host must provide for the suite to run.
    seam: ClassVar[type[Seam]] = LossWeights
    #: ``(why the suite needs more, test of the host)``: the suite skips, saying why, where the test is false.
    needs: ClassVar[tuple[str, Callable[[HostCapabilities], bool]] | None] = None

    @pytest.fixture
    def host(self) -> HostHarness:
        raise NotImplementedError(
            "define the `host` fixture in your HostSuite subclass: a HostHarness over your framework's real step, "
            "loss and checkpoints (see dataflex_conformance.host)"
        )

    @pytest.fixture(autouse=True)
    def _declared_seam(self, request: pytest.FixtureRequest) -> None:
        """Skip a test whose suite needs a seam the host does not provide, with the host's reason."""
        suite = _suite_of(type(self), request.node.originalname)
        if suite is None:
            return
        caps = request.getfixturevalue("host").capabilities()
        support = caps.support(suite.seam)
        if not support.provided:
            pytest.skip(f"{caps.name} does not provide the {suite.seam.name} seam: {support.reason or 'not declared'}")
        if suite.needs is not None and not suite.needs[1](caps):
            pytest.skip(f"{caps.name}: {suite.needs[0]}")

    @pytest.fixture
    def plain(self, host: HostHarness) -> HostStep:
        """The framework's own step on the harness's batch."""
        step = host.step(None)
        assert step.inert.any(), (
            f"{type(host).__name__}'s batch has no padding row or empty response; build one as the framework does"
        )
        return step


def _suite_of(cls: type, test: str) -> type[SeamSuite] | None:
    """The suite that defines ``test`` among ``cls``'s bases (``None``: a test of the host's own)."""
    for base in cls.__mro__:
        if test in vars(base):
            declares = "seam" in vars(base) or "needs" in vars(base)  # a suite says what it needs; a host's class not
            return base if issubclass(base, SeamSuite) and declares else None
    return None
