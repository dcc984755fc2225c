"""Per-token reweighters: hand-computed formulas, then the contract both keep."""

import math

import pytest
import torch
from dataflex_reweighters_token import AdvantageReweightReweighter, HighEntropyTokensReweighter
from dataflex_reweighters_token.high_entropy import quantile_rank

from dataflex_core import Batch


def make_batch(mask, is_padding=None):
    tensors = {"response_mask": torch.as_tensor(mask)}
    if is_padding is not None:
        tensors["is_padding"] = torch.tensor(is_padding)
    return Batch(tensors)


MASK = [[1, 1, 1, 0], [1, 1, 0, 0]]


# -- advantage_reweight ----------------------------------------------------------------


def test_advantage_reweight_hand_computed():
    prob = torch.tensor([[1.0, 0.5, 0.0, 0.9], [0.25, 0.75, 0.3, 0.3]])
    w = AdvantageReweightReweighter(alpha=0.4).act(prob, make_batch(MASK))
    raw = torch.tensor([[1.0, 0.8, 0.6, 0.0], [0.7, 0.9, 0.0, 0.0]])  # 0.4 p + 0.6 on valid tokens
    torch.testing.assert_close(w, raw * 5 / raw.sum())


def test_advantage_reweight_alpha_zero_is_uniform_and_alpha_one_is_proportional():
    prob = torch.tensor([[0.2, 0.4, 0.9, 0.9], [0.6, 0.8, 0.1, 0.1]])
    torch.testing.assert_close(
        AdvantageReweightReweighter(alpha=0.0).act(prob, make_batch(MASK)), torch.tensor(MASK, dtype=torch.float32)
    )
    w = AdvantageReweightReweighter(alpha=1.0).act(prob, make_batch(MASK))
    torch.testing.assert_close(w, torch.tensor([[0.2, 0.4, 0.9, 0.0], [0.6, 0.8, 0.0, 0.0]]) * 5 / 2.9)


def test_advantage_reweight_all_zero_probabilities_with_alpha_one_is_uniform():
    w = AdvantageReweightReweighter(alpha=1.0).act(torch.zeros(2, 4), make_batch(MASK))
    torch.testing.assert_close(w, torch.tensor(MASK, dtype=torch.float32))


@pytest.mark.parametrize("bad", [-0.1, 1.5, 1e6])
def test_advantage_reweight_rejects_non_probabilities(bad):
    prob = torch.full((2, 4), 0.5)
    prob[0, 1] = bad
    with pytest.raises(ValueError, match="pair it with token_prob"):
        AdvantageReweightReweighter().act(prob, make_batch(MASK))


def test_advantage_reweight_ignores_out_of_range_values_on_invalid_tokens():
    prob = torch.full((2, 4), 0.5)
    prob[0, 3] = 7.0
    prob[1, 2] = math.nan
    torch.testing.assert_close(
        AdvantageReweightReweighter().act(prob, make_batch(MASK)), torch.tensor(MASK, dtype=torch.float32)
    )


# -- high_entropy_tokens -----------------------------------------------------------------


def test_high_entropy_keeps_the_top_fifth_hand_computed():
    # Ten valid tokens with entropies 0..9; the 0.8-quantile is 7.2, so 8 and 9 are kept.
    ent = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0, 99.0], [5.0, 6.0, 7.0, 8.0, 9.0, 99.0]])
    mask = [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0]]
    w = HighEntropyTokensReweighter().act(ent, make_batch(mask))
    expected = torch.zeros(2, 6)
    expected[1, 3] = expected[1, 4] = 5.0
    torch.testing.assert_close(w, expected)


def test_high_entropy_keeps_every_token_tied_at_the_threshold():
    ent = torch.tensor([[1.0, 2.0, 2.0, 2.0], [2.0, 0.5, 3.0, 0.0]])
    w = HighEntropyTokensReweighter(quantile=0.5).act(ent, make_batch([[1, 1, 1, 1], [1, 1, 1, 0]]))
    kept = torch.tensor([[0, 1, 1, 1], [1, 0, 1, 0]], dtype=torch.float32)
    torch.testing.assert_close(w, kept * 7 / 5)


