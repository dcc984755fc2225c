"""State that loads but is wrong is refused at resume, naming the file, the component and the field (issue 39.7).

The files are what a real save writes (a ledger's own ``state_dict``), then altered the way a bad copy, an edit
or another tool would: a column cut, a negative or NaN count, a negative step.
"""

from __future__ import annotations

import pytest
import torch

from dataflex_core.errors import ConfigError
from dataflex_core.ledger import PromptLedger
from dataflex_core.step import PromptIds
from dataflex_core.step.state import CHECKPOINT_STATE, STATE_FORMAT, ComponentStateError, read_component_state


def _ledger_state() -> dict:
    ledger = PromptLedger(PromptIds([10, 11, 12, 13], "index"))
    ledger.rollouts += torch.tensor([4, 4, 2, 2])
    ledger.times_sampled += 1
    return ledger.state_dict()


def _write(folder, state: dict, global_steps: int = 3) -> None:
    payload = {
        "format": STATE_FORMAT,
        "global_steps": global_steps,
        "components": {"history": {"kind": "history", "name": "ledger", "state": {"ledger": state}}},
    }
    torch.save(payload, folder / CHECKPOINT_STATE)


def test_a_sound_ledger_state_reads(tmp_path):
    _write(tmp_path, _ledger_state())
    saved = read_component_state(tmp_path)
    assert saved.global_steps == 3 and saved.components["history"]["state"]["ledger"]["rollouts"].tolist() == [
        4,
        4,
        2,
        2,
    ]


def _cut(state):
    state["rollouts"] = state["rollouts"][:2]


def _negative(state):
    state["rollouts"][1] = -3


def _nan(state):
    state["successes"][2] = float("nan")


@pytest.mark.parametrize(
    ("alter", "field", "says"),
    [
        (_cut, "rollouts", "has 2 rows for 4 prompt ids"),
        (_negative, "rollouts", "holds -3 at row 1"),
        (_nan, "successes", "holds nan at row 2: every counter is a finite number"),
    ],
    ids=["column-cut", "negative-count", "nan-count"],
)
def test_a_wrong_ledger_column_is_refused_naming_the_component_and_field(tmp_path, alter, field, says):
    state = _ledger_state()
    alter(state)
    _write(tmp_path, state)
    with pytest.raises(ComponentStateError) as caught:
        read_component_state(tmp_path)
    message = str(caught.value)
    assert message.startswith(str(tmp_path / CHECKPOINT_STATE))
    assert f"history history 'ledger': state['ledger'][{field!r}]" in message and says in message
    assert "\n" not in message and "start the dataflex components fresh" in message


def test_a_negative_global_steps_is_refused(tmp_path):
    _write(tmp_path, _ledger_state(), global_steps=-5)
    with pytest.raises(ComponentStateError, match="global_steps=-5 is negative"):
        read_component_state(tmp_path)


def test_a_column_changed_after_the_state_file_check_is_checked_again(tmp_path):
    _write(tmp_path, _ledger_state())
    state = read_component_state(tmp_path).components["history"]["state"]["ledger"]
    state["times_sampled"][1] = -5  # in place, after the file's check
    with pytest.raises(ConfigError, match="has times_sampled=-5: it is at least 0"):
        PromptLedger(PromptIds([10, 11, 12, 13], "index")).load_state_dict(state)
