"""A real kill (SIGKILL) between transformers' checkpoint save and DataFlex's files, under ``save_total_limit``
(issue 58, owed case 6b): the older complete checkpoint survives the rotation transformers would have run, a
resume from the newest one is refused naming it, and resuming from it trains on to the end with the limit held.
(test_hostile's kill case removes the file after a clean run, without the limit.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers.trainer_utils import get_last_checkpoint

from dataflex_core.step.state import ComponentStateError

SCRIPT = Path(__file__).with_name("checkpoint_kill.py")
#: The block checkpoint_kill.py trains (test_hostile's).
BLOCK = {"scorer": {"name": "hostkit_counter"}, "actuator": {"name": "trltest_proportional"}}
STATE_FILES = {"dataflex_plugins.lock", "dataflex_state.pt"}


def checkpoints(out: str) -> list[str]:
    return sorted(p for p in os.listdir(out) if "checkpoint-" in p)


def test_a_kill_inside_the_save_under_save_total_limit_resumes_from_the_newest_complete_checkpoint(
    tmp_path, make_trainer
):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SCRIPT.parent)}
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == -9, done.stdout[-3000:] + done.stderr[-3000:]  # killed, nothing ran after
    out = str(tmp_path / "out")
    # the rotation waits for DataFlex's files: checkpoint-1 (complete) is still there beside the torn checkpoint-2
    assert checkpoints(out) == ["checkpoint-1", "checkpoint-2"]
    assert STATE_FILES <= set(os.listdir(os.path.join(out, "checkpoint-1")))
    assert not STATE_FILES & set(os.listdir(os.path.join(out, "checkpoint-2")))
    settings = dict(max_steps=3, save_strategy="steps", save_steps=1, save_total_limit=1)
    refused = make_trainer("dapo", BLOCK, **settings)
    torn = r"checkpoint-2 has no dataflex_plugins\.lock or dataflex_state\.pt"
    with pytest.raises(ComponentStateError, match=torn + r".*the newest one with them is .*checkpoint-1: pass it as"):
        refused.train(resume_from_checkpoint=True)
    assert refused.state.global_step == 0  # refused before any step
    resumed = make_trainer("dapo", BLOCK, **settings)
    resumed.train(resume_from_checkpoint=os.path.join(out, "checkpoint-1"))
    assert resumed.state.global_step == 3
    assert checkpoints(out) == ["checkpoint-3"]  # the limit holds, the torn folder rewritten then rotated away
    assert STATE_FILES <= set(os.listdir(get_last_checkpoint(out)))
