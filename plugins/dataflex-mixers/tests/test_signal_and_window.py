"""The shared per-step, per-domain signal and its step window, against per-domain loops."""

from __future__ import annotations

import pytest
import torch
from dataflex_mixers import RewardGapMixer, StaticMixer


def ctx(index, domains=("math", "code"), step=None):
    out = {"domains": list(domains), "domain_index": torch.as_tensor(index)}
    if step is not None:
        out["step_id"] = step
    return out


@pytest.mark.parametrize("seed", range(3))
def test_domain_signal_matches_a_per_domain_loop(batch_factory, seed):
    gen = torch.Generator().manual_seed(seed)
    bs, domains = 40, ["a", "b", "c", "d"]
    scores = torch.randn(bs, generator=gen)
    index = torch.randint(0, 3, (bs,), generator=gen)  # domain "d" absent this step
    lengths = torch.randint(0, 4, (bs,), generator=gen)
    padding = torch.rand(bs, generator=gen) < 0.2
    scores[padding] = float("nan")  # padding rows never enter a statistic
    batch = batch_factory(lengths, padding=padding, width=4)
    mean, count = RewardGapMixer().domain_signal(scores, batch, ctx(index, domains))
    valid = (lengths > 0) & ~padding
    for d in range(4):
        rows = valid & (index == d)
        assert count[d] == rows.sum()
        if rows.any():
            assert mean[d].item() == pytest.approx(scores[rows].double().mean().item())


def test_window_weighs_steps_not_rows(batch_factory):
    mixer = RewardGapMixer(window=5)
    # Step 0: eight "math" rows at 0.0; step 1: one "math" row at 1.0. Per step: 0 and 1 -> 0.5.
    mixer.observe(torch.zeros(8), batch_factory([1] * 8), **ctx([0] * 8, step=0))
    mixer.observe(torch.ones(1), batch_factory([1]), **ctx([0], step=1))
    estimate, known = mixer.window_mean()
    assert estimate[0].item() == pytest.approx(0.5)
    assert known.tolist() == [True, False]
    assert mixer.visits.tolist() == [9.0, 0.0]


def test_window_forgets_steps_older_than_the_window(batch_factory):
    mixer = RewardGapMixer(window=2)
    for step, value in enumerate([0.0, 0.0, 0.6, 1.0]):
        mixer.observe(torch.tensor([value]), batch_factory([1]), **ctx([0], step=step))
    assert mixer.history()[0].tolist() == [2, 3]
    assert mixer.window_mean()[0][0].item() == pytest.approx(0.8)


def test_a_domain_absent_from_the_window_keeps_its_last_mean(batch_factory):
    mixer = RewardGapMixer(window=1)
    mixer.observe(torch.tensor([0.3, 0.9]), batch_factory([1, 1]), **ctx([0, 1], step=0))
    mixer.observe(torch.tensor([0.5]), batch_factory([1]), **ctx([0], step=1))
    estimate, known = mixer.window_mean()
    assert estimate.tolist() == pytest.approx([0.5, 0.9])
    assert known.tolist() == [True, True]


def test_per_domain_scores_are_accepted_from_a_domain_scorer(batch_factory):
    mixer = RewardGapMixer()
    mean, count = mixer.domain_signal(torch.tensor([0.1, 0.7]), batch_factory([1, 1, 1]), ctx([0, 0, 1]))
    assert mean.tolist() == pytest.approx([0.1, 0.7])
    assert count.tolist() == [2.0, 1.0]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"domain_index": torch.tensor([0, 1])}, "needs ctx\\['domains'\\]"),
        ({"domains": ["a", "b"]}, "needs ctx\\['domain_index'\\]"),
        ({"domains": ["a", "b"], "domain_index": torch.tensor([0.0, 1.0])}, "integer tensor"),
        ({"domains": ["a", "b"], "domain_index": torch.tensor([0, 2])}, "row 1 has domain_index 2, outside 0..1"),
        ({"domains": ["a", "a"], "domain_index": torch.tensor([0, 1])}, "unique"),
    ],
)
def test_bad_domain_context_is_a_clear_error(batch_factory, context, message):
    with pytest.raises(ValueError, match=message):
        StaticMixer().act(torch.zeros(2), batch_factory([1, 1]), **context)


def test_domains_must_not_change_during_a_run(batch_factory):
    mixer = StaticMixer()
    mixer.act(torch.zeros(2), batch_factory([1, 1]), **ctx([0, 1]))
    with pytest.raises(ValueError, match="must not change"):
        mixer.act(torch.zeros(2), batch_factory([1, 1]), **ctx([0, 1], domains=("code", "math")))


def test_non_finite_signal_on_a_valid_row_is_an_error(batch_factory):
    with pytest.raises(ValueError, match="non-finite"):
        RewardGapMixer().act(torch.tensor([0.0, float("inf")]), batch_factory([1, 1]), **ctx([0, 1]))


def test_out_of_range_index_on_a_padding_row_is_ignored(batch_factory):
    batch = batch_factory([1, 1], padding=[False, True])
    p = StaticMixer().act(torch.zeros(2), batch, **ctx([0, -1]))
    assert p.tolist() == [0.5, 0.5]
