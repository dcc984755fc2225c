"""Each component's formula on hand-computed cases, its edge cases, and its state round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dataflex_curriculum import GresoSkip, LearnabilitySampler, MoPPSBetaPosterior, SolveRateEMA, TemperatureSampler

from dataflex_core import Batch


def candidates(*rows: int) -> Batch:
    """Candidate prompts as a host hands them to a pre_rollout scorer."""
    return Batch({"prompt_index": torch.tensor(rows, dtype=torch.long)})


def outcomes(rows, rollouts, successes) -> Batch:
    """One finished step's outcomes, as ``Scorer.observe`` receives them."""
    return Batch(
        {
            "prompt_index": torch.tensor(rows, dtype=torch.long),
            "rollouts": torch.tensor(rollouts, dtype=torch.long),
            "successes": torch.tensor(successes, dtype=torch.float64),
        },
        {"prompt_id": np.asarray(rows, dtype=object)},
    )


# -- solve_rate_ema ------------------------------------------------------------------------------


def test_ema_scores_unseen_prompts_at_the_prior():
    scorer = SolveRateEMA(prior=0.2)
    scores = scorer.score(candidates(0, 5, 9), step_id=1)
    assert scores.dtype == torch.float32
    assert scores.tolist() == pytest.approx([0.2, 0.2, 0.2])


def test_ema_update_by_hand():
    scorer = SolveRateEMA(alpha=0.5, prior=0.5)
    scorer.observe(outcomes([3], [4], [3.0]), step_id=1)  # rate 3/4: 0.5 * 0.5 + 0.5 * 0.75
    assert scorer.score(candidates(3, 0), 2).tolist() == pytest.approx([0.625, 0.5])
    scorer.observe(outcomes([3, 1], [2, 4], [0.0, 4.0]), step_id=2)  # 0.5 * 0.625 + 0; 0.5 * 0.5 + 0.5 * 1
    assert scorer.score(candidates(1, 3), 3).tolist() == pytest.approx([0.75, 0.3125])
    assert scorer.table.visits.tolist() == [0, 1, 0, 2]


def test_ema_skips_prompts_without_a_scored_response_and_alpha_one_keeps_the_last_rate():
    scorer = SolveRateEMA(alpha=1.0)
    scorer.observe(outcomes([0, 1], [0, 2], [0.0, 0.5]), step_id=1)
    assert scorer.score(candidates(0, 1), 2).tolist() == pytest.approx([0.5, 0.25])


def test_ema_state_round_trip():
    scorer = SolveRateEMA(alpha=0.3)
    scorer.observe(outcomes([2, 4], [4, 4], [1.0, 4.0]), step_id=1)
    restored = SolveRateEMA(alpha=0.3)
    restored.load_state_dict(scorer.state_dict())
    assert torch.equal(restored.score(candidates(0, 2, 4, 7), 2), scorer.score(candidates(0, 2, 4, 7), 2))


@pytest.mark.parametrize(("params", "message"), [({"alpha": 0}, r"alpha must be a number in \(0, 1\]"),
                                                 ({"prior": 1.5}, r"prior must be a number in \[0, 1\]"),
                                                 ({"alpha": True}, "alpha")])  # fmt: skip
def test_ema_params_are_checked(params, message):
    with pytest.raises(ValueError, match=message):
        SolveRateEMA(**params)


def test_a_negative_prompt_index_is_an_error():
    with pytest.raises(ValueError, match="negative prompt_index -1"):
        SolveRateEMA().score(candidates(0, -1), 1)


# -- mopps -----------------------------------------------------------------------------------------


def test_mopps_posterior_by_hand():
    scorer = MoPPSBetaPosterior(thompson=False)
    scorer.observe(outcomes([2], [4], [3.0]), step_id=1)  # Beta(1 + 3, 1 + 1)
    alpha, beta = scorer.posterior(torch.tensor([2, 0]))
    assert (alpha.tolist(), beta.tolist()) == ([4.0, 1.0], [2.0, 1.0])
    assert scorer.score(candidates(2, 0), 2).tolist() == pytest.approx([4 / 6, 0.5])


