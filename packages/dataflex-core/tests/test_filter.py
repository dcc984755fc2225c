"""``mechanism: filter`` in the core: whole-group admission, rounds until full, caps, surplus, short steps."""

from __future__ import annotations

import pytest
import torch

from dataflex_core import ConfigError, IncompatibleComponentError, InvalidOutputError, Selector, register_selector
from dataflex_core.compute import COMPUTE_PREFIX
from dataflex_core.mechanisms.filter import AdmissionRounds, FilterSettings, RefillSampler
from dataflex_core.session import DataFlexSession
from dataflex_core.step import FieldSupport, HostCapabilities
from dataflex_lab.testing import rows_batch

HOST = HostCapabilities(
    name="testhost", refill=True, fields={n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")}
)
DAPO = {
    "mechanism": "filter",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
}


@register_selector("filtertest_first_row")
class FirstRow(Selector):
    """Keeps row 0 only: part of a group."""

    def act(self, scores, batch, **ctx):
        return torch.tensor([0])


def session(block=DAPO, host=HOST) -> DataFlexSession:
    flex = DataFlexSession(block)
    flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    return flex


def groups(rewards, lengths=None, offset=0):
    """One round: groups of two rows with these rewards (uid per group), 2 tokens per row unless given."""
    lengths = lengths or [2] * len(rewards)
    return rows_batch(lengths, width=3, rewards=rewards, uid=[offset + i // 2 for i in range(len(rewards))])


def test_groups_without_reward_variance_are_evicted_and_refills_fill_the_batch():
    flex = session()
    rounds = flex.admission(2)
    admitted = flex.admit(rounds, groups([1.0, 1.0, 1.0, 0.0]), 1)  # group 0 solved, group 1 mixed
    assert admitted.tolist() == [False, True] and rounds.needs_refill
    flex.admit(rounds, groups([0.0, 0.0, 0.0, 1.0], offset=10), 1)  # group 11 mixed: full now
    assert not rounds.needs_refill
    chosen = rounds.chosen()
    assert [c.tolist() for c in chosen] == [[1], [1]]
    trained = groups([1.0, 0.0, 0.0, 1.0])
    metrics = flex.run(trained, 1, admission=rounds).metrics
    assert metrics["dataflex/filter/trained_groups"] == 2.0 and metrics["dataflex/filter/admitted_fraction"] == 0.5
    assert metrics[f"{COMPUTE_PREFIX}rollouts_generated"] == 8.0  # both rounds' rows
    assert metrics[f"{COMPUTE_PREFIX}rollouts_filtered"] == 4.0 and metrics[f"{COMPUTE_PREFIX}tokens_generated"] == 16
    assert metrics[f"{COMPUTE_PREFIX}generation_rounds"] == 2.0 and metrics[f"{COMPUTE_PREFIX}refills"] == 1.0


def test_surplus_admitted_groups_are_dropped_in_generation_order():
    rounds = AdmissionRounds(2, FilterSettings())
    rounds.add(torch.tensor([True, False]), torch.tensor([2, 2]), torch.tensor([4, 4]))
    rounds.add(torch.tensor([True, True, True]), torch.tensor([2, 2, 2]), torch.tensor([4, 4, 4]))
    assert [c.tolist() for c in rounds.chosen()] == [[0], [0]]
    assert rounds.metrics(rounds.chosen())["dataflex/filter/surplus_groups"] == 2.0
    assert rounds.counts(rounds.chosen())["evicted_rollouts"] == 6


def test_caps_hold_and_a_short_step_raises_or_backfills():
    short = AdmissionRounds(3, FilterSettings(max_rounds=2))
    short.add(torch.tensor([False, True, False]), torch.full((3,), 2), torch.full((3,), 4))
    assert short.needs_refill
    short.add(torch.tensor([False, False, False]), torch.full((3,), 2), torch.full((3,), 4))
    assert not short.needs_refill  # max_rounds reached
    with pytest.raises(InvalidOutputError, match=r"admitted 1 of the 3 groups .* after 2 generation round\(s\)"):
        short.chosen()
    backfill = AdmissionRounds(3, FilterSettings(max_rounds=2, on_short="backfill"))
    for admitted in short.admitted:
        backfill.add(admitted, torch.full((3,), 2), torch.full((3,), 4))
    chosen = backfill.chosen()
    assert [c.tolist() for c in chosen] == [[0, 1, 2], []]  # evicted groups of the first round complete it
    assert backfill.metrics(chosen)["dataflex/filter/backfilled_groups"] == 2.0


def test_a_group_without_a_valid_row_is_never_admitted():
    flex = session({**DAPO, "actuator": {"name": "threshold_band", "params": {"low": -1.0, "high": 1.0e9}}})
    rounds = flex.admission(2)
    admitted = flex.admit(rounds, groups([1.0, 0.0, 0.0, 0.0], lengths=[2, 2, 0, 0]), 1)
    assert admitted.tolist() == [True, False]


def test_a_selector_that_keeps_part_of_a_group_is_named():
    flex = session({**DAPO, "actuator": {"name": "filtertest_first_row"}})
    with pytest.raises(InvalidOutputError, match="kept part of 1 group.* admits or evicts whole groups"):
        flex.admit(flex.admission(2), groups([1.0, 0.0, 1.0, 0.0]), 1)


def test_a_host_that_cannot_refill_refuses_filter_with_its_reason():
    host = HostCapabilities(name="otherhost", refill_reason="it generates once per step", fields=HOST.fields)
    with pytest.raises(IncompatibleComponentError, match="otherhost cannot refill: it generates once per step"):
        session(host=host)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_rounds": 0}, "max_rounds must be an integer >= 1"),
        ({"on_short": "shrink"}, "on_short='shrink' is not one of raise, backfill"),
        ({"max_round": 2}, r"unknown keys \['max_round'\]"),
    ],
)
def test_filter_settings_are_checked(settings, message):
    with pytest.raises(ConfigError, match=message):
        session({**DAPO, "filter": settings})


def test_refills_are_deterministic_given_the_seed_and_resume_where_they_stopped():
    first = RefillSampler(10, 4, seed=3)
    drawn = [first.next_block() for _ in range(2)]
    assert drawn == [RefillSampler(10, 4, seed=3).next_block(), drawn[1]] and len(set(drawn[0] + drawn[1])) == 8
    state = first.state_dict()
    expected = first.next_block()
    resumed = RefillSampler(10, 4, seed=0)
    resumed.load_state_dict(state)
    assert resumed.next_block() == expected
