"""Fixtures of the fit-loop tests: one local Ray for the session, verl's own fit loop run in this process.

Each run is verl's ``run_ppo`` with ``TaskRunnerV1`` (what ``python -m
verl.trainer.main_ppo`` runs) on the CPU harness: a real TransferQueue, real
FSDP2 actor, real rollout, reward and weight sync; only the model is tiny and
the task a toy. Runs are cached by name for the session, so tests that compare
against the same baseline share it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: The module of test components every verl process imports (see fit_components.py).
COMPONENTS_MODULE = "fit_components"
# the test modules import fit_helpers, and verl's processes import fit_components, from this folder
sys.path.insert(0, str(HERE))


@pytest.fixture(scope="session")
def fits(tmp_path_factory: pytest.TempPathFactory):
    """A local Ray whose processes import the harness and this folder's test components."""
    import ray
    from fit_helpers import FitSession

    from dataflex_lab.verl.cpu_loop import runner

    if ray.is_initialized() and ray.cluster_resources().get("GPU", 0) < runner.RAY_GPUS:
        pytest.skip(
            "verl's fit loop needs a Ray with logical GPUs, started by this folder's fixture, but this process "
            "already runs another Ray (the host tests' queue); run `pytest packages/dataflex-verl/tests/fit` "
            "in a process of its own (nox -s tests does)"
        )

    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    # every run starts about nine processes importing torch and verl: one compiled copy for all of them
    with runner.local_ray(modules=[COMPONENTS_MODULE], bytecode_dir=tmp_path_factory.mktemp("pycache")):
        yield FitSession(tmp_path_factory.mktemp("fit"))
