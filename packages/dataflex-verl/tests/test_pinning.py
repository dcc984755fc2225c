"""Pinned plugin sets in the verl host: enforcement at mount and the record kept with verl checkpoints.

Plugins are real wheels pip installs into a throwaway virtualenv whose
site-packages is put in front of ``sys.path`` (the testing kit's ``plugin_sites``); the lock covers them plus every
plugin installed beside this test run. The trainer is the one
``get_trainer_cls("dataflex_sync")`` returns, built from verl's real config;
checkpoints go through verl's real ``_save_checkpoint`` / ``_load_checkpoint``.
No queue is needed: the steps call the host's own per-step component path.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import sys
from pathlib import Path

import pytest
import torch

import dataflex_conformance.host  # noqa: F401  (registers the host kit's hostkit_counter, a stateful scorer)
import dataflex_core as plugin_module
from dataflex_core import Batch, ConfigError
from dataflex_core.lock import PluginDriftWarning, PluginSetMismatch, lock_environment, read_lock, write_lock
from dataflex_core.lock.pinning import CHECKPOINT_PINNING, CHECKPOINT_PLUGIN_SET
from dataflex_core.step.state import CHECKPOINT_STATE, ComponentStateError
from dataflex_lab.testing import hostile_suite, plugin_sites, register_toy_components
from dataflex_lab.testing.hostile import HOSTILE, RunsCode, plant_bytecode
from dataflex_lab.testing.plugin_sites import EXTRA_PLUGIN as EXTRA
from dataflex_lab.testing.plugin_sites import LENGTH_PLUGIN as GOOD
from dataflex_lab.testing.plugin_sites import TRIPWIRE_PLUGIN as TRIPWIRE
from dataflex_lab.testing.plugin_sites import forget_installed_plugins
from dataflex_lab.verl import sandbox

pytestmark = pytest.mark.verl

register_toy_components("pintest")


@pytest.fixture
def pip_site(tmp_path, monkeypatch):
    """The kit's pip site in front of what is installed (verl stays importable), not alone as core's lock tests."""
    with plugin_sites.pip_site(tmp_path, monkeypatch, alone=False) as site:
        yield site


@pytest.fixture
def lock_path(pip_site, tmp_path):
    """``lk-good 0.1.0`` installed, and the whole environment locked."""
    pip_site.install("lk-good", "0.1.0", "lk_good", GOOD)
    path = tmp_path / "dataflex.lock"
    write_lock(lock_environment(), path)
    forget_installed_plugins()  # a job runs in a process of its own, not in the one that wrote the lock
    return path


@functools.lru_cache(maxsize=1)
def _base_config():
    return sandbox.compose_config(["actor_rollout_ref.rollout.n=4", "algorithm.adv_estimator=grpo"])


def trainer_for(tmp_path, *, scorer="lk_length", plugins=None):
    from omegaconf import OmegaConf, open_dict
    from verl.trainer.ppo.v1 import get_trainer_cls

    block = {"scorer": {"name": scorer}, "actuator": {"name": "pintest_proportional"}}
    if plugins is not None:
        block["plugins"] = plugins
    config = copy.deepcopy(_base_config())
    with open_dict(config):
        config.dataflex = OmegaConf.create(block)
        config.trainer.default_local_dir = str(tmp_path / "checkpoints")
    return get_trainer_cls("dataflex_sync")(config)


def rows(error: PluginSetMismatch, dist: str) -> list[tuple[str, str, str]]:
    return [(d.label, d.locked, d.installed) for d in error.differences if d.dist == dist]


# -- mount ----------------------------------------------------------------------
def test_a_locked_trainer_mounts_with_the_locked_plugins(tmp_path, lock_path):
    trainer = trainer_for(tmp_path, plugins={"lock": str(lock_path)})
    assert trainer.dataflex.pipeline.scorer_spec.dist == "lk-good"
    assert trainer.dataflex.plugins.plugin_set.plugins["lk-good"].components == {"scorer": ("lk_length",)}
    assert trainer.dataflex.plugins.drift == []


def test_an_unlisted_plugin_fails_mount_without_ever_being_imported(tmp_path, lock_path, pip_site):
    pip_site.install("lk-tripwire", "0.1.0", "lk_tripwire", TRIPWIRE)
    with pytest.raises(PluginSetMismatch) as info:
        trainer_for(tmp_path, plugins={"lock": str(lock_path)})
    assert rows(info.value, "lk-tripwire") == [("unexpected", "-", "0.1.0")]
    assert "lk_tripwire" not in sys.modules
    assert not (pip_site.root / "lk_tripwire" / "IMPORTED").exists()
    assert "before the first rollout" in str(info.value)


def test_a_changed_version_fails_mount_and_allow_drift_accepts_and_records_it(tmp_path, lock_path, pip_site):
    pip_site.install("lk-good", "0.2.0", "lk_good", GOOD)
    with pytest.raises(PluginSetMismatch) as info:
        trainer_for(tmp_path, plugins={"lock": str(lock_path)})
    assert rows(info.value, "lk-good") == [("version changed", "0.1.0", "0.2.0")]
    plugin_module.reset_plugin_manager()
    with pytest.warns(PluginDriftWarning, match="lk-good"):
        trainer = trainer_for(tmp_path, plugins={"lock": str(lock_path), "allow_drift": True})
    assert [(d.label, d.dist) for d in trainer.dataflex.plugins.drift] == [("version changed", "lk-good")]
    assert trainer.dataflex.pipeline.scorer_spec.version == "0.2.0"


def test_an_edited_installed_file_fails_mount_through_the_environment_variable(
    tmp_path, lock_path, pip_site, monkeypatch
):
    target = pip_site.root / "lk_good" / "__init__.py"
    target.write_text(target.read_text() + "\n# patched in place\n")
    monkeypatch.setenv(plugin_module.ENV_PLUGINS_LOCK, str(lock_path))
    with pytest.raises(PluginSetMismatch) as info:
        trainer_for(tmp_path)
    (row,) = [d for d in info.value.differences if d.dist == "lk-good"]
    assert (row.label, row.detail) == ("content changed", "modified lk_good/__init__.py")
    assert "$DATAFLEX_PLUGINS_LOCK" in str(info.value)


def test_under_a_lock_verl_runs_the_locked_bytes_not_planted_bytecode_or_a_copy_on_sys_path(
    tmp_path, lock_path, pip_site, marker, monkeypatch
):
    copy = tmp_path / "job" / "lk_good" / "__init__.py"  # a modified copy in the job's folder, ahead of site-packages
    copy.parent.mkdir(parents=True)
    copy.write_text(HOSTILE + GOOD)
    monkeypatch.setattr(sys, "path", [str(copy.parent.parent), *sys.path])
    plant_bytecode(pip_site.root / "lk_good" / "__init__.py", HOSTILE + GOOD)  # bytecode CPython would run
    with pytest.raises(PluginSetMismatch, match="bytecode not compiled from its source"):
        trainer_for(tmp_path, plugins={"lock": str(lock_path)})
    forget_installed_plugins()
    with pytest.warns(PluginDriftWarning):
        trainer = trainer_for(tmp_path, plugins={"lock": str(lock_path), "allow_drift": True})
    assert Path(inspect.getfile(trainer.dataflex.pipeline.scorer_spec.cls)).is_relative_to(pip_site.root)
    assert not marker.exists()


def test_a_dataflex_block_written_as_a_list_is_a_config_error(tmp_path):
    from omegaconf import OmegaConf, open_dict
    from verl.trainer.ppo.v1 import get_trainer_cls

    config = copy.deepcopy(_base_config())
    with open_dict(config):
        config.dataflex = OmegaConf.create([{"scorer": "pintest_constant"}])
    with pytest.raises(ConfigError, match="the dataflex block must be a mapping"):
        get_trainer_cls("dataflex_sync")(config)


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        ({"lock_file": "x"}, "did you mean 'lock'"),
        ({"allow_drift": "yes"}, "allow_drift must be true or false"),
        ({"lock": ""}, "the path of a `dataflex lock` file"),
    ],
)
def test_the_plugins_block_is_checked(tmp_path, plugins, message):
    with pytest.raises(ConfigError, match=message):
        trainer_for(tmp_path, scorer="pintest_constant", plugins=plugins)


# -- checkpoints ---------------------------------------------------------------------
def step(trainer, seed):
    """One step of the host's component path (score, act) on a synthetic batch of 16 rows."""
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(16, 12, generator=gen) > 0.2).long()
    batch = Batch(
        {
            "response_mask": mask,
            "advantages": torch.randn(16, 12, generator=gen),
            "is_padding": torch.zeros(16, dtype=torch.bool),
        }
    )
    trainer.dataflex.run(batch, trainer.global_steps)


