"""Checkpoints and plugin locks in verl's own fit loop: resume restores component state; other plugin sets are refused."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from fit_helpers import LINES, dataflex_spec, reweight

from dataflex_core.lock import read_lock, write_lock
from dataflex_core.lock.pinning import CHECKPOINT_PLUGIN_SET
from dataflex_core.step.state import CHECKPOINT_STATE

pytestmark = pytest.mark.fit

COUNTING = reweight("fittest_counting", "softmax")


def _first_run(fits, line):
    """Two steps with a stateful scorer, checkpointed at step 2."""
    return fits.run(f"counting_first_{line}", dataflex_spec(line, COUNTING, steps=2, save_freq=2))


def _copy_checkpoints(first, destination):
    """The first run's checkpoints, copied so each resume starts from the same step-2 folder."""
    shutil.copytree(first.checkpoints, destination)
    assert (destination / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    return destination


@pytest.mark.parametrize("line", LINES)
def test_resume_restores_component_state_and_records_the_plugin_set(fits, tmp_path, line):
    first = _first_run(fits, line)
    assert [r["calls"] for r in first.records("counting")] == [1, 2]
    folder = first.checkpoints / "global_step_2"
    assert (folder / CHECKPOINT_STATE).exists()
    from dataflex_core.lock import scan_environment

    # the checkpoint records the whole installed plugin set the run had
    assert set(read_lock(folder / CHECKPOINT_PLUGIN_SET).plugins) == set(scan_environment().plugins)

    resumed = fits.run(
        f"counting_resumed_{line}",
        dataflex_spec(
            line,
            COUNTING,
            steps=3,
            save_freq=2,
            resume_mode="auto",
            checkpoint_dir=_copy_checkpoints(first, tmp_path / "checkpoints"),
        ),
    )
    # verl resumed at step 3, and the scorer continued its count instead of starting over
    assert [r["step"] for r in resumed.steps] == [3]
    assert resumed.records("counting") == [{"step": 3, "calls": 3}]
    # and so did the compute totals: every rollout of verl's batch counted, every step
    generated = "dataflex/compute/rollouts_generated"
    before = [r["metrics"] for r in first.steps]
    assert all(m[generated] > 0 and m["dataflex/compute/tokens_generated"] > 0 for m in before)
    after = resumed.steps[0]["metrics"]
    assert after[f"{generated}_total"] == sum(m[generated] for m in before) + after[generated]


@pytest.mark.parametrize("line", LINES)
def test_resume_with_another_plugin_set_is_refused(fits, tmp_path, line):
    first = _first_run(fits, line)
    # the checkpoint was written with another release of one plugin (as after an upgrade between runs)
    moved = _copy_checkpoints(first, tmp_path / "checkpoints")
    record = moved / "global_step_2" / CHECKPOINT_PLUGIN_SET
    plugin_set = read_lock(record)
    name = "dataflex-reweighters-sample"
    changed = dataclasses.replace(plugin_set.plugins[name], version="0.0.9")
    write_lock(dataclasses.replace(plugin_set, plugins={**plugin_set.plugins, name: changed}), record)

    refused = fits.run(
        f"counting_refused_{line}",
        dataflex_spec(line, COUNTING, steps=3, resume_mode="auto", checkpoint_dir=moved),
        expect_error=True,
    )
    assert refused.error is not None
    message = str(refused.error)
    assert name in message and "0.0.9" in message
    assert refused.steps == []  # refused before any step


@pytest.mark.parametrize("line", LINES)
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