def test_mopps_decay_forgets_towards_the_prior():
    scorer = MoPPSBetaPosterior(prior_alpha=1.0, prior_beta=3.0, decay=0.5, thompson=False)
    scorer.observe(outcomes([0], [4], [4.0]), step_id=1)  # alpha 0.5*1 + 0.5*1 + 4 = 5, beta 0.5*3 + 0.5*3 + 0 = 3
    scorer.observe(outcomes([0], [2], [0.5]), step_id=2)  # alpha 2.5 + 0.5 + 0.5 = 3.5, beta 1.5 + 1.5 + 1.5 = 4.5
    alpha, beta = scorer.posterior(torch.tensor([0]))
    assert (alpha.item(), beta.item()) == pytest.approx((3.5, 4.5))


def test_mopps_thompson_draws_are_reproducible_and_do_not_depend_on_the_candidates():
    scorer = MoPPSBetaPosterior(seed=3)
    scorer.observe(outcomes([0, 1, 2], [4, 4, 4], [0.0, 2.0, 4.0]), step_id=1)
    every = scorer.score(candidates(0, 1, 2, 3, 4, 5), step_id=2)
    some = scorer.score(candidates(5, 2), step_id=2)
    assert some.tolist() == [every[5].item(), every[2].item()]
    assert torch.equal(scorer.score(candidates(0, 1, 2, 3, 4, 5), step_id=2), every)
    assert not torch.equal(scorer.score(candidates(0, 1, 2, 3, 4, 5), step_id=3), every)


def test_mopps_thompson_draws_average_to_the_posterior_mean():
    scorer = MoPPSBetaPosterior()
    scorer.observe(outcomes([0], [4], [3.0]), step_id=1)  # Beta(4, 2): mean 2/3
    draws = torch.stack([scorer.score(candidates(0), step) for step in range(2000)])
    assert draws.double().mean().item() == pytest.approx(2 / 3, abs=0.02)
    assert draws.min() >= 0 and draws.max() <= 1


def test_mopps_counts_fractional_successes_and_clips_them_to_the_rollouts():
    scorer = MoPPSBetaPosterior(thompson=False)
    scorer.observe(outcomes([0, 1], [4, 2], [1.5, 3.0]), step_id=1)
    alpha, beta = scorer.posterior(torch.tensor([0, 1]))
    assert alpha.tolist() == [2.5, 3.0] and beta.tolist() == [3.5, 1.0]


def test_mopps_state_round_trip():
    scorer = MoPPSBetaPosterior(seed=1, decay=0.9)
    scorer.observe(outcomes([1, 3], [4, 4], [1.0, 3.0]), step_id=1)
    restored = MoPPSBetaPosterior(seed=1, decay=0.9)
    restored.load_state_dict(scorer.state_dict())
    assert torch.equal(restored.score(candidates(0, 1, 2, 3), 5), scorer.score(candidates(0, 1, 2, 3), 5))


@pytest.mark.parametrize(("params", "message"), [({"prior_alpha": 0}, "prior_alpha"), ({"decay": 1.5}, "decay"),
                                                 ({"thompson": 1}, "thompson must be true or false"),
                                                 ({"seed": -1}, "seed must be an integer >= 0")])  # fmt: skip
def test_mopps_params_are_checked(params, message):
    with pytest.raises(ValueError, match=message):
        MoPPSBetaPosterior(**params)


# -- learnability ----------------------------------------------------------------------------------


def test_learnability_by_hand():
    p = torch.tensor([0.0, 0.5, 1.0, 0.25])  # weights 0, 0.25, 0, 0.1875
    probs = LearnabilitySampler(exploration=0.0).act(p, candidates(0, 1, 2, 3))
    assert probs.tolist() == pytest.approx([0.0, 0.25 / 0.4375, 0.0, 0.1875 / 0.4375])
    floored = LearnabilitySampler(exploration=0.2).act(p, candidates(0, 1, 2, 3))
    assert floored.tolist() == pytest.approx([0.05, 0.8 * 0.25 / 0.4375 + 0.05, 0.05, 0.8 * 0.1875 / 0.4375 + 0.05])
    assert float(floored.sum()) == pytest.approx(1.0)


def test_learnability_draws_uniformly_when_every_prompt_is_solved_or_hopeless():
    probs = LearnabilitySampler(exploration=0.0).act(torch.tensor([0.0, 1.0, 1.0, 0.0]), candidates(0, 1, 2, 3))
    assert probs.tolist() == [0.25] * 4


def test_learnability_refuses_scores_that_are_no_solve_rates():
    with pytest.raises(ValueError, match=r"solve rates in \[0, 1\].*1 outside it \(e.g. 1.5\)"):
        LearnabilitySampler().act(torch.tensor([0.5, 1.5]), candidates(0, 1))