@pytest.mark.parametrize("quantile", [0.0, 0.1, 0.25, 0.5, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("seed", range(3))
def test_high_entropy_threshold_matches_torch_quantile(quantile, seed):
    gen = torch.Generator().manual_seed(seed)
    ent = torch.randn(7, 9, generator=gen).exp()
    ent[ent > 2] = 2.0  # plenty of ties
    mask = (torch.rand(7, 9, generator=gen) < 0.7).long()
    padding = [False, True, False, False, False, True, False]
    batch = make_batch(mask, padding)
    valid = mask.bool() & ~torch.tensor(padding).reshape(-1, 1)
    tau = torch.quantile(ent[valid], quantile)
    kept = valid & (ent >= tau)
    w = HighEntropyTokensReweighter(quantile=quantile).act(ent, batch)
    assert torch.equal(w > 0, kept)
    assert w[valid].mean().item() == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize(
    ("quantile", "count", "rank"), [(0.8, 11, 9), (0.8, 10, 9), (0.0, 5, 1), (1.0, 5, 5), (0.5, 1, 1)]
)
def test_quantile_rank(quantile, count, rank):
    assert quantile_rank(quantile, count) == rank


def test_high_entropy_with_no_valid_token_gives_zeros():
    w = HighEntropyTokensReweighter().act(torch.ones(2, 3), make_batch([[0, 0, 0], [1, 1, 1]], [False, True]))
    assert w.dtype == torch.float32 and (w == 0).all()


# -- the contract, for both ------------------------------------------------------------------

ALL = [AdvantageReweightReweighter(), AdvantageReweightReweighter(alpha=1.0), HighEntropyTokensReweighter()]
IDS = [r.describe() for r in ALL]


def random_case(seed, bs=6, L=8):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(bs, L, generator=gen)
    lengths = torch.randint(0, L + 1, (bs,), generator=gen)
    mask = (torch.arange(L).expand(bs, L) < lengths.reshape(-1, 1)).long()
    padding = (torch.rand(bs, generator=gen) < 0.25).tolist()
    return scores, make_batch(mask, padding)


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
@pytest.mark.parametrize("seed", range(4))
def test_weights_are_float32_nonnegative_finite_mean_one_over_valid_tokens(reweighter, seed):
    scores, batch = random_case(seed)
    valid = batch.batch["response_mask"].bool() & ~batch.batch["is_padding"].reshape(-1, 1)
    w = reweighter.act(scores, batch)
    assert w.shape == scores.shape and w.dtype == torch.float32
    assert torch.isfinite(w).all() and (w >= 0).all()
    assert (w[~valid] == 0).all()
    if valid.any():
        assert w[valid].mean().item() == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
def test_padding_rows_do_not_change_the_other_weights(reweighter):
    scores, batch = random_case(11)
    w = reweighter.act(scores, batch)
    junk = scores.clone()
    junk[batch.batch["is_padding"]] = 1.0
    torch.testing.assert_close(reweighter.act(junk, batch), w)


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
@pytest.mark.parametrize("value", [0.0, 1e-6, 0.5, 1.0])
def test_constant_scores_give_uniform_weights(reweighter, value):
    mask = torch.tensor(MASK)
    w = reweighter.act(torch.full((2, 4), value), make_batch(mask))
    torch.testing.assert_close(w, mask.float())


@pytest.mark.parametrize("scale", [1e6, 1e-6])
def test_high_entropy_is_scale_free(scale):
    scores, batch = random_case(2)
    r = HighEntropyTokensReweighter()
    torch.testing.assert_close(r.act(scores * scale, batch), r.act(scores, batch))


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
def test_single_token_batch(reweighter):
    assert reweighter.act(torch.tensor([[0.3]]), make_batch([[1]])).tolist() == [[1.0]]


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_any_float_scores_give_float32_weights(reweighter, dtype):
    scores, batch = random_case(5)
    w = reweighter.act(scores.to(dtype), batch)
    assert w.dtype == torch.float32
    torch.testing.assert_close(w, reweighter.act(scores.to(dtype).float(), batch))


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
def test_non_finite_scores_on_valid_tokens_are_refused(reweighter):
    scores = torch.full((2, 4), 0.5)
    scores[1, 1] = math.nan
    with pytest.raises(ValueError, match="non-finite|outside"):
        reweighter.act(scores, make_batch(MASK))


@pytest.mark.parametrize("reweighter", ALL, ids=IDS)
def test_sample_shaped_scores_are_refused(reweighter):
    with pytest.raises(ValueError, match="per-token scores"):
        reweighter.act(torch.ones(2), make_batch(MASK))


def test_bad_params_are_rejected_with_the_value():
    with pytest.raises(ValueError, match="1.5"):
        AdvantageReweightReweighter(alpha=1.5)
    with pytest.raises(ValueError, match="-0.2"):
        HighEntropyTokensReweighter(quantile=-0.2)


def test_declarations():
    assert AdvantageReweightReweighter.accepts_granularity == ("token",)
    assert HighEntropyTokensReweighter.accepts_granularity == ("token",)


@pytest.mark.parametrize("quantile", [0.0, 0.5, 0.8, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_high_entropy_on_the_bracketed_path_keeps_exactly_the_tokens_at_or_above_the_quantile(
    monkeypatch, quantile, dtype
):
    from dataflex_reweighters_token import selection

    monkeypatch.setattr(selection, "DIRECT_LIMIT", 64)
    monkeypatch.setattr(selection, "SAMPLE_SIZE", 1000)
    monkeypatch.setattr(selection, "CHUNK", 333)
    gen = torch.Generator().manual_seed(7)
    bs, length = 60, 50
    ent = (torch.rand(bs, length, generator=gen) * 3).round(decimals=2).to(dtype)  # ties
    lengths = torch.randint(0, length + 1, (bs,), generator=gen)
    mask = (torch.arange(length) < lengths.unsqueeze(1)).long()
    padding = (torch.rand(bs, generator=gen) < 0.2).tolist()
    valid = mask.bool() & ~torch.tensor(padding).reshape(-1, 1)
    ent[~valid] = math.nan  # garbage outside the valid tokens
    w = HighEntropyTokensReweighter(quantile=quantile).act(ent, make_batch(mask, padding))
    kept = valid & (ent >= torch.quantile(ent[valid].double(), quantile).to(dtype))
    assert torch.equal(w > 0, kept) and w.dtype == torch.float32
    # Every kept token has the same weight, count / kept, as normalising 0/1 weights gives it.
    expected = (torch.tensor(int(valid.sum()), dtype=dtype) / torch.tensor(int(kept.sum()), dtype=dtype)).float()
    assert torch.equal(w[kept], expected.expand(int(kept.sum())))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_advantage_reweight_one_pass_gives_the_formulas_weights(dtype):
    """On the CPU the weights are mixed, masked and summed in one numpy pass: the weights of the formula through
    core's normalisation (to float32 rounding of the total), over several chunks, junk outside the valid tokens
    never read."""
    from dataflex_core import normalize_mean_one, valid_token_mask

    gen = torch.Generator().manual_seed(11)
    bs, length = 350, 2000  # 700k tokens: three chunks
    lengths = torch.randint(0, length + 1, (bs,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    padding = torch.zeros(bs, dtype=torch.bool)
    padding[::97] = True
    probs = torch.rand(bs, length, generator=gen, dtype=dtype)
    probs[mask == 0] = 7.0  # outside [0, 1], but not on a valid token
    batch = Batch({"response_mask": mask, "is_padding": padding})
    valid = valid_token_mask(batch)
    for alpha in (0.0, 0.3, 0.9):
        ours = AdvantageReweightReweighter(alpha=alpha).act(probs, batch)
        formula = normalize_mean_one(probs * alpha + (1 - alpha), valid).float()
        assert ours.dtype == torch.float32, alpha
        torch.testing.assert_close(ours, formula, rtol=1e-6, atol=0)
    empty = Batch({"response_mask": torch.zeros(3, 4, dtype=torch.long)})
    assert torch.equal(AdvantageReweightReweighter().act(torch.rand(3, 4), empty), torch.zeros(3, 4))
