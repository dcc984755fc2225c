"""Each mixer's formula on hand-computed cases, its reaction to the signal, and its state round trip."""

from __future__ import annotations

import json
import math

import pytest
import torch
from dataflex_mixers import DumpUCBMixer, ODMMixer, RewardGapMixer, StaticMixer, TSCLMixer


def ctx(index, domains=("math", "code"), step=None):
    out = {"domains": list(domains), "domain_index": torch.as_tensor(index)}
    if step is not None:
        out["step_id"] = step
    return out


def step_with(batch_factory, mixer, per_domain_rows, step, update=True, domains=("math", "code")):
    """One step whose domain ``d`` contributes rows with the given scores."""
    scores, index = [], []
    for d, rows in enumerate(per_domain_rows):
        scores += list(rows)
        index += [d] * len(rows)
    batch = batch_factory([1] * len(scores))
    call = mixer.act if update else mixer.observe
    return call(torch.tensor(scores, dtype=torch.float32), batch, **ctx(index, domains=domains, step=step))


def check_proportions(p, d=2):
    assert p.dtype == torch.float32 and p.shape == (d,)
    assert torch.all(p >= 0) and p.sum().item() == pytest.approx(1.0, abs=1e-6)


# ---------------------------------------------------------------- static


@pytest.mark.parametrize("spec", [[9, 1], [0.9, 0.1], {"code": 1, "math": 9}])
def test_static_returns_the_configured_mixture(batch_factory, spec):
    mixer = StaticMixer(proportions=spec)
    assert mixer.current_proportions(["math", "code"]).tolist() == pytest.approx([0.9, 0.1])
    p = step_with(batch_factory, mixer, [[0.0], [1.0]], step=0)
    check_proportions(p)
    assert p.tolist() == pytest.approx([0.9, 0.1])


def test_static_defaults_to_uniform(batch_factory):
    assert StaticMixer().current_proportions(["a", "b", "c", "d"]).tolist() == [0.25] * 4


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([1, 2, 3], "3 proportions given for 2 domains"),
        ({"math": 1, "bio": 1}, "unknown: \\['bio'\\]"),
        ([-1, 2], "non-negative"),
    ],
)
def test_static_rejects_proportions_that_do_not_fit_the_domains(spec, message):
    with pytest.raises(ValueError, match=message):
        StaticMixer(proportions=spec).current_proportions(["math", "code"])


# ---------------------------------------------------------------- reward_gap


def test_reward_gap_hand_case(batch_factory):
    mixer = RewardGapMixer(target=1.0, min_share=0.05)
    p = step_with(batch_factory, mixer, [[0.0, 0.4], [0.8]], step=0)
    # gaps 0.8 and 0.2 -> 0.8, 0.2 -> floor: 0.9 * p + 0.05.
    assert p.tolist() == pytest.approx([0.77, 0.23])


def test_reward_gap_explores_unseen_domains_and_is_uniform_without_gaps(batch_factory):
    mixer = RewardGapMixer(min_share=0.0)
    p = mixer.act(torch.tensor([0.5]), batch_factory([1]), **ctx([0], domains=("a", "b", "c")))
    assert p.tolist() == pytest.approx([1 / 3] * 3)
    solved = RewardGapMixer(min_share=0.0)
    assert step_with(batch_factory, solved, [[1.0], [1.0]], step=0).tolist() == [0.5, 0.5]


def test_reward_gap_shifts_mass_to_the_domain_that_falls_behind(batch_factory):
    mixer = RewardGapMixer(window=3)
    first = step_with(batch_factory, mixer, [[0.5], [0.5]], step=0)
    assert first.tolist() == pytest.approx([0.5, 0.5])
    for step in range(1, 6):
        p = step_with(batch_factory, mixer, [[0.9], [0.2]], step=step)
    assert p[1] > 0.75 and p[0] >= 0.05 - 1e-6


# ---------------------------------------------------------------- dump_ucb


