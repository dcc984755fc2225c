"""``compare_runs``: the numbers in the report, the verdicts on synthetic runs with known effects, and every refusal."""

from __future__ import annotations

import json
import math

import pytest
import torch

from dataflex_lab.compare import CompareError, Run, compare_runs, summarize_curve

REWARD = "critic/score/mean"


def make_runs(
    deltas: dict[str, float],
    seeds=range(5),
    steps=range(1, 21),
    *,
    seed_sd: float = 0.05,
    noise_sd: float = 0.0,
    rng_seed: int = 0,
    metric: str = REWARD,
) -> list[Run]:
    """A rising reward curve per (arm, seed): arm delta + a per-seed offset every arm shares + per-step noise."""
    g = torch.Generator().manual_seed(rng_seed)
    seeds, steps = list(seeds), list(steps)
    offsets = (torch.randn(len(seeds), generator=g, dtype=torch.float64) * seed_sd).tolist()
    runs = []
    for arm, delta in deltas.items():
        for seed, offset in zip(seeds, offsets):
            noise = (torch.randn(len(steps), generator=g, dtype=torch.float64) * noise_sd).tolist()
            values = {s: 0.2 + 0.02 * s + offset + delta + e for s, e in zip(steps, noise)}
            runs.append(Run(arm, seed, {s: {metric: v, "actor/entropy": 1.0 - 0.01 * s} for s, v in values.items()}))
    return runs


def test_curve_summaries():
    steps, values = [1, 2, 3, 4, 5], [1.0, 2.0, 3.0, 4.0, 5.0]
    assert summarize_curve(steps, values, window=2) == {"final": 4.5, "auc": 3.0}
    # Uneven logging: the trapezoids follow the steps, not the points.
    assert summarize_curve([0, 10, 20], [0.0, 1.0, 1.0], window=1)["auc"] == pytest.approx((5 + 10) / 20)
    assert summarize_curve([7], [0.4], window=1) == {"final": 0.4, "auc": 0.4}


def test_a_noise_free_effect_is_measured_exactly_and_separated():
    report = compare_runs(make_runs({"sync": 0.0, "dataflex_sync": 0.03}, seeds=range(8)), baseline="sync")
    (metric,) = report.metrics
    assert metric.metric == REWARD and metric.window == 10 and metric.window_steps == tuple(range(11, 21))
    arm = next(a for a in metric.arms if a.arm == "dataflex_sync")
    for kind in ("final", "auc"):
        d = arm.differences[kind]
        assert d.estimate == pytest.approx(0.03)
        assert d.paired and d.sd == pytest.approx(0.0, abs=1e-12)
        assert d.p == pytest.approx(2 / 2**8) and d.verdict == "higher"
        assert d.ci == pytest.approx((0.03, 0.03))
    base = next(a for a in metric.arms if a.arm == "sync")
    assert base.differences is None
    final = base.estimates["final"]
    assert final.mean == pytest.approx(sum(final.per_seed.values()) / 8)
    assert final.ci[0] <= final.mean <= final.ci[1]


def test_equal_arms_are_not_separated_and_a_negative_effect_is_lower():
    # (rng_seed 0 happens to draw all 8 differences of "same" below zero: p = 2/256, a real false positive)
    runs = make_runs({"sync": 0.0, "same": 0.0, "worse": -0.05}, seeds=range(8), noise_sd=0.01, rng_seed=1)
    report = compare_runs(runs, baseline="sync", window=5)
    verdicts = {a.arm: a.differences["final"].verdict for a in report.metrics[0].arms if a.differences}
    assert verdicts == {"same": "not separated", "worse": "lower"}


def test_holm_adjusts_over_the_arms_compared_with_the_baseline():
    runs = make_runs({"sync": 0.0, "a": 0.002, "b": -0.002, "c": 0.001}, seeds=range(6), noise_sd=0.01, seed_sd=0.0)
    report = compare_runs(runs, baseline="sync")
    diffs = [a.differences["final"] for a in report.metrics[0].arms if a.differences]
    ranked = sorted(diffs, key=lambda d: d.p)
    assert ranked[0].p_holm == pytest.approx(min(1.0, 3 * ranked[0].p))
    assert all(d.p_holm >= d.p for d in diffs)


