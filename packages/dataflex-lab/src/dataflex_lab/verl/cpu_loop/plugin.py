"""The module ``VERL_USE_EXTERNAL_MODULES`` names: registers the CPU harness in every verl process.

verl imports it from inside ``import verl`` in the driver, the task runner
and every Ray worker, so each process knows the CPU platform and the CPU rollout
backend before verl looks them up (the agent loop is declared in a config file);
V1's replay buffer, once a process imports it, polls at the harness's pace; a run of the ``fit`` bench
alternates DataFlex's step (:mod:`.alternate`, either trainer line).
"""

from __future__ import annotations

import functools
import os

from verl.workers.rollout.replica import RolloutReplicaRegistry

from dataflex_verl.after_import import when_imported

from . import (
    alternate,
    cpu_platform,  # noqa: F401 - registers the "cpu" platform
    verl_internals,
)
from .names import ROLLOUT_NAME


def _load_replica():
    from .rollout import CpuRolloutReplica

    return CpuRolloutReplica


RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
verl_internals.register_rollout_adapter(ROLLOUT_NAME)
verl_internals.use_plain_gloo_process_group()
when_imported(verl_internals.REPLAY_BUFFER_MODULE, verl_internals.poll_replay_buffer_quickly)
if os.environ.get(alternate.ALTERNATE_ENV):
    _runs_on = os.environ[alternate.ALTERNATE_ENV]
    alternate.parity(_runs_on)  # a bad value stops the process that reads it, naming the variable
    for _module, _alternate in alternate.ALTERNATIONS.items():
        when_imported(_module, functools.partial(_alternate, runs_on=_runs_on))
if os.environ.get(verl_internals.LOSS_PROBE_ENV):
    verl_internals.install_loss_probe(os.environ[verl_internals.LOSS_PROBE_ENV])
if os.environ.get(verl_internals.COMPUTE_COUNTERS_ENV):
    verl_internals.install_compute_counters()
