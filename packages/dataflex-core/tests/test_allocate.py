"""``mechanism: allocate`` in the core: counts under the budget, the contract, warm-up, the ledger feed, refusals."""

from __future__ import annotations

import pytest
import torch

from dataflex_core import (
    Allocator,
    ConfigError,
    IncompatibleComponentError,
    InvalidOutputError,
    Scorer,
    even_split,
    greedy_allocation,
    register_allocator,
    register_scorer,
)
from dataflex_core.contracts import allocation_problem, check_allocation
from dataflex_core.mechanisms.allocate import N_MAX_FACTOR, allocate_settings
from dataflex_core.session import DataFlexSession, PromptCounts
from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport
from dataflex_lab.testing import PromptDataset, rows_batch

HOST = HostCapabilities(
    name="testhost",
    seams={LossWeights: SeamSupport(True), PromptCounts: SeamSupport(True)},
    timings=("pre_rollout", "post_reward", "post_advantage"),
    fields={n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")},
)


@register_scorer("alloctest_rollouts")
class RolloutsSeen(Scorer):
    """Each prompt's rollouts so far, from the ledger."""

    timing = "pre_rollout"
    requires = ["rollouts"]

    def score(self, batch, step_id, **ctx):
        return batch.batch["rollouts"].to(torch.float32)


@register_allocator("alloctest_first_gets_rest")
class FirstGetsRest(Allocator):
    """n_min each, every spare rollout to the first prompt."""

    def act(self, scores, batch, *, budget, n_min, n_max, **ctx):
        counts = torch.full((len(batch),), n_min, dtype=torch.int64)
        counts[0] += budget - int(counts.sum())
        return counts


@register_allocator("alloctest_one_short")
class OneShort(Allocator):
    """Even split minus one rollout: breaks the budget."""

    def act(self, scores, batch, *, budget, n_min, n_max, **ctx):
        counts = even_split(len(batch), budget)
        counts[-1] -= 1
        return counts


def session(actuator="alloctest_first_gets_rest", host=HOST, **block) -> DataFlexSession:
    flex = DataFlexSession(
        {"mechanism": "allocate", "scorer": {"name": "alloctest_rollouts"}, "actuator": {"name": actuator}, **block}
    )
    flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    assert flex.train_sampler(PromptDataset([10, 11, 12, 13]), batch_size=2, seed=0) is None  # verl's sampler stays
    return flex


def rollouts(prompt_ids, counts, uids, rewards):
    """The rows a framework returns: counts[i] rollouts of prompt i, group uids[i], one reward per row."""
    index = [p for p, n in zip(prompt_ids, counts) for _ in range(n)]
    uid = [u for u, n in zip(uids, counts) for _ in range(n)]
    return rows_batch([2] * len(index), width=3, rewards=rewards, uid=uid, columns={"index": index})


def test_counts_sum_to_the_default_budget_and_the_run_checks_and_feeds_them():
    flex = session()
    counts = flex.seam(PromptCounts).counts([12, 10], 1, rollout_n=4, uids=["a", "b"])
    assert counts.tolist() == [6, 2]  # budget 2 x 4: n_min 2 each, the spare 4 to the first
    batch = rollouts([12, 10], [6, 2], ["a", "b"], [1, 0, 1, 0, 1, 1, 0, 0])
    metrics = flex.run(batch, 1).metrics
    assert metrics["dataflex/allocate/budget"] == 8.0 and metrics["dataflex/allocate/n_max"] == 6.0
    assert metrics["dataflex/allocate/prompts_at_n_min"] == 1.0 and metrics["dataflex/allocate/n_mean"] == 4.0
    assert metrics["dataflex/allocate/mismatched_groups"] == 0.0 and metrics["dataflex/allocate/groups"] == 2.0
    assert metrics["dataflex/compute/rollouts_generated"] == 8.0
    ledger = flex.ledger
    assert ledger.rollouts.tolist() == [2, 0, 6, 0] and ledger.successes.tolist() == [0.0, 0.0, 4.0, 0.0]
    assert "ledger" in flex.stateful()


def test_verls_padding_rows_anywhere_count_as_no_prompts_rollouts():
    """verl V1 pads a step with empty rows of one shared uid (the template row's prompt id elsewhere) and reorders
    the batch: the step's metrics and the ledger are those of the same step without them."""
    flex, plain = session(), session()
    for f in (flex, plain):
        f.seam(PromptCounts).counts([12, 10], 1, rollout_n=4, uids=["a", "b"])
    rewards = [1, 0, 1, 0, 1, 1, 0, 0]
    metrics = plain.run(rollouts([12, 10], [6, 2], ["a", "b"], rewards), 1).metrics
    order = [8, 0, 1, 9, 2, 3, 4, 5, 10, 6, 7]  # three padding rows (8-10) scattered among the eight real ones
    lengths, padded_rewards = [2] * 8 + [0] * 3, rewards + [5, 5, 5]  # padding: empty, junk rewards
    index, uid = [12] * 6 + [10] * 2 + [12] * 3, ["a"] * 6 + ["b"] * 2 + ["pad" + "0" * 32] * 3
    padded = rows_batch(
        [lengths[i] for i in order], width=3, rewards=[padded_rewards[i] for i in order],
        uid=[uid[i] for i in order], columns={"index": [index[i] for i in order]}, padding=[i >= 8 for i in order],
    )  # fmt: skip
    timing = "dataflex/hook_time_s"
    assert {k: v for k, v in flex.run(padded, 1).metrics.items() if k != timing} == {
        k: v for k, v in metrics.items() if k != timing
    }
    assert metrics["dataflex/allocate/groups"] == 2.0 and metrics["dataflex/allocate/unallocated_groups"] == 0.0
    for column in ("rollouts", "successes"):
        assert torch.equal(getattr(flex.ledger, column), getattr(plain.ledger, column))


def test_a_group_that_comes_back_with_another_count_is_counted():
    flex = session()
    flex.seam(PromptCounts).counts([12, 10], 1, rollout_n=4, uids=["a", "b"])
    metrics = flex.run(rollouts([12, 10], [5, 2], ["a", "b"], [1.0] * 7), 1).metrics
    assert metrics["dataflex/allocate/mismatched_groups"] == 1.0


def test_a_configured_budget_and_n_max_hold():
    flex = session(allocate={"budget": 10, "n_max": 5})
    with pytest.raises(InvalidOutputError, match="more than n_max=5"):
        flex.seam(PromptCounts).counts([12, 10], 1, rollout_n=4)


def test_an_infeasible_budget_names_the_keys():
    flex = session(allocate={"budget": 3})
    with pytest.raises(ConfigError, match="2 prompts x n_min=2 = 4 rollouts exceed the budget of 3.*allocate.budget"):
        flex.seam(PromptCounts).counts([12, 10], 1, rollout_n=4)


def test_invalid_counts_raise_or_fall_back_to_an_even_split():
    with pytest.raises(
        InvalidOutputError, match="gave 7 rollouts to 2 prompts at step 1; they must sum to the budget, 8"
    ):
        session("alloctest_one_short").seam(PromptCounts).counts([12, 10], 1, rollout_n=4)
    flex = session("alloctest_one_short", on_invalid="uniform")
    assert flex.seam(PromptCounts).counts([12, 10], 1, rollout_n=4).tolist() == [4, 4]
    assert flex.mechanism.last.fallback


def test_before_warmup_the_budget_is_split_evenly_without_the_components():
    flex = session(warmup_step=3)
    assert flex.seam(PromptCounts).counts([12, 10, 11], 1, rollout_n=3, uids=["a", "b", "c"]).tolist() == [3, 3, 3]
    metrics = flex.run(rollouts([12, 10, 11], [3, 3, 3], "abc", [1.0] * 9), 1).metrics
    assert metrics["dataflex/allocate/fallback"] == 1.0 and "dataflex/allocate/even" not in metrics  # alias gone
    assert metrics["dataflex/allocate/seen_before"] == 0.0  # first step: the ledger knew none of them
    assert flex.ledger.rollouts.tolist() == [3, 3, 3, 0]  # fed during warm-up
    flex.seam(PromptCounts).counts([12, 10], 2, rollout_n=3, uids=["d", "e"])
    assert flex.mechanism.last.seen_before == 1.0  # both were rolled out at step 1


def test_a_host_that_cannot_vary_n_refuses_at_mount_with_its_reason():
    host = HostCapabilities(
        name="fixedhost",
        seams={PromptCounts: SeamSupport(False, "it groups by a fixed num_generations")},
        timings=HOST.timings,
    )
    with pytest.raises(IncompatibleComponentError, match="fixedhost cannot vary them: it groups by a fixed num_gen"):
        session(host=host)


def test_n_min_below_two_is_refused_under_a_group_estimator():
    with pytest.raises(ConfigError, match="n_min=1.*at least 2"):
        session(allocate={"n_min": 1})
    with pytest.raises(ConfigError, match="unknown keys \\['n'\\]"):
        session(allocate={"n": 4})


def test_the_contract_and_the_rules():
    assert allocation_problem(3, 5, 2, None) == "3 prompts x n_min=2 = 6 rollouts exceed the budget of 5"
    assert allocation_problem(3, 10, 2, 3) == "3 prompts x n_max=3 = 9 rollouts fall short of the budget of 10"
    assert (
        check_allocation(torch.tensor([2.0, 3.0]), 2, budget=5, n_min=2, n_max=3, owner="a", step=0).dtype
        == torch.int64
    )
    with pytest.raises(InvalidOutputError, match="not whole numbers"):
        check_allocation(torch.tensor([2.5, 2.5]), 2, budget=5, n_min=2, n_max=None, owner="a", step=0)
    with pytest.raises(InvalidOutputError, match="shape \\(3,\\)"):
        check_allocation(torch.tensor([2, 2, 1]), 2, budget=5, n_min=2, n_max=None, owner="a", step=0)
    assert even_split(3, 10).tolist() == [4, 3, 3]
    # a value concave in n: sqrt(n) * w; greedy gives the spare to the largest marginal gains
    w = torch.tensor([4.0, 1.0])
    assert greedy_allocation(lambda n: w * n.double().sqrt(), 2, 10, 2, None).tolist() == [8, 2]


# -- overflow (issue 39, items 10 and 11) -------------------------------------------------------------------


@register_allocator("alloctest_wraps_int64")
class WrapsInt64(Allocator):
    """Counts whose int64 sum wraps onto the budget: two of 2^63-1 and the rest."""

    def act(self, scores, batch, *, budget, n_min, n_max, **ctx):
        top = 2**63 - 1
        return torch.tensor([top, top, budget + 2] + [n_min] * (len(batch) - 3), dtype=torch.int64)


def test_counts_whose_int64_sum_wraps_onto_the_budget_are_refused_naming_the_plugin():
    counts = torch.tensor([2**63 - 1, 2**63 - 1, 10], dtype=torch.int64)
    assert int(counts.sum()) == 8  # the wrap the check must not trust
    with pytest.raises(InvalidOutputError, match="a gave 3 prompt\\(s\\) more rollouts than the whole budget, 8"):
        check_allocation(counts, 3, budget=8, n_min=2, n_max=None, owner="a", step=0)
    with pytest.raises(InvalidOutputError, match="alloctest_wraps_int64.*more rollouts than the whole budget, 8"):
        session("alloctest_wraps_int64", allocate={"budget": 8}).seam(PromptCounts).counts([12, 10, 11], 1, rollout_n=4)


def test_a_count_above_the_budget_is_refused_even_when_negatives_balance_the_sum():
    with pytest.raises(InvalidOutputError, match="fewer than n_min=2"):
        check_allocation(torch.tensor([20, -12]), 2, budget=8, n_min=2, n_max=None, owner="a", step=0)
    with pytest.raises(InvalidOutputError, match="more rollouts than the whole budget, 8.*most 1e\\+30"):
        check_allocation(
            torch.tensor([1e30, 2.0], dtype=torch.float64), 2, budget=8, n_min=2, n_max=None, owner="a", step=0
        )


@pytest.mark.parametrize("key", ["budget", "n_max", "n_min"])
def test_an_astronomical_allocate_setting_is_refused_at_mount_with_the_value_and_the_fix(key):
    # the key, the range, the value seen
    with pytest.raises(ConfigError, match=f"allocate.{key} must be an integer from 1 to {2**40} .*got {10**30}"):
        session(allocate={key: 10**30})


def test_n_max_unset_caps_a_prompt_at_eight_times_the_mean_count_and_a_greedy_allocator_is_held_to_it():
    settings = allocate_settings({"allocate": {"budget": None, "n_min": 2}})
    assert N_MAX_FACTOR == 8 and settings.n_max_for(10, 160) == 128 and settings.n_max_for(3, 10) == 32
    assert allocate_settings({"allocate": {"n_max": 5}}).n_max_for(10, 40) == 5  # a set n_max stays as set
    assert settings.n_max_for(1000, 1001) == 16 and settings.n_max_for(4, 0) == 2  # at least n_min
    flex = DataFlexSession(
        {"mechanism": "allocate", "scorer": {"name": "alloctest_rollouts"},
         "actuator": {"name": "alloctest_first_gets_rest"}, "allocate": {"budget": 200}}
    )  # fmt: skip
    flex.mount(HOST, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    flex.train_sampler(PromptDataset(list(range(10))), batch_size=10, seed=0)
    # 200 rollouts over 10 prompts: mean 20, cap 160; the first would get 200 - 9 x 2 = 182
    with pytest.raises(InvalidOutputError, match="more than n_max=160"):
        flex.seam(PromptCounts).counts(list(range(10)), 1, rollout_n=4, uids=[str(i) for i in range(10)])