def test_a_real_effect_is_detected_end_to_end_at_the_stated_power():
    """Through the whole pipeline (curves -> summaries -> test -> verdict), as the docs' power table states."""
    found = 0
    trials = 40
    for trial in range(trials):
        # The per-seed difference of the final-window mean has sd ~ noise_sd * sqrt(2 / 10) = 0.0447; delta is 1.5 of it.
        runs = make_runs({"sync": 0.0, "method": 0.067}, seeds=range(10), noise_sd=0.1, rng_seed=trial)
        report = compare_runs(runs, baseline="sync", n_boot=200)
        found += report.metrics[0].arms[1].differences["final"].verdict == "higher"
    assert found / trials >= 0.85, f"found in {found} of {trials}"  # stated: 0.99 at 1.5 sd with 10 seeds


def test_the_report_is_reproducible_and_serialisable(tmp_path):
    runs = make_runs({"sync": 0.0, "dataflex_sync": 0.01}, noise_sd=0.02)
    first = compare_runs(runs, baseline="sync", metrics=[REWARD, "actor/entropy"])
    second = compare_runs(runs, baseline="sync", metrics=[REWARD, "actor/entropy"])
    assert first.as_dict() == second.as_dict() and first.markdown() == second.markdown()
    path = tmp_path / "report.json"
    first.write_json(path)
    data = json.loads(path.read_text())
    assert data["format"] == "dataflex-compare/1" and data["baseline"] == "sync"
    entry = data["metrics"][REWARD]["arms"]["dataflex_sync"]["final"]
    assert set(entry) == {"per_seed", "mean", "sd", "ci", "vs_baseline"}
    assert entry["vs_baseline"]["paired"] is True and "sign-flip" in entry["vs_baseline"]["test"]
    assert data["metrics"][REWARD]["window"] == {"points": 10, "steps": [11, 20]}


def test_the_markdown_table_says_what_was_done():
    runs = make_runs({"sync": 0.0, "dataflex_sync": 0.01}, seeds=range(3), noise_sd=0.02)
    text = compare_runs(runs, baseline="sync").markdown()
    assert f"## `{REWARD}`" in text
    assert (
        "| arm | seeds | summary | mean [95% CI] | sd over seeds | Δ vs `sync` [95% CI] | p | p (Holm) | verdict |"
        in text
    )
    assert "| `sync` (baseline) | 3 | final |" in text and "| `dataflex_sync` | 3 | AUC |" in text
    assert "paired by seed (3 common seeds)" in text
    # 3 paired seeds: the permutation test cannot reach 0.05, and the report says so.
    assert "cannot give p below 0.250" in text and "at least 6 paired seeds" in text
    assert "narrower than its level from 3 seeds" in text  # the arms' own means: a bootstrap
    # Δ's interval inverts the test that gave p: with 3 paired seeds no shift is rejected, so it is unbounded
    assert "exactly when p < 0.050" in text and "[-inf, +inf]" in text


def test_the_report_says_when_holm_puts_a_verdict_out_of_reach():
    # 6 paired seeds reach p = 2/64 < 0.05 for one arm, but not after Holm over two arms (0.0625).
    one = compare_runs(make_runs({"sync": 0.0, "a": 0.01}, seeds=range(6))).markdown()
    assert "cannot give p below" not in one and "**higher**" in one
    two = compare_runs(make_runs({"sync": 0.0, "a": 0.01, "b": 0.02}, seeds=range(6))).markdown()
    assert "cannot give p below 0.031 (0.062 after Holm over 2 arms)" in two and "at least 7 paired seeds" in two
    assert "**higher**" not in two.split("## How to read this")[0]


def test_the_demo_document_is_accepted_directly():
    runs = make_runs({"sync": 0.0, "dataflex_sync": 0.01}, seeds=[0, 1, 2])
    document = {
        "format": "dataflex-demo/1",
        "host": "verl",
        "seed": 0,
        "seeds": [0, 1, 2],
        "runs": [
            {"arm": r.arm, "seed": r.seed, "steps": [{"step": s, "metrics": dict(m)} for s, m in r.steps.items()]}
            for r in runs
        ],
        "settings": {},
    }
    from_document = compare_runs(document, baseline="sync")
    from_records = compare_runs(document["runs"], baseline="sync")
    assert from_document.as_dict()["metrics"] == compare_runs(runs, baseline="sync").as_dict()["metrics"]
    assert from_records.markdown() == from_document.markdown()


