"""A resume from a checkpoint without DataFlex's files is refused unless the run says to start its components fresh.

Every DataFlex save writes the plugin set and the component state; a checkpoint that lacks either was written
without DataFlex or by a process that stopped between the framework's save and DataFlex's (issue 39.6).
"""

from __future__ import annotations

import logging

import pytest

from dataflex_core import ConfigError
from dataflex_core.lock.pinning import CHECKPOINT_PLUGIN_SET
from dataflex_core.session import DataFlexSession
from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport
from dataflex_core.step.state import CHECKPOINT_STATE, ComponentStateError

HOST = HostCapabilities(
    name="testhost",
    seams={LossWeights: SeamSupport(True)},
    fields={n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")},
)
BLOCK = {"scorer": {"name": "group_reward_variance"}, "actuator": {"name": "softmax"}}


def session(**plugins) -> DataFlexSession:
    flex = DataFlexSession({**BLOCK, **({"plugins": plugins} if plugins else {})})
    flex.mount(HOST, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    return flex


@pytest.mark.parametrize(
    "lost", [(CHECKPOINT_STATE,), (CHECKPOINT_PLUGIN_SET,), (CHECKPOINT_STATE, CHECKPOINT_PLUGIN_SET)]
)
def test_a_checkpoint_without_dataflex_files_is_refused_naming_them_and_the_fix(tmp_path, lost):
    folder = tmp_path / "checkpoint-2"
    session().save(folder, 2)
    for name in lost:
        (folder / name).unlink()
    with pytest.raises(ComponentStateError) as info:
        session().check_resume(folder)
    message = str(info.value)
    assert "\n" not in message and str(folder) in message
    assert all(name in message for name in lost)
    assert "dataflex.plugins.allow_missing_state=true" in message and "resume from an earlier checkpoint" in message


def test_allow_missing_state_resumes_with_every_component_fresh_and_says_so(tmp_path, caplog):
    folder = tmp_path / "checkpoint-2"
    folder.mkdir()  # the framework's files only
    flex = session(allow_missing_state=True)
    with caplog.at_level(logging.WARNING):
        flex.check_resume(folder)
        flex.restore(folder)
    assert "records no dataflex plugin set" in caplog.text and "dataflex components start fresh" in caplog.text


def test_a_complete_checkpoint_resumes_as_before(tmp_path):
    folder = tmp_path / "checkpoint-2"
    session().save(folder, 2)
    flex = session()
    flex.check_resume(folder)
    flex.restore(folder)


def test_the_setting_must_be_a_boolean():
    with pytest.raises(
        ConfigError, match=r"dataflex.plugins.allow_missing_state must be true or false \(.*\), got 'yes'"
    ):
        session(allow_missing_state="yes")


def test_a_state_file_that_cannot_be_read_points_at_the_same_setting(tmp_path):
    folder = tmp_path / "checkpoint-2"
    session().save(folder, 2)
    (folder / CHECKPOINT_STATE).write_bytes(b"")
    with pytest.raises(
        ComponentStateError,
        match=r"delete dataflex_state.pt from it and set "
        r"dataflex.plugins.allow_missing_state=true to start the dataflex components fresh",
    ):
        session().check_resume(folder)
