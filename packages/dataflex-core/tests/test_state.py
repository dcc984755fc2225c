"""Component state in checkpoints: data only, checked before anything is written, one clear line on a bad file.

The state file is read with ``torch.load(weights_only=True)``; a component
whose state would not load back that way is refused at mount and before each
save, naming it and its distribution.
"""

from __future__ import annotations

import io
import os
import pickle
import threading

import numpy as np
import pytest
import torch

from dataflex_core import ComponentSpec, PluginInfo, Scorer
from dataflex_core.step import PromptHistory, PromptIds
from dataflex_core.step.state import (
    CHECKPOINT_STATE,
    STATE_FORMAT,
    ComponentStateError,
    check_component_state,
    encode_component_state,
    read_component_state,
    restore_component_state,
    write_component_state,
)
from dataflex_lab.testing.hostile import RunsCode


class RunningMean(Scorer):
    """A stateful scorer whose state the test sets directly."""

    name = "running_mean"
    requires = ["advantages"]

    def __init__(self, state=None, **kwargs):
        super().__init__(**kwargs)
        self.state = {"count": 3, "mean": 0.25, "window": torch.arange(4.0)} if state is None else state

    def score(self, batch, step_id, **ctx):
        return torch.zeros(len(batch))

    def state_dict(self):
        return self.state

    def load_state_dict(self, state):
        self.state = state


LABELS = {"scorer": ComponentSpec("scorer", "running_mean", RunningMean, PluginInfo("acme", "acme", "acme-dataflex", "1.2")).label}  # fmt: skip


def history() -> PromptHistory:
    record = PromptHistory(PromptIds(["p-a", "p-b", "p-c"], "uid"), success_threshold=0.5)
    record.record(torch.tensor([0, 0, 2]), torch.tensor([1.0, 0.0, 1.0]), step=1)
    return record


def test_state_round_trips_through_a_weights_only_load(tmp_path):
    components = {"scorer": RunningMean(), "history": history()}
    check_component_state(components)
    write_component_state(tmp_path, encode_component_state(components, 7))
    saved = read_component_state(tmp_path)
    assert saved.global_steps == 7
    fresh = {"scorer": RunningMean(state={}), "history": PromptHistory(PromptIds(["p-a", "p-b", "p-c"], "uid"), 0.5)}
    restore_component_state(read_component_state(tmp_path), fresh, tmp_path)
    assert fresh["scorer"].state["count"] == 3 and torch.equal(fresh["scorer"].state["window"], torch.arange(4.0))
    assert torch.equal(fresh["history"].rollouts, components["history"].rollouts)
    torch.load(tmp_path / CHECKPOINT_STATE, weights_only=True)  # what any reader may do


@pytest.mark.parametrize(
    ("state", "where"),
    [
        ({"window": np.arange(3)}, "state['window'] is a numpy.ndarray"),
        ({"ema": {"decay": np.float64(0.9)}}, "state['ema']['decay'] is a numpy.float64"),
        ({"lock": threading.Lock()}, "state['lock'] is a _thread.lock"),
        ({"fn": lambda x: x}, "state['fn'] is a builtins.function"),
    ],
)
def test_state_that_would_not_load_back_is_refused_at_mount_naming_the_component(state, where):
    with pytest.raises(ComponentStateError) as info:
        check_component_state({"scorer": RunningMean(state=state)}, LABELS)
    message = str(info.value)
    assert message.startswith("dataflex scorer running_mean (acme-dataflex==1.2): its state cannot be checkpointed")
    assert where in message and ".tolist()" in message


def test_a_state_dict_that_raises_or_is_not_a_dict_is_named():
    class Broken(RunningMean):
        def state_dict(self):
            raise RuntimeError("history not ready")

    with pytest.raises(ComponentStateError, match=r"dataflex scorer \(scorer 'running_mean'\): state_dict\(\) raised RuntimeError: history not ready"):  # fmt: skip
        check_component_state({"scorer": Broken()})
    with pytest.raises(ComponentStateError, match="state_dict\\(\\) returned a list"):
        check_component_state({"scorer": RunningMean(state=[1, 2])})


