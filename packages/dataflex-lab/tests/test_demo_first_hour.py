"""What a new user reads in a demo's output (issue 40): the allocation, the reward labels, no spurious warning."""

from __future__ import annotations

import warnings

from dataflex_lab import demo_report
from dataflex_lab.demo_report import DemoOptions, HostMetrics

VERL = HostMetrics(reward="critic/score/mean", step_time="timing_s/step")
VALIDATION = "val-aux/dataflex_repeat/reward/mean@8"


def family_document(steps: int = 10, every: int = 5) -> dict:
    """A verl task-family demo's document as it writes one: a training reward at every step, the held-out
    validation before training (step 0) and every ``every`` steps."""
    runs = []
    for seed in (0, 1):
        for arm in ("sync", "dataflex_sync"):
            rows = [{"step": 0, "metrics": {VALIDATION: 0.008}}]
            for step in range(1, steps + 1):
                metrics = {"critic/score/mean": 0.2 + 0.04 * step, "timing_s/step": 2.0}
                if step % every == 0:
                    metrics[VALIDATION] = 0.008 + 0.0039 * step
                rows.append({"step": step, "metrics": metrics})
            runs.append({"arm": arm, "seed": seed, "steps": rows})
    return {"runs": runs, "seeds": [0, 1]}


def test_the_summary_labels_a_held_out_reward_with_the_steps_it_is_from(tmp_path):
    """Issue 40.2: '0.008 | 0.047' under 'first 3 steps | last 3 steps' were one validation each, steps 0 and 10."""
    said: list[str] = []
    names = HostMetrics(reward=VALIDATION, step_time=VERL.step_time)
    document = demo_report.finish(family_document(), names=names, baseline="sync", title="t", json_path=None,
                                  plot_path=tmp_path / "p.png", say=said.append)  # fmt: skip
    table = said[0]
    assert "first 3 steps" not in table and "last 3 steps" not in table
    assert "| held-out reward, step 0 | held-out reward, step 10 |" in table, table
    summary = document["summary"]["sync"]
    assert summary["reward_first"] == 0.008 and abs(summary["reward_last"] - 0.047) < 1e-9
    assert summary["reward_first_steps"] == [0, 0] and summary["reward_last_steps"] == [10, 10]


def test_a_training_reward_is_labelled_with_its_step_windows(tmp_path):
    said: list[str] = []
    demo_report.finish(family_document(), names=VERL, baseline="sync", title="t", json_path=None,
                       plot_path=tmp_path / "p.png", say=said.append)  # fmt: skip
    assert "| reward, steps 1-3 | reward, steps 8-10 |" in said[0], said[0]


def allocate_document(n_min: float, n_max: float, *, fallback: float = 0.0, seen: float = 0.0) -> dict:
    runs = []
    for arm in ("sync", "dataflex_sync"):
        rows = []
        for step in range(1, 4):
            metrics = {"critic/score/mean": 0.1 * step, "timing_s/step": 2.0}
            if arm == "dataflex_sync":
                metrics.update({
                    "dataflex/allocate/n_min": n_min, "dataflex/allocate/n_mean": 4.0,
                    "dataflex/allocate/n_max": n_max, "dataflex/allocate/fallback": fallback,
                    "dataflex/allocate/seen_before": seen,
                })  # fmt: skip
            rows.append({"step": step, "metrics": metrics})
        runs.append({"arm": arm, "seed": 0, "steps": rows})
    return {"runs": runs, "seeds": [0]}


def finished_text(document: dict, tmp_path) -> str:
    said: list[str] = []
    demo_report.finish(document, names=VERL, baseline="sync", title="t", json_path=None,
                       plot_path=tmp_path / "p.png", say=said.append)  # fmt: skip
    return "\n".join(said)


def test_each_allocate_step_line_shows_the_allocation():
    """Issue 40.1: the step lines showed no allocation."""
    record = allocate_document(2, 6)["runs"][1]["steps"][0]
    line = demo_report.progress_line("dataflex_sync", 0, 3, record, VERL)
    assert "allocation: rollouts per prompt 2-6 (mean 4.0), prompts seen before 0%" in line
    even = allocate_document(4, 4, fallback=1.0)["runs"][1]["steps"][0]
    assert "rollouts per prompt 4 (mean 4.0)" in (text := demo_report.progress_line("d", 0, 3, even, VERL))
    assert "(even split: allocator not asked)" in text


