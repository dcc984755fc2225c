"""The code the tutorials and guides show runs, and prints what the pages say it prints."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

from dataflex_core import (
    Batch,
    DataFlexPluginManager,
    IncompatibleComponentError,
    InvalidOutputError,
    UnknownParamError,
    build_from_config,
    valid_sample_mask,
)
from dataflex_lab.testing import grpo_batch

DOCS = Path(__file__).resolve().parents[1]
SNIPPETS = DOCS / "snippets"


def run_snippet(name: str, capsys) -> str:
    capsys.readouterr()
    runpy.run_path(str(SNIPPETS / name), run_name="__main__")
    return capsys.readouterr().out.strip()


def ragged_group_batch(seed: int, groups: int = 5, size: int = 4, L: int = 12, padding: int = 2) -> Batch:
    """GRPO groups with ragged responses (some empty) and verl's padding rows, from the testing kit."""
    return grpo_batch(groups, size, width=L, min_length=0, padding_rows=padding, seed=seed)


@pytest.mark.parametrize(
    ("page", "snippet"),
    [
        ("tutorials/add-a-scorer.md", "try_scorer.py"),
        ("tutorials/add-a-reweighter.md", "try_pipeline.py"),
        ("concepts.md", "loss_scale.py"),
    ],
)
def test_snippet_prints_what_the_page_shows(snippets, capsys, documented_output, page, snippet):
    assert run_snippet(snippet, capsys) == documented_output(page, snippet)


@pytest.mark.parametrize("page", ["tutorials/add-a-scorer.zh.md", "tutorials/add-a-reweighter.zh.md", "concepts.zh.md"])
def test_chinese_pages_show_the_same_output_as_the_english_ones(documented_output, page):
    english = page.replace(".zh.md", ".md")
    for snippet in ("try_scorer.py", "try_pipeline.py", "loss_scale.py"):
        if f"docs/snippets/{snippet}" in (DOCS / english).read_text(encoding="utf-8"):
            assert documented_output(page, snippet) == documented_output(english, snippet)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_length_zscore_matches_a_per_group_reference(snippets, seed):
    from length_zscore import LengthZScoreScorer

    batch = ragged_group_batch(seed)
    scores = LengthZScoreScorer().score(batch, step_id=0)
    assert scores.shape == (len(batch),) and scores.dtype == torch.float32 and not scores.requires_grad

    lengths = batch.batch["response_mask"].sum(-1).double()
    valid = valid_sample_mask(batch)
    expected = torch.zeros(len(batch), dtype=torch.float64)
    for g in set(batch.non_tensor_batch["uid"]):  # the slow, obvious way, to check the vectorised one
        rows = torch.tensor([u == g for u in batch.non_tensor_batch["uid"]]) & valid
        if rows.any():
            member = lengths[rows]
            expected[rows] = (member - member.mean()) / (member.std(unbiased=False) + 1e-6)
    torch.testing.assert_close(scores.double(), expected, atol=1e-5, rtol=1e-5)
    assert (scores[~valid] == 0).all()


def test_length_zscore_is_refused_without_groups(snippets):
    import length_zscore  # noqa: F401
    import zscore_tilt  # noqa: F401

    config = {"scorer": {"name": "length_zscore"}, "actuator": {"name": "zscore_tilt"}}
    with pytest.raises(IncompatibleComponentError, match="needs GRPO groups"):
        build_from_config(config, adv_estimator="gae", is_group_estimator=lambda name: name != "gae")