def test_seeds_that_share_nothing_are_compared_unpaired():
    runs = make_runs({"sync": 0.0}, seeds=[0, 1, 2, 3]) + make_runs({"method": 0.0}, seeds=[10, 11, 12, 13])
    report = compare_runs(runs, baseline="sync")
    d = report.metrics[0].arms[1].differences["final"]
    assert not d.paired and "arm labels" in d.test
    assert "unpaired (the arms do not share their seeds)" in report.markdown()
    forced = compare_runs(make_runs({"sync": 0.0, "m": 0.0}), pairing="unpaired")
    assert not forced.metrics[0].arms[1].differences["auc"].paired


def test_arms_and_seeds_can_be_selected():
    runs = make_runs({"sync": 0.0, "a": 0.01, "b": 0.02}, seeds=range(4))
    report = compare_runs(runs, arms=["b", "sync"], seeds=[1, 2, 3])
    assert report.arms == ("b", "sync") and report.baseline == "b"
    assert all(a.seeds == (1, 2, 3) for a in report.metrics[0].arms)
    # The baseline leads the table wherever it came in the input.
    report = compare_runs(runs, baseline="b")
    assert report.arms == ("b", "sync", "a") and report.metrics[0].arms[0].differences is None


# -- refusals ------------------------------------------------------------------------------------------------


def error_of(*args, **kwargs) -> str:
    with pytest.raises(CompareError) as info:
        compare_runs(*args, **kwargs)
    return str(info.value)


def test_unknown_metric_lists_close_matches_and_the_available_metrics():
    message = error_of(make_runs({"sync": 0.0, "m": 0.0}), metrics=["critic/score/men"])
    assert "unknown metric 'critic/score/men'" in message
    assert "Did you mean 'critic/score/mean'?" in message
    assert "Metrics every run logs (2): actor/entropy, critic/score/mean" in message


def test_no_reward_metric_and_none_named():
    runs = make_runs({"sync": 0.0, "m": 0.0}, metric="val/acc")
    message = error_of(runs)
    assert "none of the reward metrics" in message and "--metric" in message and "val/acc" in message


def test_a_metric_only_some_runs_log():
    runs = make_runs({"sync": 0.0, "m": 0.0})
    runs[3] = Run("sync", 3, {s: {"actor/entropy": 1.0} for s in range(1, 21)})
    message = error_of(runs, metrics=[REWARD])
    assert "not logged by every run" in message and "sync@3" in message


def test_missing_final_steps_suggest_max_step():
    runs = make_runs({"sync": 0.0, "m": 0.0})
    runs[1] = Run("sync", 1, {s: m for s, m in runs[1].steps.items() if s <= 17}, source="logs/sync1.jsonl")
    message = error_of(runs)
    assert "runs log different steps" in message
    assert "sync@1 (logs/sync1.jsonl): missing step(s) 18, 19, 20 (logs 17 of 20)" in message
    assert "--max-step 17" in message
    report = compare_runs(runs, max_step=17)
    assert report.metrics[0].steps[-1] == 17


def test_a_gap_in_the_middle_is_refused_without_a_max_step_hint():
    runs = make_runs({"sync": 0.0, "m": 0.0})
    runs[6] = Run("m", 1, {s: m for s, m in runs[6].steps.items() if s != 5})
    message = error_of(runs)
    assert "m@1: missing step(s) 5" in message and "--max-step" not in message


def test_unequal_seeds_are_refused_with_the_ways_out():
    runs = make_runs({"sync": 0.0}, seeds=[0, 1, 2]) + make_runs({"method": 0.01}, seeds=[0, 1])
    message = error_of(runs, baseline="sync")
    assert "unequal seeds: arm 'method' has seeds [0, 1] and the baseline 'sync' has [0, 1, 2]" in message
    assert "seed(s) [2] of the baseline are missing from 'method'" in message
    assert "--seeds 0,1" in message and "--unpaired" in message
    assert compare_runs(runs, seeds=[0, 1]).metrics[0].arms[1].differences["final"].paired
    assert not compare_runs(runs, pairing="unpaired").metrics[0].arms[1].differences["final"].paired
    with pytest.raises(CompareError, match="unequal seeds"):
        compare_runs(make_runs({"sync": 0.0}, seeds=[0, 1]) + make_runs({"m": 0.0}, seeds=[5, 6]), pairing="paired")