def test_dump_ucb_hand_case(batch_factory):
    mixer = DumpUCBMixer(exploration=1.0, temperature=0.1)
    # 3 "math" rows with |A| mean 0.5 (signed input: the mixer takes |A|), 1 "code" row with |A| 0.2.
    p = step_with(batch_factory, mixer, [[0.5, -0.5, 0.5], [0.2]], step=0)
    n_total = 4.0
    ucb = [0.5 + math.sqrt(2 * math.log(n_total) / 3), 0.2 + math.sqrt(2 * math.log(n_total) / 1)]
    z = [math.exp(u / 0.1) for u in ucb]
    assert p.tolist() == pytest.approx([z[0] / sum(z), z[1] / sum(z)], rel=1e-5)


def test_dump_ucb_plays_unvisited_domains_first(batch_factory):
    mixer = DumpUCBMixer()
    p = mixer.act(torch.tensor([3.0]), batch_factory([1]), **ctx([0], domains=("a", "b", "c")))
    assert p.tolist() == pytest.approx([0.0, 0.5, 0.5])


def test_dump_ucb_favours_larger_advantage_and_the_bonus_lifts_rare_domains(batch_factory):
    mixer = DumpUCBMixer(exploration=0.0, temperature=0.1)
    p = step_with(batch_factory, mixer, [[0.9] * 4, [0.1] * 4], step=0)
    assert p[0] > 0.99
    bonus_only = DumpUCBMixer(exploration=1.0, temperature=1.0)
    p = step_with(batch_factory, bonus_only, [[0.3] * 30, [0.3] * 2], step=0)
    assert p[1] > p[0]


# ---------------------------------------------------------------- tscl


def test_tscl_slope_hand_case(batch_factory):
    mixer = TSCLMixer(window=10, temperature=0.5, epsilon=0.1)
    for step, (a, b) in enumerate([(0.1, 0.4), (0.2, 0.4), (0.3, 0.4)]):
        p = step_with(batch_factory, mixer, [[a], [b]], step=step)
    slope, known = mixer.slopes()
    assert slope.tolist() == pytest.approx([0.1, 0.0], abs=1e-7) and known.tolist() == [True, True]
    z = [math.exp(1.0 / 0.5), math.exp(0.0)]
    expected = [0.9 * z[0] / sum(z) + 0.05, 0.9 * z[1] / sum(z) + 0.05]
    assert p.tolist() == pytest.approx(expected, rel=1e-6)


def test_tscl_revisits_a_domain_being_forgotten(batch_factory):
    mixer = TSCLMixer(window=4)
    for step in range(4):
        p = step_with(batch_factory, mixer, [[0.5], [0.9 - 0.2 * step]], step=step)
    assert p[1] > p[0]


def test_tscl_slope_uses_only_the_window(batch_factory):
    mixer = TSCLMixer(window=3)
    for step, value in enumerate([5.0, 0.0, 0.0, 0.3, 0.6]):
        step_with(batch_factory, mixer, [[value], [0.0]], step=step, update=False)
    assert mixer.slopes()[0][0].item() == pytest.approx(0.3)


def test_tscl_slope_matches_a_per_domain_regression(batch_factory):
    gen = torch.Generator().manual_seed(0)
    mixer = TSCLMixer(window=6)
    seen = {0: [], 1: [], 2: []}
    for step in range(9):
        present = [d for d in range(3) if torch.rand((), generator=gen) < 0.7]
        rows = [[float(torch.rand((), generator=gen))] if d in present else [] for d in range(3)]
        step_with(
            batch_factory, mixer, rows, step=step * 2, update=False, domains="abc"
        )  # steps need not be consecutive
        for d in present:
            seen[d].append((step * 2, rows[d][0]))
    slope, known = mixer.slopes()
    for d in range(3):
        points = [(x, y) for x, y in seen[d] if x > 16 - 6]
        if len(points) < 2:
            assert not known[d]
            continue
        xs, ys = torch.tensor(points, dtype=torch.float64).T
        reference = ((xs - xs.mean()) * (ys - ys.mean())).sum() / ((xs - xs.mean()) ** 2).sum()
        assert slope[d].item() == pytest.approx(reference.item(), abs=1e-6)