@pytest.mark.parametrize("shape", [(9,), (9, 7)])
@pytest.mark.parametrize("beta", [0.5, -2.0])
def test_zscore_tilt_weights_have_mean_one_and_ignore_padding(snippets, shape, beta):
    from zscore_tilt import ZScoreTiltReweighter

    batch = ragged_group_batch(seed=3, groups=3, size=3, L=7, padding=0)
    batch.batch["is_padding"] = torch.tensor([False] * 7 + [True] * 2)
    valid = (
        valid_sample_mask(batch)
        if len(shape) == 1
        else batch.batch["response_mask"].bool() & ~batch.batch["is_padding"].reshape(-1, 1)
    )
    scores = torch.randn(shape, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    weights = ZScoreTiltReweighter(beta=beta).act(scores, batch)

    assert weights.shape == shape and weights.dtype == torch.float32
    assert torch.isfinite(weights).all() and (weights >= 0).all()
    assert weights[valid].mean().item() == pytest.approx(1.0, abs=1e-5)
    assert (weights[~valid] == 0).all()
    # Garbage in padding rows does not move the weights of the real rows.
    noisy = scores.clone()
    noisy[7:] = 1e4
    torch.testing.assert_close(ZScoreTiltReweighter(beta=beta).act(noisy, batch), weights)


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_zscore_tilt_is_scale_free_and_uniform_on_constant_scores(snippets, scale):
    from zscore_tilt import ZScoreTiltReweighter

    batch = Batch({"response_mask": torch.ones(6, 3)})
    base = torch.tensor([0.0, 1.0, 2.0, 2.0, 3.0, 10.0], dtype=torch.float64)
    reweighter = ZScoreTiltReweighter()
    torch.testing.assert_close(reweighter.act(base * scale, batch), reweighter.act(base, batch), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(reweighter.act(torch.full((6,), scale), batch), torch.ones(6))
    torch.testing.assert_close(
        reweighter.act(torch.tensor([scale]), Batch({"response_mask": torch.ones(1, 3)})), torch.ones(1)
    )


def test_zscore_tilt_names_itself_when_scores_are_not_finite_or_misshapen(snippets):
    from zscore_tilt import ZScoreTiltReweighter

    batch = Batch({"response_mask": torch.ones(3, 2), "is_padding": torch.tensor([False, False, True])})
    with pytest.raises(InvalidOutputError, match=r"zscore_tilt.*non-finite"):
        ZScoreTiltReweighter().act(torch.tensor([1.0, float("nan"), 0.0]), batch)
    # NaN on the padding row is allowed: it is not a valid unit.
    weights = ZScoreTiltReweighter().act(torch.tensor([1.0, 2.0, float("nan")]), batch)
    assert weights[2] == 0 and weights[:2].mean().item() == pytest.approx(1.0)
    with pytest.raises(InvalidOutputError, match="zscore_tilt"):
        ZScoreTiltReweighter().act(torch.ones(3, 5), batch)


def test_zscore_tilt_rejects_a_bad_range_and_unknown_params(snippets):
    from zscore_tilt import ZScoreTiltReweighter

    with pytest.raises(ValueError, match="min_weight=2"):
        ZScoreTiltReweighter(min_weight=2.0)
    import length_zscore  # noqa: F401

    config = {"scorer": {"name": "length_zscore"}, "actuator": {"name": "zscore_tilt", "params": {"betta": 1.0}}}
    with pytest.raises(UnknownParamError, match="did you mean 'beta'"):
        build_from_config(config, adv_estimator="grpo", is_group_estimator=lambda name: name == "grpo")


def test_quickstart_runs_the_config_block_with_the_shipped_plugins(snippets, capsys):
    out = run_snippet("quickstart.py", capsys).splitlines()
    assert out[0] == "advantage_magnitude(agg='mean') -> softmax(temperature=1.0)"
    weights = [float(w) for w in out[1].removeprefix("weights: [").removesuffix("]").split(", ")]
    assert len(weights) == 8 and min(weights) > 0 and len(set(weights)) > 1
    assert out[2] == "mean: 1.0"


def test_loss_scale_renormalisation_keeps_the_step_for_random_weights(snippets):
    loss_scale = runpy.run_path(str(SNIPPETS / "loss_scale.py"), run_name="loss_scale")
    gen = torch.Generator().manual_seed(5)
    batch = ragged_group_batch(seed=5, padding=0)
    mask = batch.batch["response_mask"]
    for weights in (torch.rand(len(batch), generator=gen) * 3, torch.rand(mask.shape, generator=gen)):
        for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
            tokens = loss_scale["token_weights"](weights, batch, mode)
            ratio = loss_scale["agg_loss"](2.0 * tokens, mask, mode) / loss_scale["agg_loss"](
                torch.full(mask.shape, 2.0), mask, mode
            )
            assert ratio.item() == pytest.approx(1.0, abs=1e-5), mode


def test_hookimpl_snippet_registers_both_names_for_its_distribution(snippets, tmp_path, monkeypatch):
    info = tmp_path / "docs_hook_example-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: docs-hook-example\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text("[dataflex]\nhook-example = hookimpl_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    manager = DataFlexPluginManager()
    manager.load_entrypoints(strict=True, only_dists=["docs-hook-example"])
    registry = manager.registry()
    for name in ("length_zscore", "response_length_zscore"):
        spec = registry.get("scorer", name)
        assert spec is not None, name
        assert (spec.dist, spec.version) == ("docs-hook-example", "1.2.3")
        assert spec.cls.__name__ == "LengthZScoreScorer"