def test_an_allocate_run_split_evenly_at_every_step_says_why_and_what_to_change(tmp_path):
    """Issue 40.1: two identical arms and nothing said; now the reason (no prompt recurred) and the change."""
    text = finished_text(allocate_document(4, 4, seen=0.0), tmp_path)
    assert "Arm dataflex_sync split the budget evenly at every step (4 rollouts per prompt)" in text
    assert "no prompt came back" in text and "run more --steps" in text
    text = finished_text(allocate_document(4, 4, fallback=1.0), tmp_path)
    assert "the allocator was never asked" in text and "warmup_step" in text
    text = finished_text(allocate_document(4, 4, seen=0.5), tmp_path)
    assert "same count from what the ledger knew" in text and "--scorer" in text
    assert "split the budget evenly" not in finished_text(allocate_document(2, 6, seen=0.5), tmp_path)


def test_the_demos_pre_check_does_not_warn_about_groups_for_its_grpo_run():
    """Issue 40.3: the pre-check built without the estimator and warned that a group scorer was unchecked."""
    block = DemoOptions(scorer="group_solve_rate", actuator="difficulty_band").block()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        demo_report.check_components(block)


def test_the_arm_line_counts_training_steps_and_each_variant_has_its_own_plot(tmp_path, monkeypatch):
    """Issue 40.10: '11 steps' for --steps 10 (the validation at step 0 counted); one demo.png for every variant;
    one host printed the plot's absolute path, the other a relative one."""
    steps = family_document(steps=10)["runs"][0]["steps"]
    assert demo_report.arm_done_line("sync", 0, steps, 139.2) == (
        "sync, seed 0: 10 training steps (and a validation before training) in 139 s"
    )
    assert DemoOptions().plot_name() == "demo.png"
    assert DemoOptions(mechanism="allocate").plot_name() == "demo-allocate-mixed.png"
    assert DemoOptions(task="repeat").plot_name() == "demo-reweight-repeat.png"
    monkeypatch.chdir(tmp_path)
    assert demo_report.shown_path(tmp_path / "work" / "demo.png") == "work/demo.png"
    assert demo_report.shown_path("/elsewhere/demo.png") == "/elsewhere/demo.png"


def test_the_summarys_step_time_is_the_compute_tables_figure_with_a_validation_before_training(tmp_path):
    """Issue 40.6: one step-time figure everywhere, the median per step without the warm-up step, also when step 0
    is a validation record (it has no step time, so skipping it left the warm-up in)."""
    from dataflex_lab.compare.costs import median_step_time
    from dataflex_lab.compare.readers import runs_from_demo

    document = family_document(steps=4, every=2)
    for run in document["runs"]:
        run["steps"][1]["metrics"]["timing_s/step"] = 30.0  # step 1: warm-up
        run["steps"][2]["metrics"]["timing_s/step"] = 3.0
    document = demo_report.demo_document("verl", [0, 1], document["runs"], {})
    names = HostMetrics(reward=VALIDATION, step_time=VERL.step_time)
    finished = demo_report.finish(document, names=names, baseline="sync", title="t", json_path=None,
                                  plot_path=tmp_path / "p.png", say=lambda _: None)  # fmt: skip
    assert finished["summary"]["sync"]["step_s_median"] == 2.0  # steps 2-4: 3.0, 2.0, 2.0
    (first,) = [run for run in runs_from_demo(document) if run.arm == "sync" and run.seed == 0]
    assert median_step_time(first) == 2.0


def test_dataflex_compare_on_the_demos_json_compares_what_the_demo_compared(tmp_path, capsys):
    """Issue 40.5: the demo compared the held-out reward, `dataflex compare` on its JSON the training score."""
    import json

    from dataflex_core.cli import main as dataflex_main
    from dataflex_lab.compare import compare_runs

    path = tmp_path / "repeat.json"
    said: list[str] = []
    document = demo_report.demo_document("verl", [0, 1], family_document()["runs"], {})
    names = HostMetrics(reward=VALIDATION, step_time=VERL.step_time)
    demo_report.finish(document, names=names, baseline="sync", title="t", json_path=path,
                       plot_path=tmp_path / "p.png", say=said.append)  # fmt: skip
    written = json.loads(path.read_text())
    assert written["metric"] == VALIDATION
    (metric,) = compare_runs(written, baseline="sync").metrics
    assert metric.metric == VALIDATION
    assert VALIDATION in "\n".join(said)  # the demo's own comparison, the same metric
    capsys.readouterr()
    assert dataflex_main(["compare", str(path), "--baseline", "sync"]) == 0
    out = capsys.readouterr().out
    assert VALIDATION in out and "critic/score/mean" not in out


def test_building_the_verl_demos_model_prints_no_progress_bar(tmp_path, capfd):
    """Issue 40.10: a `Writing model shards: 0%` line in every verl run."""
    import pytest

    pytest.importorskip("transformers")
    from transformers.utils import logging as hf_logging

    from dataflex_lab.verl.cpu_loop.model import build_model

    hf_logging.enable_progress_bar()
    build_model(tmp_path / "model", seed=0)
    assert (tmp_path / "model" / "config.json").is_file()
    assert "Writing model shards" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # put back as it was