def test_a_single_seed_gives_no_interval_and_says_so():
    message = error_of(make_runs({"sync": 0.0, "dataflex_sync": 0.01}, seeds=[0]))
    assert "every arm has a single seed (sync@0, dataflex_sync@0)" in message
    assert "at least 2 seeds per arm" in message and "--seeds K" in message
    mixed = make_runs({"sync": 0.0}, seeds=[0, 1]) + make_runs({"m": 0.0}, seeds=[0])
    assert "arm(s) ['m'] have a single seed (m@0)" in error_of(mixed)


def test_non_finite_values_are_named_not_dropped():
    runs = make_runs({"sync": 0.0, "m": 0.0})
    steps = {s: dict(m) for s, m in runs[2].steps.items()}
    steps[12][REWARD] = math.nan
    runs[2] = Run("sync", 2, steps, source="x.jsonl")
    message = error_of(runs)
    assert "not a finite number in sync@2 (x.jsonl) at step(s) 12" in message and "null" in message


def test_bad_window_baseline_duplicates_and_options():
    runs = make_runs({"sync": 0.0, "m": 0.0}, steps=range(1, 6))
    assert "window 8 is longer than the 5 points" in error_of(runs, window=8)
    assert "positive" in error_of(runs, window=0)
    assert compare_runs(runs).metrics[0].window == 5  # the default shrinks to a short run, and says so in the table
    assert "baseline arm 'snyc' is not among the runs (arms: ['sync', 'm']); did you mean 'sync'?" in error_of(
        runs, baseline="snyc"
    )
    assert "n_boot 0 must be a positive number" in error_of(runs, n_boot=0)
    assert "two runs are named sync@0" in error_of(runs + runs[:1])
    assert "test 'z'" in error_of(runs, test="z")
    assert "arm(s) ['nope'] not among the runs" in error_of(runs, arms=["nope"])
    assert "seed(s) [9] not among the runs" in error_of(runs, seeds=[9])


def test_run_records_are_checked():
    with pytest.raises(CompareError, match="lacks \\['seed'\\]"):
        compare_runs([{"arm": "a", "steps": []}])
    with pytest.raises(CompareError, match="seed 'x'"):
        Run("a", "x", {})
    with pytest.raises(CompareError, match="logged twice at step 1 with different values"):
        Run.from_record(
            {"arm": "a", "seed": 0, "steps": [{"step": 1, "metrics": {"r": 1}}, {"step": 1, "metrics": {"r": 2}}]}
        )


def test_final_never_includes_the_evaluation_of_step_0():
    """Three evaluations (steps 0, 5, 10): 'final' is the mean of steps 5 and 10, never of the untrained model."""
    runs = [
        Run(arm, seed, {0: {"eval_reward": 0.0}, 5: {"eval_reward": 0.4 + lift}, 10: {"eval_reward": 0.6 + lift}})
        for arm, lift in (("baseline", 0.0), ("dataflex", 0.1))
        for seed in range(3)
    ]
    metric = compare_runs(runs, metrics=["eval_reward"]).metrics[0]
    assert metric.window == 2 and metric.window_steps == (5, 10)
    assert metric.arms[0].estimates["final"].mean == pytest.approx(0.5)
    with pytest.raises(CompareError, match="after step 0 .*pass --window 2 or less"):
        compare_runs(runs, metrics=["eval_reward"], window=3)
    only_start = [Run(r.arm, r.seed, {0: r.steps[0]}) for r in runs]
    with pytest.raises(CompareError, match="logged at step 0 only"):
        compare_runs(only_start, metrics=["eval_reward"])


def test_compare_defaults_to_the_metric_the_document_declares():
    """A demo's --json names its held-out reward: `dataflex compare FILE` compares that, not the training
    reward it also logs; a declared metric no run logs is named."""
    steps = [{"step": s, "metrics": {"reward": 0.1 * s, "eval_reward": 0.05 * s}} for s in range(1, 4)]
    document = {"format": "dataflex-demo/1", "host": "trl", "metric": "eval_reward",
                "runs": [{"arm": arm, "seed": seed, "steps": steps} for arm in ("baseline", "dataflex")
                         for seed in range(2)]}  # fmt: skip
    assert [m.metric for m in compare_runs(document).metrics] == ["eval_reward"]
    assert [m.metric for m in compare_runs(document, metrics=["reward"]).metrics] == ["reward"]
    with pytest.raises(CompareError, match="declares metric 'val/x' for its comparison"):
        compare_runs({**document, "metric": "val/x"})
    del document["metric"]
    assert [m.metric for m in compare_runs(document).metrics] == ["reward"]  # undeclared: the reward, as before