# ---------------------------------------------------------------- odm


def test_odm_hand_case(batch_factory):
    mixer = ODMMixer(alpha=0.9)
    domains = ("a", "b", "c")
    p1 = mixer.act(torch.tensor([1.0, 0.0]), batch_factory([1, 1]), **ctx([0, 1], domains=domains, step=0))
    # Sampled with uniform pi = 1/3: R = 0.1 * r * 3 -> [0.3, 0, 0]; t=1.
    k = 3
    eps1, eps0 = min(1 / k, math.sqrt(math.log(k) / k)), 1 / k
    z = [math.exp(eps0 * r) for r in (0.3, 0.0, 0.0)]
    expected = [(1 - k * eps1) * v / sum(z) + eps1 for v in z]
    assert p1.tolist() == pytest.approx(expected, rel=1e-6)
    assert mixer.reward_estimate.tolist() == pytest.approx([0.3, 0.0, 0.0])
    # Second step: importance weight uses p1; domain c unobserved keeps its estimate.
    mixer.act(torch.tensor([2.0]), batch_factory([1]), **ctx([1], domains=domains, step=1))
    assert mixer.reward_estimate.tolist() == pytest.approx([0.3, 0.1 * 2.0 / expected[1], 0.0], rel=1e-6)


def test_odm_moves_mass_to_the_domain_with_the_larger_reward(batch_factory):
    # EXP3's exploitation term is exp(eps_t * R): a reward gap moves the mixture in
    # proportion to its size (ODM's rewards are losses of a few nats).
    small, large = ODMMixer(), ODMMixer()
    for step in range(200):
        p_small = step_with(batch_factory, small, [[0.9], [0.1]], step=step)
        p_large = step_with(batch_factory, large, [[9.0], [1.0]], step=step)
    check_proportions(p_large)
    assert 0.5 < p_small[0] < p_large[0]
    assert p_large[0] > 0.6


# ---------------------------------------------------------------- state round trip

MIXERS = [
    lambda: StaticMixer(proportions=[3, 1, 1]),
    lambda: RewardGapMixer(window=3),
    lambda: DumpUCBMixer(window=3),
    lambda: TSCLMixer(window=3),
    lambda: ODMMixer(),
]


@pytest.mark.parametrize("make", MIXERS, ids=["static", "reward_gap", "dump_ucb", "tscl", "odm"])
def test_state_round_trip_continues_identically(batch_factory, make):
    gen = torch.Generator().manual_seed(1)
    steps = [(torch.rand(12, generator=gen), torch.randint(0, 3, (12,), generator=gen)) for _ in range(10)]
    domains = ("a", "b", "c")
    batch = batch_factory([1] * 12)
    original = make()
    for step, (scores, index) in enumerate(steps[:5]):
        original.act(scores, batch, **ctx(index, domains=domains, step=step))
    state = json.loads(json.dumps(original.state_dict()))  # survives any checkpoint format
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.current_proportions(domains).tolist() == original.current_proportions(domains).tolist()
    for step, (scores, index) in enumerate(steps[5:], start=5):
        a = original.act(scores, batch, **ctx(index, domains=domains, step=step))
        b = resumed.act(scores, batch, **ctx(index, domains=domains, step=step))
        assert a.tolist() == b.tolist()
        check_proportions(a, d=3)
        if step == 5 and not isinstance(original, StaticMixer):
            scores, index = steps[5]
            fresh = make().act(scores, batch, **ctx(index, domains=domains, step=step))
            assert fresh.tolist() != a.tolist(), "the state must matter, or this round trip proves nothing"


def test_loading_state_for_other_domains_fails_at_the_next_step(batch_factory):
    mixer = RewardGapMixer()
    step_with(batch_factory, mixer, [[0.1], [0.2]], step=0)
    other = RewardGapMixer()
    state = mixer.state_dict()
    state["domains"] = ["x", "y"]
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="must not change"):
        step_with(batch_factory, other, [[0.1], [0.2]], step=1)