def test_a_checkpoint_round_trips_the_plugin_set_and_component_state(tmp_path, pip_site):
    pip_site.install("lk-good", "0.1.0", "lk_good", GOOD)
    first = sandbox.attach_workers(trainer_for(tmp_path, scorer="hostkit_counter"))
    for seed in (1, 2):
        first.global_steps = seed
        step(first, seed)
    scorer = first.dataflex.pipeline.scorer
    assert scorer.rows == 32  # two steps of 16 rows
    first._save_checkpoint()  # verl's own, with DataFlex's files added
    folder = tmp_path / "checkpoints" / "global_step_2"
    assert {CHECKPOINT_PLUGIN_SET, CHECKPOINT_PINNING, CHECKPOINT_STATE, "data.pt"} <= {
        p.name for p in folder.iterdir()
    }
    assert (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert "lk-good" in read_lock(folder / CHECKPOINT_PLUGIN_SET).plugins

    resumed = sandbox.attach_workers(trainer_for(tmp_path, scorer="hostkit_counter"))
    assert resumed.dataflex.pipeline.scorer.rows == 0
    resumed._load_checkpoint()  # verl's own: finds the tracker, loads actor and dataloader
    assert resumed.global_steps == 2 and resumed.actor_rollout_wg.loaded == ["2"]
    restored = resumed.dataflex.pipeline.scorer
    assert (restored.rows, float(restored.total)) == (scorer.rows, float(scorer.total))
    # the resumed run continues where the first one stopped
    for trainer in (first, resumed):
        trainer.global_steps = 3
        step(trainer, 3)
    assert (restored.rows, float(restored.total)) == (scorer.rows, pytest.approx(float(scorer.total)))
    assert restored.rows == 48


def test_resuming_with_a_different_plugin_set_is_refused_before_verl_loads_anything(tmp_path, pip_site):
    pip_site.install("lk-good", "0.1.0", "lk_good", GOOD)
    first = sandbox.attach_workers(trainer_for(tmp_path, scorer="pintest_constant"))
    first.global_steps = 5
    first._save_checkpoint()

    pip_site.install("lk-extra", "0.5.0", "lk_extra", EXTRA)
    plugin_module.reset_plugin_manager()
    resumed = sandbox.attach_workers(trainer_for(tmp_path, scorer="pintest_constant"))
    with pytest.raises(PluginSetMismatch) as info:
        resumed._load_checkpoint()
    assert rows(info.value, "lk-extra") == [("unexpected", "-", "0.5.0")]
    assert "global_step_5" in str(info.value)
    assert resumed.actor_rollout_wg.loaded == []  # refused before the weights were touched


def test_allow_drift_resumes_a_drifted_set_and_the_next_checkpoint_records_the_drift(tmp_path, pip_site):
    pip_site.install("lk-good", "0.1.0", "lk_good", GOOD)
    first = sandbox.attach_workers(trainer_for(tmp_path, scorer="pintest_constant"))
    first.global_steps = 5
    first._save_checkpoint()

    pip_site.install("lk-good", "0.2.0", "lk_good", GOOD + "\n# 0.2.0\n")
    plugin_module.reset_plugin_manager()
    strict = sandbox.attach_workers(trainer_for(tmp_path, scorer="pintest_constant"))
    with pytest.raises(PluginSetMismatch, match="version changed"):
        strict._load_checkpoint()
    drifting = sandbox.attach_workers(trainer_for(tmp_path, scorer="pintest_constant", plugins={"allow_drift": True}))
    with pytest.warns(PluginDriftWarning):
        drifting._load_checkpoint()
    assert drifting.global_steps == 5
    drifting.global_steps = 6
    drifting._save_checkpoint()
    record = json.loads((tmp_path / "checkpoints" / "global_step_6" / CHECKPOINT_PINNING).read_text())
    lk_good = {d["difference"] for d in record["resume_drift"] if d["distribution"] == "lk-good"}
    assert lk_good == {"version changed", "content changed"}


def test_a_crafted_state_file_in_a_checkpoint_runs_no_code_on_resume(tmp_path, marker):
    first = sandbox.attach_workers(trainer_for(tmp_path, scorer="hostkit_counter"))
    first.global_steps = 1
    step(first, 1)
    first._save_checkpoint()
    state = tmp_path / "checkpoints" / "global_step_1" / CHECKPOINT_STATE
    torch.save({"format": 1, "global_steps": 1, "components": {"scorer": {"kind": "scorer",
                "name": "hostkit_counter", "state": {"rows": RunsCode(marker)}}}}, state)  # fmt: skip
    resumed = sandbox.attach_workers(trainer_for(tmp_path, scorer="hostkit_counter"))
    with pytest.raises(ComponentStateError, match=f"{state} holds Python objects other than tensors and plain data"):
        resumed._load_checkpoint()
    assert not marker.exists()


def test_state_that_cannot_be_saved_stops_the_save_before_verl_writes_anything(tmp_path):
    trainer = sandbox.attach_workers(trainer_for(tmp_path, scorer="hostile_unpicklable"))
    trainer.global_steps = 1
    step(trainer, 1)  # its state is a numpy array from now on
    with pytest.raises(ComponentStateError, match=hostile_suite.UNPICKLABLE_MATCH):
        trainer._save_checkpoint()
    checkpoints = tmp_path / "checkpoints"
    assert not checkpoints.exists() or not any(checkpoints.iterdir())  # no global_step_1, no tracker file


def test_state_that_cannot_be_saved_from_the_start_stops_the_trainers_constructor(tmp_path):
    with pytest.raises(ComponentStateError, match=r"dataflex scorer hostile_unpicklable_at_mount: its state cannot"):
        trainer_for(tmp_path, scorer="hostile_unpicklable_at_mount")


def test_a_damaged_state_file_is_refused_before_verl_loads_the_weights(tmp_path):
    first = sandbox.attach_workers(trainer_for(tmp_path, scorer="hostkit_counter"))
    first.global_steps = 1
    step(first, 1)
    first._save_checkpoint()
    state = tmp_path / "checkpoints" / "global_step_1" / CHECKPOINT_STATE
    state.write_bytes(state.read_bytes()[:40])
    resumed = sandbox.attach_workers(trainer_for(tmp_path, scorer="hostkit_counter"))
    with pytest.raises(ComponentStateError, match=f"{state} is truncated or corrupt"):
        resumed._load_checkpoint()
    assert resumed.actor_rollout_wg.loaded == []  # refused before verl touched the weights
