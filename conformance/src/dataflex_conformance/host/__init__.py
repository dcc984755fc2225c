"""The tests every DataFlex host passes, given a harness over its real framework.

A host is the framework's seams around :class:`~dataflex_core.session.DataFlexSession`;
whatever the framework, a user is owed the same things, and this package asserts them, one suite per
capability (:class:`SeamSuite`): a suite runs on a host that declares its seam in
:meth:`HostHarness.capabilities` and skips, with the host's reason, on one that does not.

:class:`ReweightSuite` (the loss-weights seam, ``mechanism: reweight``):

- **uniform weights leave the framework's loss unchanged**: the loss of a step with DataFlex giving every
  valid token weight 1 is the framework's own loss on the same batch;
- **weights reach the loss**: weights that differ change the loss, and they have mean one in the loss's
  unit over the valid tokens (the framework's step size is kept);
- **padding rows and empty responses get weight 0**, and so does every token outside the loss mask;
- **invalid output** raises, naming the component (``on_invalid: raise``, the default), or with
  ``on_invalid: uniform`` leaves the framework's loss as it is and counts the fallback;
- **before warmup_step** the framework trains alone (``dataflex/active`` 0, its own loss);
- **component state round-trips** through the framework's own checkpoints: a resumed run's components hold
  what the saved run's held;
- **a resume with another plugin set is refused**, and so is one with another component in a role.

:class:`ResamplingSuite` (the train-sampler seam, ``mechanism: curriculum`` and ``mix``; the harness's
:meth:`HostHarness.draws`): the framework's own dataloader draws the prompts DataFlex's sampler gives, never one it
gave probability 0.

:class:`SelectSuite` (the loss-weights seam, ``mechanism: select``):

- **a selection keeping every row** leaves the framework's loss unchanged;
- **dropped rows leave the loss** (weight 0, or out of the loss mask where the host hard-drops) and the kept
  rows share one weight, mean one in the loss's unit: dropping half the batch does not halve the step.

:class:`RecomputeSuite` and :class:`HardDropSuite` (the loss-weights seam, on hosts that recompute a selector's
advantages or hard-drop its rows; the harness's :meth:`HostHarness.advantages_alone` and
:meth:`HostHarness.loss_alone`):

- **kept rows get the framework's advantages computed on them alone**, and are otherwise as it built them;
- **dropped rows leave the loss mask and have no effect on the loss**: the step's loss is the framework's on the
  kept rows alone.

:class:`GenerationRoundsSuite` (the generation-rounds seam, ``mechanism: filter``; the harness's
:meth:`HostHarness.rounds`): every trained group is whole and admitted and the batch stays full; a step still short
after ``max_rounds`` stops naming the cap, or with ``on_short: backfill`` is completed within it; the same seed
admits the same prompts.

:class:`PromptCountsSuite` (the per-prompt counts seam, ``mechanism: allocate``; the harness's
:meth:`HostHarness.counts`): a batch's counts hold its budget and are the allocator's; each prompt got exactly its
count of rollouts, under its one uid.

:class:`StagedSuite` (the staged-generation seam, ``mechanism: pilot``; the harness's
:meth:`HostHarness.staged_steps` and :meth:`HostHarness.staged_resume`): every stage generates exactly its requests,
a uid's rollouts of every stage train as one whole group, the batch is full and every rollout counted, the same seed
gives the same stages, and a run resumed in the middle repeats the steps after its checkpoint; with Pilot-Commit's
rounds, a round is one generation call where the host can mix counts, a carried prompt trains as a fresh whole group
before its age evicts it, and a prompt solved on every pilot is never screened again.

A host's tests subclass :class:`HostSuite` (every suite) and provide the ``host`` fixture, a :class:`HostHarness` over
the real framework (its real step and loss, its real checkpoint save and resume; no stand-in for the
framework)::

    from dataflex_conformance.host import HostHarness, HostStep, HostSuite

    class MyHarness(HostHarness):
        ...

    class TestMyHost(HostSuite):
        @pytest.fixture
        def host(self, tmp_path):
            return MyHarness(tmp_path)

The blocks name this module's own components (``hostkit_*``, registered when it is imported), so a host
needs no plugin installed to run the suites. Needs ``pytest`` (``pip install dataflex-conformance[pytest]``).
"""

from .components import BLOCKS, ELSEWHERE
from .counts import PromptCountsSuite
from .harness import CountsStep, HostHarness, HostStep, RoundsStep, StagedRows, StagedStep
from .recompute import HardDropSuite, RecomputeSuite
from .resampling import ResamplingSuite
from .reweight import ReweightSuite
from .rounds import GenerationRoundsSuite
from .select import SelectSuite
from .staged import StagedSuite
from .suite import SeamSuite


class HostSuite(
    ReweightSuite,
    SelectSuite,
    RecomputeSuite,
    HardDropSuite,
    ResamplingSuite,
    GenerationRoundsSuite,
    PromptCountsSuite,
    StagedSuite,
):
    """Every capability's suite: each runs when the host declares its seam, and skips with the host's reason."""


__all__ = [
    "BLOCKS",
    "CountsStep",
    "ELSEWHERE",
    "GenerationRoundsSuite",
    "HardDropSuite",
    "HostHarness",
    "HostStep",
    "HostSuite",
    "PromptCountsSuite",
    "RecomputeSuite",
    "ResamplingSuite",
    "ReweightSuite",
    "RoundsStep",
    "SeamSuite",
    "SelectSuite",
    "StagedRows",
    "StagedStep",
    "StagedSuite",
]
