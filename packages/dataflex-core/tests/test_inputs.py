import pytest
import torch

from dataflex_core import Batch, InvalidOutputError, actuator_scores


def _batch(mask, padding=None):
    fields = {"response_mask": torch.tensor(mask)}
    if padding is not None:
        fields["is_padding"] = torch.tensor(padding)
    return Batch(fields)


# Row 1 has an empty response and row 3 is padding: rows 0 and 2 are valid.
MASK = [[1, 1, 0], [0, 0, 0], [1, 0, 0], [1, 1, 1]]
PADDING = [False, False, False, True]


def test_sample_scores_come_back_with_the_valid_rows():
    scores = torch.tensor([0.5, 2.0, -1.0, 3.0])
    s, valid = actuator_scores(scores, _batch(MASK, PADDING), owner="demo", granularity="sample")
    assert valid.tolist() == [True, False, True, False]
    assert s.tolist() == [0.5, 2.0, -1.0, 3.0] and s.dtype == torch.float32


@pytest.mark.parametrize("granularity", ["prompt", "response"])
def test_prompt_and_response_granularities_are_per_sample(granularity):
    s, valid = actuator_scores(torch.zeros(4), _batch(MASK, PADDING), owner="demo", granularity=granularity)
    assert s.shape == valid.shape == (4,)


def test_token_scores_come_back_with_the_valid_tokens():
    scores = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    s, valid = actuator_scores(scores, _batch(MASK, PADDING), owner="demo", granularity="token")
    assert valid.sum().item() == 3 and valid[0, :2].all() and valid[2, 0]
    assert torch.equal(s, scores)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64])
def test_low_precision_and_integer_scores_are_upcast_to_float32(dtype):
    s, _ = actuator_scores(torch.tensor([1, 0, 1, 0], dtype=dtype), _batch(MASK), owner="demo", granularity="sample")
    assert s.dtype == torch.float32 and s.tolist() == [1.0, 0.0, 1.0, 0.0]


def test_float64_is_kept_and_an_explicit_dtype_is_applied():
    scores = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    s, _ = actuator_scores(scores, _batch(MASK), owner="demo", granularity="sample")
    assert s.dtype == torch.float64
    s, _ = actuator_scores(scores.float(), _batch(MASK), owner="demo", granularity="sample", dtype=torch.float64)
    assert s.dtype == torch.float64


def test_the_callers_scores_are_never_modified_or_tracked():
    scores = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    s, _ = actuator_scores(scores, _batch(MASK), owner="demo", granularity="sample")
    assert not s.requires_grad
    s, _ = actuator_scores(scores, _batch(MASK), owner="demo", granularity="sample", dtype=torch.float64)
    s.add_(1)
    assert scores.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_non_finite_scores_on_invalid_units_are_allowed():
    scores = torch.tensor([1.0, float("nan"), 2.0, float("inf")])
    s, _ = actuator_scores(scores, _batch(MASK, PADDING), owner="demo", granularity="sample")
    assert s[0].item() == 1.0 and s[2].item() == 2.0
    tokens = torch.full((4, 3), float("nan"))
    tokens[0, :2] = 1.0
    tokens[2, 0] = 1.0
    actuator_scores(tokens, _batch(MASK, PADDING), owner="demo", granularity="token")


def test_finite_scores_whose_sum_overflows_pass():
    big = torch.finfo(torch.float32).max
    s, _ = actuator_scores(torch.full((4,), big), _batch(MASK), owner="demo", granularity="sample")
    assert torch.isfinite(s).all()


def test_a_non_finite_valid_sample_score_names_the_owner_and_the_row():
    scores = torch.tensor([1.0, 2.0, float("-inf"), 4.0])
    with pytest.raises(
        InvalidOutputError,
        match=r"my_selector\(k=2\) got 1 non-finite score\(s\) among 2 valid rows "
        r"\(first at row 2\); the scorer must return finite scores",
    ):
        actuator_scores(scores, _batch(MASK, PADDING), owner="my_selector(k=2)", granularity="sample")


def test_a_non_finite_valid_token_score_names_its_position():
    scores = torch.zeros(4, 3)
    scores[2, 0] = float("nan")
    with pytest.raises(
        InvalidOutputError, match=r"demo got 1 non-finite .* among 3 valid tokens \(first at \[2, 0\]\)"
    ):
        actuator_scores(scores, _batch(MASK, PADDING), owner="demo", granularity="token")


def test_token_scores_for_a_sample_actuator_name_the_scorer_to_pair_with():
    with pytest.raises(
        InvalidOutputError,
        match=r"demo takes per-sample scores of shape \(4,\), got \(4, 3\); "
        r"pair it with a prompt- or response-granularity scorer",
    ):
        actuator_scores(torch.zeros(4, 3), _batch(MASK), owner="demo", granularity="sample")


def test_sample_scores_for_a_token_actuator_name_the_scorer_to_pair_with():
    with pytest.raises(
        InvalidOutputError,
        match=r"demo takes per-token scores shaped like response_mask \(4, 3\), "
        r"got \(4,\); pair it with a token-granularity scorer",
    ):
        actuator_scores(torch.zeros(4), _batch(MASK), owner="demo", granularity="token")


def test_scores_that_are_not_a_tensor_are_named_by_type():
    with pytest.raises(InvalidOutputError, match=r"got list"):
        actuator_scores([0.0] * 4, _batch(MASK), owner="demo", granularity="sample")


def test_an_unknown_granularity_is_refused():
    with pytest.raises(ValueError, match="granularity must be .* got 'domain'"):
        actuator_scores(torch.zeros(4), _batch(MASK), owner="demo", granularity="domain")
