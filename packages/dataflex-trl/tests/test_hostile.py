"""TRL's real ``GRPOTrainer`` against hostile plugins and checkpoints: the lock holds, resume runs no code.

Plugins are real wheels pip installs into a throwaway site-packages put in
front of ``sys.path`` beside TRL (the testing kit's ``plugin_sites``); the lock covers them
and every plugin installed beside this test run. Planted code leaves a marker
file, so each test sees whether it ran.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from dataflex_core import ConfigError, get_plugin_manager
from dataflex_core.lock import PluginSetMismatch, lock_environment, write_lock
from dataflex_core.step.state import CHECKPOINT_STATE, ComponentStateError
from dataflex_lab.testing import plugin_sites
from dataflex_lab.testing.hostile import HOSTILE, RunsCode, plant_bytecode
from dataflex_lab.testing.plugin_sites import forget_installed_plugins

SCORERS = """
from dataflex_core import Scorer, register_scorer

BEHAVIOUR = "locked"


@register_scorer("hs_trl_magnitude")
class MagnitudeScorer(Scorer):
    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        return batch.batch["advantages"].abs().amax(-1)
"""
PACKAGE = {"hs_trl/__init__.py": "from . import scorers  # noqa: F401\n", "hs_trl/scorers.py": SCORERS}
EXITS = """
import argparse

ARGS = argparse.ArgumentParser(prog="my_scorer").parse_args()  # module level: the trainer's command line
"""
BLOCK = {"scorer": {"name": "trltest_running_count"}, "actuator": {"name": "trltest_proportional"}}


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A throwaway site-packages in front of ``sys.path``, in a fresh process's state before and after."""
    with plugin_sites.pip_site(tmp_path, monkeypatch, alone=False) as pip_site:
        yield pip_site


def _saved_run(make_trainer) -> str:
    first = make_trainer("dapo", BLOCK, max_steps=2, save_strategy="steps", save_steps=2)
    first.train()
    return os.path.join(first.args.output_dir, "checkpoint-2")


def test_a_crafted_state_file_in_a_shared_checkpoint_runs_no_code_on_resume(make_trainer, marker):
    folder = _saved_run(make_trainer)
    payload = {"format": 1, "global_steps": 2, "components": {"scorer": {"kind": "scorer",
               "name": "trltest_running_count", "state": {"count": RunsCode(marker)}}}}  # fmt: skip
    torch.save(payload, os.path.join(folder, CHECKPOINT_STATE))
    resumed = make_trainer("dapo", BLOCK, max_steps=3, save_strategy="no")
    with pytest.raises(ComponentStateError, match="holds Python objects other than tensors and plain data"):
        resumed.train(resume_from_checkpoint=True)
    assert not marker.exists()


@pytest.mark.parametrize(("damage", "what"), [(b"", "is empty"), (None, "is truncated or corrupt")])
def test_a_damaged_state_file_stops_the_resume_with_one_line_naming_it(make_trainer, damage, what):
    folder = _saved_run(make_trainer)
    path = Path(folder, CHECKPOINT_STATE)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2] if damage is None else damage)
    resumed = make_trainer("dapo", BLOCK, max_steps=3, save_strategy="no")
    with pytest.raises(ComponentStateError) as info:
        resumed.train(resume_from_checkpoint=True)
    message = str(info.value)
    assert message.startswith(str(path)) and what in message and "\n" not in message
    assert f"delete {CHECKPOINT_STATE}" in message


def test_a_dataflex_block_written_as_a_list_is_a_config_error(make_trainer):
    with pytest.raises(ConfigError, match="the dataflex block must be a mapping"):
        make_trainer("dapo", [BLOCK["scorer"], BLOCK["actuator"]])


def test_a_plugin_exiting_at_import_does_not_take_the_trainer_down(make_trainer, site, monkeypatch):
    site.install("hs-exits", "0.1.0", "hs_exits", EXITS)
    monkeypatch.setattr(sys, "argv", ["train.py", "--output_dir", "runs/a"])
    trainer = make_trainer("dapo", {"scorer": {"name": "advantage_magnitude"}, "actuator": {"name": "softmax"}})
    assert trainer.dataflex.pipeline.scorer.name == "advantage_magnitude"
    (failure,) = [f for f in get_plugin_manager().failures if f.plugin.dist == "hs-exits"]
    assert "skipping plugin hs_exits (hs-exits==0.1.0): PluginLoadError: the plugin tried to exit" in failure.message


def test_under_a_lock_the_trainer_runs_the_locked_bytes_not_planted_bytecode_or_a_copy_on_sys_path(
    make_trainer, site, marker, tmp_path, monkeypatch
):
    site.install_files("hs-trl", "0.1.0", PACKAGE, {"hs_trl": "hs_trl"})
    lock = tmp_path / "dataflex_plugins.lock"
    write_lock(lock_environment(), lock)
    forget_installed_plugins()  # the job starts in a process of its own

    # a modified copy in the job's folder, ahead of site-packages ...
    job = tmp_path / "job"
    shutil.copytree(site.root / "hs_trl", job / "hs_trl", ignore=shutil.ignore_patterns("__pycache__"))
    (job / "hs_trl" / "scorers.py").write_text(HOSTILE + SCORERS)
    monkeypatch.setattr(sys, "path", [str(job), *sys.path])
    # ... and bytecode CPython would run for the installed scorers.py
    plant_bytecode(site.root / "hs_trl" / "scorers.py", HOSTILE + SCORERS)

    block = {"scorer": {"name": "hs_trl_magnitude"}, "actuator": {"name": "trltest_proportional"}}
    with pytest.raises(PluginSetMismatch, match="bytecode not compiled from its source"):
        make_trainer("dapo", {**block, "plugins": {"lock": str(lock)}})
    forget_installed_plugins()
    trainer = make_trainer("dapo", {**block, "plugins": {"lock": str(lock), "allow_drift": True}}, max_steps=1)
    trainer.train()
    scorer = sys.modules["hs_trl.scorers"]
    assert Path(scorer.__file__).is_relative_to(site.root) and scorer.BEHAVIOUR == "locked"
    assert any("dataflex/weight/max" in h for h in trainer.state.log_history)
    assert not marker.exists()
