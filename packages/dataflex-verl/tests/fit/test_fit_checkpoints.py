"""Checkpoints and plugin locks in verl's own fit loop: resume restores component state; other plugin sets are refused."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from fit_helpers import LINES_LEGACY_IN_FULL, dataflex_spec, reweight, sequence_mean_run, sequence_mean_spec

from dataflex_core.lock import PluginSetMismatch, read_lock, write_lock
from dataflex_core.lock.pinning import CHECKPOINT_PLUGIN_SET
from dataflex_core.step.state import CHECKPOINT_STATE

pytestmark = pytest.mark.fit

COUNTING = reweight("fittest_counting", "softmax")


def _first_run(fits, line):
    """A run with the stateful counting scorer, checkpointed: ``(the run, the step its checkpoint holds)``.

    V1: the sequence-mean run of ``test_fit_loop.py`` (one step); legacy: two steps, checkpointed at step 2.
    """
    if line == "v1":
        return sequence_mean_run(fits), 1
    return fits.run("counting_first_legacy", dataflex_spec(line, COUNTING, steps=2, save_freq=2)), 2


def _resume_spec(line, step, checkpoints):
    """The first run's settings, resumed from its checkpoint in ``checkpoints`` for one more step."""
    if line == "v1":
        return sequence_mean_spec(steps=step + 1, resume_mode="auto", checkpoint_dir=checkpoints)
    return dataflex_spec(line, COUNTING, steps=step + 1, save_freq=2, resume_mode="auto", checkpoint_dir=checkpoints)


def _copy_checkpoints(first, step, destination):
    """The first run's checkpoints, copied so each resume starts from the same folder."""
    shutil.copytree(first.checkpoints, destination)
    assert (destination / "latest_checkpointed_iteration.txt").read_text().strip() == str(step)
    return destination


def _with_another_release(checkpoints, step):
    """The checkpoint's plugin set as if one plugin had been upgraded since: ``(plugin, the version recorded)``."""
    record = checkpoints / f"global_step_{step}" / CHECKPOINT_PLUGIN_SET
    plugin_set = read_lock(record)
    name = "dataflex-reweighters-sample"
    changed = dataclasses.replace(plugin_set.plugins[name], version="0.0.9")
    write_lock(dataclasses.replace(plugin_set, plugins={**plugin_set.plugins, name: changed}), record)
    return name, "0.0.9"


def _resume_and_check_state(fits, line, tmp_path):
    """Resume the first run; the scorer continued its count, and the compute totals every rollout before."""
    first, step = _first_run(fits, line)
    assert [r["calls"] for r in first.records("counting")] == list(range(1, step + 1))
    _assert_records_the_plugin_set(first, step)
    checkpoints = _copy_checkpoints(first, step, tmp_path / "checkpoints")
    resumed = fits.run(f"counting_resumed_{line}", _resume_spec(line, step, checkpoints))
    assert [r["step"] for r in resumed.steps] == [step + 1]
    assert resumed.records("counting") == [{"step": step + 1, "calls": step + 1}]
    generated = "dataflex/compute/rollouts_generated"
    before = [r["metrics"] for r in first.steps]
    assert all(m[generated] > 0 and m["dataflex/compute/tokens_generated"] > 0 for m in before)
    after = resumed.steps[0]["metrics"]
    assert after[f"{generated}_total"] == sum(m[generated] for m in before) + after[generated]
    return first, step


def _assert_records_the_plugin_set(first, step):
    folder = first.checkpoints / f"global_step_{step}"
    assert (folder / CHECKPOINT_STATE).exists()
    from dataflex_core.lock import scan_environment

    # the checkpoint records the whole installed plugin set the run had
    assert set(read_lock(folder / CHECKPOINT_PLUGIN_SET).plugins) == set(scan_environment().plugins)


@pytest.mark.full
def test_resume_restores_component_state_and_records_the_plugin_set(fits, tmp_path):
    _resume_and_check_state(fits, "v1", tmp_path)


@pytest.mark.full
def test_resume_with_another_plugin_set_is_refused(fits, tmp_path):
    first, step = _first_run(fits, "v1")
    moved = _copy_checkpoints(first, step, tmp_path / "checkpoints")
    name, version = _with_another_release(moved, step)
    refused = fits.run("counting_refused_v1", _resume_spec("v1", step, moved), expect_error=True)
    assert refused.error is not None
    message = str(refused.error)
    assert name in message and version in message
    assert refused.steps == []  # refused before any step


@pytest.mark.full
def test_the_legacy_line_resumes_component_state_and_refuses_another_plugin_set(fits, tmp_path):
    first, step = _resume_and_check_state(fits, "legacy", tmp_path)
    # another plugin set: the legacy trainer's own _load_checkpoint, which its fit calls first (the resume
    # above went through it), refuses it before verl loads anything; no workers are needed to get there
    moved = _copy_checkpoints(first, step, tmp_path / "refused")
    name, version = _with_another_release(moved, step)
    trainer = legacy_trainer(fits.runner.compose(_resume_spec("legacy", step, moved), fits.workspace))
    with pytest.raises(PluginSetMismatch) as refused:
        trainer._load_checkpoint()
    assert name in str(refused.value) and version in str(refused.value)


def legacy_trainer(config):
    """verl's legacy trainer as its task runner builds it (the DataFlex class), constructed without workers."""
    import fit_components  # noqa: F401 - the counting scorer, registered in this process too
    import verl.trainer.main_ppo_v0 as main_ppo_v0
    from verl.trainer.ppo.ray_trainer import Role

    prompts = [{"index": i} for i in range(16)]
    return main_ppo_v0.RayPPOTrainer(
        config, tokenizer=None, role_worker_mapping={Role.ActorRollout: object}, resource_pool_manager=None,
        train_dataset=prompts, val_dataset=prompts, collate_fn=lambda rows: rows,
    )  # fmt: skip


@pytest.mark.parametrize("line", LINES_LEGACY_IN_FULL)
def test_a_lock_without_the_configured_plugin_is_refused_in_the_task_runner(fits, tmp_path, line):
    from dataflex_core.lock import scan_environment

    lock = tmp_path / "dataflex_plugins.lock"
    installed = scan_environment()
    unlocked = "dataflex-scorers-advantage"
    assert unlocked in installed.plugins
    plugins = {name: record for name, record in installed.plugins.items() if name != unlocked}
    write_lock(dataclasses.replace(installed, plugins=plugins), lock)

    block = {**reweight("advantage_magnitude", "softmax"), "plugins": {"lock": str(lock)}}
    refused = fits.run(f"lock_refused_{line}", dataflex_spec(line, block, steps=1), expect_error=True)
    assert refused.error is not None
    assert unlocked in str(refused.error)
    assert refused.steps == []