def test_learnability_floor_is_its_promise():
    sampler = LearnabilitySampler(exploration=0.1)
    assert sampler.min_probability(20) == pytest.approx(0.005)
    probs = sampler.act(torch.tensor([0.0] * 19 + [0.5]), candidates(*range(20)))
    assert probs.min().item() == pytest.approx(0.005)
    assert LearnabilitySampler(exploration=0.0).min_probability(20) == 0.0


# -- temperature -----------------------------------------------------------------------------------


def test_temperature_by_hand():
    scores = torch.tensor([0.0, math.log(3.0)])
    assert TemperatureSampler(exploration=0.0).act(scores, candidates(0, 1)).tolist() == pytest.approx([0.25, 0.75])
    root = math.sqrt(3.0)
    hot = TemperatureSampler(temperature=2.0, exploration=0.0).act(scores, candidates(0, 1))
    assert hot.tolist() == pytest.approx([1 / (1 + root), root / (1 + root)])


def test_temperature_survives_huge_scores_and_keeps_its_floor():
    probs = TemperatureSampler(exploration=0.05).act(torch.tensor([1e6, 0.0]), candidates(0, 1))
    assert probs.tolist() == pytest.approx([0.975, 0.025])
    assert TemperatureSampler(exploration=0.05).min_probability(2) == pytest.approx(0.025)


def test_temperature_equal_scores_give_a_uniform_draw():
    probs = TemperatureSampler().act(torch.full((5,), 7.0), candidates(*range(5)))
    assert probs.tolist() == pytest.approx([0.2] * 5)


@pytest.mark.parametrize(("params", "message"), [({"temperature": 0.0}, "temperature must be a number in \\(0"),
                                                 ({"exploration": -0.1}, r"exploration must be a number in \[0, 1\]")])  # fmt: skip
def test_temperature_params_are_checked(params, message):
    with pytest.raises(ValueError, match=message):
        TemperatureSampler(**params)


# -- greso -----------------------------------------------------------------------------------------


def streaks(*values: int) -> Batch:
    """Candidates with the ledger's ``uniform_reward_streak``."""
    return Batch({"prompt_index": torch.arange(len(values)), "uniform_reward_streak": torch.tensor(values)})


def test_greso_by_hand():
    scores = GresoSkip().score(streaks(0, 1, 2, 5), step_id=3)
    # keep = max(0.5 ** z, 0.05): 1, 0.5, 0.25 and the floor 0.05 (0.5 ** 5 = 0.03125 is below it)
    assert scores.dtype == torch.float32
    assert scores.tolist() == pytest.approx([0.0, math.log(0.5), math.log(0.25), math.log(0.05)])
    draw = TemperatureSampler(exploration=0.0).act(scores, streaks(0, 1, 2, 5))
    assert draw.tolist() == pytest.approx([1 / 1.8, 0.5 / 1.8, 0.25 / 1.8, 0.05 / 1.8])  # proportional to keep


def test_greso_exploration_one_never_skips_and_the_floor_holds():
    assert GresoSkip(exploration=1.0).score(streaks(0, 7), step_id=1).tolist() == [0.0, 0.0]
    assert GresoSkip(exploration=0.1, min_keep=0.2).score(streaks(3), step_id=1).tolist() == pytest.approx(
        [math.log(0.2)]
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [({"exploration": 0.0}, r"exploration must be a number in \(0, 1\]"),
     ({"min_keep": 1.5}, r"min_keep must be a number in \(0, 1\]")],
)  # fmt: skip
def test_greso_params_are_checked(params, message):
    with pytest.raises(ValueError, match=message):
        GresoSkip(**params)


def test_the_prompt_table_gives_known_rows_their_values_and_rows_beyond_it_the_prior():
    from dataflex_curriculum.prompt_table import PromptTable

    table = PromptTable({"alpha": 1.0})
    table.set("alpha", torch.tensor([0, 2]), torch.tensor([5.0, 7.0]))
    assert table.get("alpha", torch.tensor([2, 1, 0])).tolist() == [7.0, 1.0, 5.0]  # all in the table
    assert table.get("alpha", torch.tensor([2, 9, 0])).tolist() == [7.0, 1.0, 5.0]  # row 9 is beyond it
    assert table.get("alpha", torch.zeros(0, dtype=torch.long)).tolist() == []
    table.get("alpha", torch.tensor([0]))[0] = 99.0  # a copy, never a view of the column
    assert table.columns["alpha"][0] == 5.0