def test_a_save_whose_state_stopped_round_tripping_writes_nothing(tmp_path):
    component = RunningMean()
    write_component_state(tmp_path, encode_component_state({"scorer": component}, 1))
    before = (tmp_path / CHECKPOINT_STATE).read_bytes()
    component.state = {"window": np.arange(3)}  # what a step did to it after mount
    with pytest.raises(ComponentStateError, match="acme-dataflex==1.2"):
        encode_component_state({"scorer": component}, global_steps=2, labels=LABELS)
    assert (tmp_path / CHECKPOINT_STATE).read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [CHECKPOINT_STATE]


def test_the_state_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    write_component_state(tmp_path, encode_component_state({"scorer": RunningMean()}, 1))
    before = (tmp_path / CHECKPOINT_STATE).read_bytes()

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="No space left"):
        write_component_state(tmp_path, encode_component_state({"scorer": RunningMean()}, 2))
    assert (tmp_path / CHECKPOINT_STATE).read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [CHECKPOINT_STATE]  # no temporary file left behind


def test_a_crafted_state_file_is_refused_and_runs_no_code(tmp_path, marker):
    payload = {"format": STATE_FORMAT, "global_steps": 2, "components": {"scorer": {"kind": "scorer",
               "name": "running_mean", "state": {"x": RunsCode(marker)}}}}  # fmt: skip
    torch.save(payload, tmp_path / CHECKPOINT_STATE)
    with pytest.raises(ComponentStateError) as info:
        restore_component_state(read_component_state(tmp_path), {"scorer": RunningMean()}, tmp_path)
    message = str(info.value)
    assert "holds Python objects other than tensors and plain data" in message and "GLOBAL io.open" in message
    assert "it is not loaded" in message and str(tmp_path / CHECKPOINT_STATE) in message
    assert not marker.exists()


def _torch_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


GOOD = _torch_bytes({"format": STATE_FORMAT, "global_steps": 1, "components": {}})


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"", "is empty"),
        (GOOD[: len(GOOD) // 2], "is truncated or corrupt"),
        (b"\x00\x01 not a checkpoint at all", "is not a state file torch.save wrote"),
        (pickle.dumps({"format": STATE_FORMAT}), "is not a state file torch.save wrote"),
        (_torch_bytes([1, 2, 3]), "is not a DataFlex state file (a list without a format number)"),
        (_torch_bytes({"components": {}}), "is not a DataFlex state file"),
        (_torch_bytes({"format": "1", "global_steps": 1, "components": {}}), "has state format '1'"),
        (_torch_bytes({"format": STATE_FORMAT + 1, "global_steps": 1, "components": {}}), "upgrade dataflex-core"),
        (
            _torch_bytes({"format": STATE_FORMAT, "global_steps": 1, "components": {"scorer": {"kind": "scorer"}}}),
            "is malformed",
        ),  # fmt: skip
        (_torch_bytes({"format": STATE_FORMAT, "components": {}}), "is malformed"),
    ],
    ids=[
        "empty",
        "truncated",
        "garbage",
        "plain-pickle",
        "not-a-dict",
        "no-format",
        "format-str",
        "newer",
        "entry",
        "no-steps",
    ],  # fmt: skip
)
def test_a_bad_state_file_is_one_line_naming_the_file_what_is_wrong_and_the_fix(tmp_path, data, what):
    (tmp_path / CHECKPOINT_STATE).write_bytes(data)
    with pytest.raises(ComponentStateError) as info:
        read_component_state(tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path / CHECKPOINT_STATE))
    assert what in message and f"delete {CHECKPOINT_STATE}" in message


def test_no_state_file_is_a_fresh_start_not_an_error(tmp_path, caplog):
    assert read_component_state(tmp_path) is None
    restore_component_state(read_component_state(tmp_path), {"scorer": RunningMean()}, tmp_path)
    assert "dataflex components start fresh (stateful: scorer)" in caplog.text
