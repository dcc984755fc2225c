"""``dataflex-trl evidence``: the quick campaign trains in TRL's real loop, resumes, and its table is
``dataflex compare``'s statistics; the held-out score is a fixed-seed score."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from dataflex_lab.compare import compare_runs, runs_from_demo
from dataflex_lab.compare.axis import axis_values
from dataflex_lab.compare.stats import detectable_ratio
from dataflex_lab.compute import total
from dataflex_lab.trl import heldout
from dataflex_lab.trl.evidence import (
    METHODS,
    METRIC,
    QUICK,
    SMOKE_NOTE,
    TABLE_METHODS,
    TARGETS,
    UNIFORM,
    Campaign,
    method_table,
    parse_seeds,
    report_campaign,
    run_campaign,
)

GENERATED, TRAINED, ROUNDS = (total(n) for n in ("rollouts_generated", "rollouts_trained", "generation_rounds"))


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The quick campaign, run once for the module: its workdir and what it printed."""
    workdir = tmp_path_factory.mktemp("evidence")
    out = io.StringIO()
    summary = run_campaign(Campaign(**{**QUICK, "workdir": workdir, "quick": True}), out=out)
    return workdir, out.getvalue(), summary


def test_the_quick_campaign_says_it_is_a_smoke_test_and_writes_every_run(quick):
    workdir, text, _ = quick
    assert text.startswith(SMOKE_NOTE) and text.rstrip().endswith(SMOKE_NOTE)
    assert "[6/6] " in text and "0 runs left" in text and "about" in text  # progress with the time left
    document = json.loads((workdir / "repeat.runs.json").read_text())
    assert document["baseline"] == UNIFORM and document["metric"] == METRIC
    assert sorted((r["arm"], r["seed"]) for r in document["runs"]) == sorted(
        (method, seed) for method in QUICK["methods"] for seed in QUICK["seeds"]
    )
    for run in document["runs"]:  # the held-out score before training and every 2 steps, on its own record at 0
        scored = [r["step"] for r in run["steps"] if METRIC in r["metrics"]]
        assert scored[0] == 0 == run["steps"][0]["step"] and scored[-1] == run["steps"][-1]["step"]
        if run["arm"] != "filter":  # the filter stops sooner, at uniform's rollout budget (below)
            assert scored == [0, 2, 4]

    # the filter's x is every rollout it generated, evicted groups included: 64 per generation round
    filtered = [run for run in runs_from_demo(document) if run.arm == "filter"]
    for run in filtered:
        last = run.curve(GENERATED)[-1][1]
        assert last == 64 * run.curve(ROUNDS)[-1][1] and run.curve(TRAINED)[-1][1] == 64 * max(run.steps)
        assert axis_values(run, "rollouts", sorted(run.steps))[-1] == last
    assert any(run.curve(ROUNDS)[-1][1] > QUICK["steps"] for run in filtered), "no step refilled: nothing checked"
    # every run stops once it generated uniform's budget (steps x 64), and is scored where it stopped
    for run in filtered:
        spent = [0.0] + [value for _, value in run.curve(GENERATED)]
        last, before = spent[-1], spent[-2]
        assert last >= 64 * QUICK["steps"] > before
        assert max(s for s in run.steps if METRIC in run.steps[s]) == max(run.steps)


def test_the_tables_numbers_are_dataflex_compares(quick):
    """Each row is compare_runs on the family's document, restricted to the method and its baseline: the same
    ratio, interval and p as `dataflex compare FILE --arms uniform,M --x rollouts --target T` gives."""
    workdir, _, summary = quick
    document = json.loads((workdir / "repeat.runs.json").read_text())
    rows = {r["method"]: r for r in summary["table"]}
    assert set(rows) == {"curriculum", "filter"}
    for method, row in rows.items():
        metric = compare_runs(document, arms=[UNIFORM, method], metrics=[METRIC], x="rollouts",
                              target=TARGETS["repeat"]).metrics[0]  # fmt: skip
        ratio = metric.ratios[method]
        auc = next(a for a in metric.arms if a.arm == method).differences["auc"]
        assert row["ratio"]["p"] == ratio.p and row["auc"]["p"] == auc.p and row["auc"]["ci"] == list(auc.ci)
        if row["ratio"]["value"] == row["ratio"]["value"]:  # not NaN (reached at the start)
            assert row["ratio"]["value"] == ratio.ratio and row["ratio"]["ci"] == list(ratio.ci)
        assert row["budget"] == metric.budget == 64 * QUICK["steps"]  # uniform's: the filter spends more a step
    table = (workdir / "table.md").read_text()
    assert "| repeat (0.15) | `filter` | 2 |" in table and "dataflex compare" in table


def test_a_second_call_resumes_and_a_run_of_other_settings_is_refused(quick):
    workdir, _, summary = quick
    out = io.StringIO()
    again = run_campaign(Campaign(**{**QUICK, "workdir": workdir, "quick": True}), out=out)
    assert "(6 done before, resumed; 0 to run" in out.getvalue() and again["table"] == summary["table"]
    with pytest.raises(ValueError, match="was made with other settings \\(steps: 4 here, 6 now\\)"):
        run_campaign(Campaign(**{**QUICK, "workdir": workdir, "steps": 6}), out=io.StringIO())
    # --report-only: the same table from the records, nothing trained
    assert report_campaign(Campaign(**{**QUICK, "workdir": workdir}), out=io.StringIO())["table"] == summary["table"]


def test_holm_runs_across_each_methods_one_pre_declared_primary_test():
    """A method's verdict is its primary test (family and axis, ``PRIMARY``), Holm-adjusted across the methods'
    primary tests; every other row is exploratory whatever its p."""
    rows = [
        {"family": f, "method": m, "seeds": list(range(10)), "ratio": {"p": p, "value": v, "sd_log": sd},
         "auc": {"p": 0.5, "difference": 0.1}, "axes": {"optimizer_steps": {"p": 0.001, "value": 3.0}}}
        for f, m, p, v, sd in (("band", "curriculum", 0.004, 2.0, 0.5), ("band", "pilot", 0.02, 0.5, 1.0),
                               ("band", "filter", 0.9, 0.7, 0.5), ("repeat", "curriculum", 1e-6, 2.0, None))
    ]  # fmt: skip
    primary = {"curriculum": ("band", "rollouts"), "pilot": ("band", "rollouts"), "filter": ("band", "optimizer_steps")}
    table = method_table(rows, primary=primary)
    tests = [r["primary"] for r in table]
    assert [t and t["axis"] for t in tests] == ["rollouts", "rollouts", "optimizer_steps", None]
    # three primary tests: 0.001 (filter's steps) * 3, 0.004 * 2, 0.02 * 1
    assert [t["p_holm"] for t in tests[:3]] == pytest.approx([0.008, 0.02, 0.003])
    assert [t["verdict"] for t in tests[:3]] == ["needs less", "needs more", "needs less"]
    # the other family's row is exploratory however small its p; so is every AUC test
    assert table[3]["ratio"]["verdict"] == "exploratory (lean)" and table[0]["auc"]["verdict"] == "exploratory"
    # each row's power: the fold change 10 seeds of its spread detect at 80 % at Holm's strictest level (0.05 / 3)
    detectable = [r["ratio"]["detectable"] for r in table]
    assert detectable[:2] == pytest.approx([detectable_ratio(0.5, 10, 0.05 / 3), detectable_ratio(1.0, 10, 0.05 / 3)])
    assert 1.0 < detectable[0] < detectable[1] and detectable[3] == float("inf")  # no spread known: no claim


def test_every_table_method_but_the_baselines_has_one_primary_test_on_a_campaign_family_and_axis():
    from dataflex_lab.trl.evidence import PRIMARY

    assert set(PRIMARY) == {m for m in TABLE_METHODS if METHODS[m].baseline != m}
    assert all(f in TARGETS and axis in ("rollouts", "optimizer_steps", "modeled") for f, axis in PRIMARY.values())


def test_the_detectable_ratio_is_the_t_approximation_of_a_paired_test_on_log_ratios():
    # t(0.975, 9) = 2.2622 and t(0.8, 9) = 0.8834 (tables): exp(3.1456 x 0.5 / sqrt(10)) = 1.644
    assert detectable_ratio(0.5, 10, 0.05) == pytest.approx(1.644, abs=1e-3)
    # 30 seeds at the low end of the docs' measured spread (0.65) and Holm over 64 tests: about 1.7x (docs/evidence.md)
    assert detectable_ratio(0.65, 30, 0.05 / 64) == pytest.approx(1.7, abs=0.05)
    assert detectable_ratio(0.5, 1, 0.05) == float("inf")


def test_every_table_method_is_one_entry_and_slices_are_named_as_documented():
    assert TABLE_METHODS[0] == UNIFORM and "allocate" in TABLE_METHODS and "curriculum_floor0.2" not in TABLE_METHODS
    assert all(METHODS[METHODS[m].baseline].options is None for m in METHODS)
    assert METHODS["allocate"].host == "verl" and METHODS["allocate"].baseline == "uniform_verl"
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("10-12") == [10, 11, 12] and parse_seeds("4,7") == [4, 7]
    with pytest.raises(argparse.ArgumentTypeError, match="give K"):
        parse_seeds("a-b")


def test_pilot_is_a_trl_method_the_quick_campaign_can_run(tmp_path):
    """``mechanism: pilot`` is a table method on TRL, its block the demo's ``--mechanism pilot``, and a campaign of
    the quick settings naming it passes the campaign's checks (no run here: the quick campaign runs above)."""
    from dataflex_trl.mount import mount

    from dataflex_core.session import DataFlexSession
    from dataflex_core.step.seams import StagedGeneration
    from dataflex_lab import task_families
    from dataflex_lab.demo_report import PILOT_DEMO
    from dataflex_lab.trl.toy import family_dataset
    from dataflex_lab.trl.training_demo import DemoSettings, grpo_config

    spec = METHODS["pilot"]
    assert "pilot" in TABLE_METHODS and spec.host == "trl" and spec.baseline == UNIFORM
    settings = DemoSettings(**spec.options, task="repeat", steps=2, val_every=0, workdir=tmp_path)
    block = settings.block()
    assert block["mechanism"] == "pilot" and block["pilot"] == PILOT_DEMO
    task = task_families.family("repeat")
    splits = task.build(task_families.structure_from(None, task), 0)
    session = DataFlexSession(block)
    mount(session, grpo_config(settings, "pilot", 0), family_dataset(splits.train))  # what the run's trainer mounts
    assert session.seam(StagedGeneration) is not None
    campaign = Campaign(**{**QUICK, "methods": [*QUICK["methods"], "pilot"]})
    campaign.check()
    assert campaign.key("repeat", "pilot")["options"] == {"mechanism": "pilot"}
    assert "pilot" in Campaign().methods  # the full campaign runs it by default


def _changed(base: object, other: object, path: str = "") -> list[str]:
    """The key paths where two ``dataflex:`` blocks differ (a key on one side only counts)."""
    if isinstance(base, dict) and isinstance(other, dict):
        return [p for k in sorted(set(base) | set(other), key=str)
                for p in _changed(base.get(k), other.get(k), f"{path}.{k}" if path else str(k))]  # fmt: skip
    return [] if base == other else [path]


#: The TRL sensitivity settings, with the one key of their method's block each changes.
TRL_SETTINGS = {name: m for name, m in METHODS.items() if m.varies is not None and m.host == "trl"}
CHANGES = {
    "curriculum_floor0.2": ("actuator.params.exploration", 0.2),
    "curriculum_alpha0.5": ("scorer.params.alpha", 0.5),
    "curriculum_mopps_floor0.2": ("actuator.params.exploration", 0.2),
    "curriculum_greso_explore0.25": ("scorer.params.exploration", 0.25),
    "pilot_rollouts4": ("pilot.rollouts", 4),
    "pilot_prompts4": ("pilot.prompts", 4),
    "filter_r8": ("filter.max_rounds", 8),
    "filter_r2": ("filter.max_rounds", 2),
}


def test_every_sensitivity_setting_is_named_for_its_change():
    assert set(CHANGES) == set(TRL_SETTINGS), "a new TRL sensitivity setting: say here which key it changes"
    assert {"pilot_rollouts4", "pilot_prompts4", "filter_r2", "filter_r8"} <= set(TRL_SETTINGS)
    assert not set(TRL_SETTINGS) & set(TABLE_METHODS)  # kept out of the main table and its Holm
    assert all(METHODS[m.varies].baseline == m.baseline for m in TRL_SETTINGS.values())


@pytest.mark.parametrize("name", sorted(TRL_SETTINGS))
def test_a_sensitivity_setting_changes_one_key_of_its_methods_block_and_mounts_on_trl(name, tmp_path):
    """Each setting is its method with one key changed (so its row reads as that key's effect), and TRL's
    trainer mounts its block on the family's data as a run of the campaign does."""
    from dataflex_trl.mount import mount

    from dataflex_core.session import DataFlexSession
    from dataflex_lab import task_families
    from dataflex_lab.trl.toy import family_dataset
    from dataflex_lab.trl.training_demo import DemoSettings, grpo_config

    spec = TRL_SETTINGS[name]

    def block(options):
        return DemoSettings(**options, task="repeat", steps=2, val_every=0, workdir=tmp_path).block()

    setting = block(spec.options)
    path, value = CHANGES[name]
    assert _changed(block(METHODS[spec.varies].options), setting) == [path]
    found = setting
    for key in path.split("."):
        found = found[key]
    assert found == value
    task = task_families.family("repeat")
    splits = task.build(task_families.structure_from(None, task), 0)
    session = DataFlexSession(setting)
    mount(session, grpo_config(DemoSettings(**spec.options, task="repeat", steps=2, val_every=0, workdir=tmp_path),
                               name, 0), family_dataset(splits.train))  # fmt: skip
    Campaign(families=["repeat"], methods=[UNIFORM, name], seeds=[0, 1]).check()


@pytest.mark.parametrize(("name", "screened", "rollouts"), [("pilot", 16, 2), ("pilot_rollouts4", 16, 4),
                                                             ("pilot_prompts4", 32, 2)])  # fmt: skip
def test_the_pilot_size_settings_screen_what_they_say(name, screened, rollouts, tmp_path):
    """A step of 8 prompts of 8 rollouts: its first screening stage asks ``prompts`` x 8 prompts ``rollouts``
    times each, and the commit tops the admitted up to the group's 8."""
    from dataflex_trl.mount import mount

    from dataflex_core.session import DataFlexSession
    from dataflex_core.step.seams import StagedGeneration
    from dataflex_lab import task_families
    from dataflex_lab.trl.toy import family_dataset
    from dataflex_lab.trl.training_demo import DemoSettings, grpo_config

    settings = DemoSettings(**METHODS[name].options, task="repeat", steps=2, val_every=0, workdir=tmp_path)
    task = task_families.family("repeat")
    splits = task.build(task_families.structure_from(None, task), 0)
    session = DataFlexSession(settings.block())
    config = grpo_config(settings, name, 0)
    mount(session, config, family_dataset(splits.train))
    seam = session.seam(StagedGeneration)
    seam.prepare(len(splits.train), batch_size=8, seed=0)
    first = seam.stages(8, rollout_n=config.num_generations).next()
    assert config.num_generations == 8 and len(first.prompts) == screened
    assert first.counts.tolist() == [rollouts] * screened


def test_a_campaign_refuses_what_it_cannot_compare():
    with pytest.raises(ValueError, match="unknown method\\(s\\) \\['pilots'\\]"):
        Campaign(methods=[UNIFORM, "pilots"]).check()
    with pytest.raises(ValueError, match="at least 2 distinct seeds"):
        Campaign(seeds=[0]).check()
    with pytest.raises(ValueError, match="unknown task family 'sort'"):
        Campaign(families=["sort"]).check()
    with pytest.raises(ValueError, match="--target 1.5 is outside"):
        Campaign(target=1.5).check()
    assert Campaign().target_for("band") == TARGETS["band"] and Campaign(target=0.2).target_for("count") == 0.2


def test_the_held_out_score_uses_a_fixed_sampling_seed():
    """The same model scores the same twice, whatever the global random state did in between; another seed
    draws other completions; training's random stream is left where it was."""
    import torch

    from dataflex_lab import task_families
    from dataflex_lab.trl.toy import FAMILY_MODEL, family_tokenizer, tiny_model

    task = task_families.FAMILIES["band"]
    structure = task_families.structure_from(None, task)
    held = task.build(structure, 0).held_out
    tokenizer = family_tokenizer(task)
    model = tiny_model(tokenizer, seed=0, spec=FAMILY_MODEL)
    sampling = heldout.Sampling(max_new_tokens=task.response_length(structure))
    torch.manual_seed(123)
    first = heldout.score_prompts(model, tokenizer, task, held, samples=8, seed=heldout.eval_seed(0), sampling=sampling)
    after = torch.rand(1)
    torch.manual_seed(123)
    torch.rand(5)  # a different global state before the second score
    second = heldout.score_prompts(
        model, tokenizer, task, held, samples=8, seed=heldout.eval_seed(0), sampling=sampling
    )
    assert torch.equal(first, second) and first.shape == (len(held), 8)
    torch.manual_seed(123)
    heldout.score_prompts(model, tokenizer, task, held, samples=8, seed=heldout.eval_seed(0), sampling=sampling)
    assert torch.equal(torch.rand(1), after)  # the caller's stream is untouched
    other = heldout.score_prompts(model, tokenizer, task, held, samples=8, seed=heldout.eval_seed(1), sampling=sampling)
    assert not torch.equal(first, other)
    summary = heldout.summarize(first, held)
    assert summary[METRIC] == pytest.approx(float(first.mean()))
    assert summary[METRIC] == pytest.approx(sum(summary[heldout.LEVEL_METRIC.format(d)] for d in range(1, 6)) / 5)


def test_the_fixed_balanced_held_out_set_scores_the_same_model_the_same_twice():
    """``held_out_prompts: "all"`` on band: 80 prompts, 16 per level; the same model gets the same rewards twice
    (whatever the global random state did between), and the score is the plain mean of the level means."""
    import torch

    from dataflex_lab import task_families
    from dataflex_lab.trl.toy import FAMILY_MODEL, family_tokenizer, tiny_model

    task = task_families.FAMILIES["band"]
    structure = task_families.structure_from({"held_out_prompts": "all"}, task)
    held = task.build(structure, 3).held_out
    assert len(held) == 80 and all(sum(p.difficulty == d for p in held) == 16 for d in range(1, 6))
    tokenizer = family_tokenizer(task)
    model = tiny_model(tokenizer, seed=3, spec=FAMILY_MODEL)
    sampling = heldout.Sampling(max_new_tokens=task.response_length(structure))
    scores = []
    for noise in (0, 7):
        torch.manual_seed(noise)
        rewards = heldout.score_prompts(model, tokenizer, task, held, samples=4, seed=heldout.eval_seed(3),
                                        sampling=sampling)  # fmt: skip
        scores.append(heldout.summarize(rewards, held))
    assert scores[0] == scores[1]
    levels = [scores[0][heldout.LEVEL_METRIC.format(d)] for d in range(1, 6)]
    assert scores[0][METRIC] == pytest.approx(sum(levels) / 5)


def test_the_step0_profile_counts_zero_variance_groups():
    """Constant prompts are zero-variance for every model; the shares are counts over the train prompts."""
    from dataflex_lab import task_families

    task = task_families.FAMILIES["band"]
    profile = heldout.step0_profile(task, task_families.structure_from(None, task), seed=0)
    assert profile["by_kind"]["solved"] == 1.0 and profile["by_kind"]["unsolvable"] == 1.0
    n = {"solved": 29, "unsolvable": 29, "learnable": 38}
    overall = sum(profile["by_kind"][k] * n[k] for k in n) / 96
    assert profile["zero_variance_share"] == pytest.approx(overall)
    assert 0.0 < profile["by_kind"]["learnable"] < 1.0  # a fresh model solves some easy prompts sometimes


def test_a_failed_run_is_named_not_kept_and_rerun_next_time(tmp_path, monkeypatch):
    """A run whose framework crashes does not stop the campaign: the others are kept, the failure is named, and
    the same command runs only the missing one (synthetic runs stand in for training here)."""
    from dataflex_lab.trl import evidence

    calls = []

    def fake(campaign, family, method, seed):
        calls.append((method, seed))
        if (method, seed) == ("curriculum", 1) and len(calls) < 5:
            raise RuntimeError("verl exited with code 1; Ray timed out")
        steps = [{"step": s, "metrics": {METRIC: 0.1 * s * (1.5 if method == "curriculum" else 1.0),
                                         GENERATED: 64.0 * s, TRAINED: 64.0 * s, total("rollouts_wasted"): 32.0 * s,
                                         ROUNDS: 1.0 * s, "step_time": 1.0}} for s in range(0, 5)]  # fmt: skip
        return {"arm": method, "seed": seed, "host": "trl", "key": campaign.key(family, method), "wall_s": 1.0,
                "steps": steps}  # fmt: skip

    monkeypatch.setattr(evidence, "run_one", fake)
    campaign = Campaign(families=["repeat"], methods=[UNIFORM, "curriculum"], seeds=[0, 1, 2], steps=4, val_every=2,
                        workdir=tmp_path)  # fmt: skip
    out = io.StringIO()
    run_campaign(campaign, out=out)
    text = out.getvalue()
    assert "repeat curriculum seed 1: FAILED, not kept (verl exited with code 1; Ray timed out)" in text
    assert "1 run(s) failed and were not kept (repeat curriculum seed 1)" in text
    assert not campaign.record_path("repeat", "curriculum", 1).exists()
    assert len(calls) == 6
    out = io.StringIO()
    summary = run_campaign(campaign, out=out)
    assert calls[6:] == [("curriculum", 1)] and "(5 done before, resumed; 1 to run" in out.getvalue()
    assert summary["table"][0]["seeds"] == [0, 1, 2]


def test_a_workdir_of_sensitivity_settings_only_reports_their_table_as_exploratory(tmp_path, monkeypatch):
    """Settings run beside their baseline alone (no table method): one sensitivity table, every row exploratory
    (no setting has a primary test), no empty main table (synthetic runs stand in for training)."""
    from dataflex_lab.trl import evidence

    def fake(campaign, family, method, seed):
        gain = {"filter_r2": 1.2, "filter_r8": 0.8}.get(method, 1.0) + 0.01 * seed
        steps = [{"step": s, "metrics": {METRIC: 0.1 * s * gain, GENERATED: 64.0 * s, TRAINED: 64.0 * s,
                                         total("rollouts_wasted"): 32.0 * s, ROUNDS: 1.0 * s, "step_time": 1.0}}
                 for s in range(0, 5)]  # fmt: skip
        return {"arm": method, "seed": seed, "host": "trl", "key": campaign.key(family, method), "wall_s": 1.0,
                "steps": steps}  # fmt: skip

    monkeypatch.setattr(evidence, "run_one", fake)
    campaign = Campaign(families=["repeat"], methods=[UNIFORM, "filter_r2", "filter_r8"], seeds=[0, 1, 2], steps=4,
                        val_every=2, workdir=tmp_path)  # fmt: skip
    summary = run_campaign(campaign, out=io.StringIO())
    assert summary["table"] == [] and [r["method"] for r in summary["sensitivity"]] == ["filter_r8", "filter_r2"]
    text = (tmp_path / "table.md").read_text()
    assert text.startswith("## Sensitivity (same seeds)") and "## Method by family" not in text
    assert "Holm over the table's 0 primary tests" in text
    assert all(r["primary"] is None for r in summary["sensitivity"]) and text.count("| exploratory |") == 2


def test_progress_counts_runs_left_and_divides_the_time_left_by_the_runs_side_by_side():
    from dataflex_lab.trl.evidence import Progress

    said: list[str] = []
    todo = [("repeat", UNIFORM, seed) for seed in range(5)]
    progress = Progress(todo, done_before=1, say=said.append, jobs=2)
    progress.finished("repeat", UNIFORM, 0, {"wall_s": 10.0, "steps": []})
    # 4 TRL runs of about 10 s left, 2 at a time: about 20 s, not the 40 s of one after another
    assert said[-1].startswith("  [2/6] repeat uniform seed 0: 10 s")
    assert said[-1].endswith("4 runs left, about 20 s left")
    for seed in range(1, 5):
        progress.finished("repeat", UNIFORM, seed, {"wall_s": 10.0, "steps": []})
    assert said[-1].endswith("0 runs left")


def test_the_grid_is_every_combination_and_the_default_setting_keeps_today_s_records():
    from dataflex_lab.trl.evidence import Setting, parse_grid

    grid = parse_grid(["lr=3e-3,5e-3", "init=0.1,0.04"])
    assert [(s.lr, s.init_scale) for s in grid] == [(3e-3, 0.1), (3e-3, 0.04), (5e-3, 0.1), (5e-3, 0.04)]
    assert [s.label() for s in grid] == ["", "init0.04", "lr0.005", "lr0.005_init0.04"]
    assert grid[3].options() == " --lr 0.005 --init-scale 0.04"
    assert parse_grid(["temperature=1.2"], Setting(lr=5e-3)) == [Setting(lr=5e-3, temperature=1.2)]
    # the default setting's records carry the key they had before settings were options: old workdirs resume
    assert "setting" not in Campaign().key("band", UNIFORM)
    assert Campaign(setting=grid[3]).key("band", UNIFORM)["setting"] == {"lr": 5e-3, "init_scale": 0.04}
    for bad, message in ((["rate=1"], "KEY one of lr, init"), (["lr=a"], "must be numbers"),
                         (["lr=1", "lr=2"], "twice"), (["init=0,0.1"], "--init-scale 0.0 must be a positive")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            parse_grid(bad)
    with pytest.raises(ValueError, match="run on verl"):
        Campaign(methods=[UNIFORM, "allocate"], setting=Setting(lr=5e-3)).check()


def test_a_setting_reaches_the_trainer_the_model_and_the_held_out_scorer(monkeypatch, tmp_path):
    """run_one hands the setting to TRL's config (learning rate, rollout temperature), the model (its initial
    weight scale) and the held-out scorer (its temperature); nothing is trained here."""
    from dataflex_lab.trl import evidence, training_demo
    from dataflex_lab.trl.evidence import Setting

    seen = {}

    def fake_train(settings, arm, seed, on_step, callbacks):
        config = training_demo.grpo_config(settings, arm, seed)
        seen.update(lr=config.learning_rate, temperature=config.temperature,
                    init=training_demo.family_model_spec(settings.init_scale).initializer_range)  # fmt: skip
        return [{"step": 1, "metrics": {"reward": 0.0}}]

    shared = heldout.evaluation_callback

    def scorer(*args, **kwargs):
        seen["eval_temperature"] = kwargs["temperature"]
        return shared(*args, **kwargs)

    monkeypatch.setattr(training_demo, "train_arm", fake_train)
    monkeypatch.setattr(heldout, "evaluation_callback", scorer)
    setting = Setting(lr=5e-3, init_scale=0.04, temperature=1.2, eval_temperature=0.7)
    evidence.run_one(Campaign(steps=2, val_every=1, workdir=tmp_path, setting=setting), "band", UNIFORM, 0)
    assert seen == {"lr": 5e-3, "temperature": 1.2, "init": 0.04, "eval_temperature": 0.7}
    evidence.run_one(Campaign(steps=2, val_every=1, workdir=tmp_path), "band", UNIFORM, 0)
    assert seen == {"lr": 3e-3, "temperature": 1.0, "init": 0.1, "eval_temperature": None}  # today's values


def test_a_grid_keeps_each_setting_apart_and_resumes_it(tmp_path, monkeypatch):
    """Each setting's runs in a folder of their own (the default's where they were), each resumed on its own
    (synthetic runs stand in for training)."""
    from dataflex_lab.trl import evidence

    calls = []

    def fake(campaign, family, method, seed):
        calls.append((campaign.setting.lr, method, seed))
        steps = [{"step": s, "metrics": {METRIC: 0.05 * s * campaign.setting.lr * 1000, GENERATED: 64.0 * s,
                                         TRAINED: 64.0 * s, total("rollouts_wasted"): 0.0, ROUNDS: 1.0 * s}}
                 for s in range(0, 5)]  # fmt: skip
        return {"arm": method, "seed": seed, "host": "trl", "key": campaign.key(family, method), "wall_s": 1.0,
                "steps": steps}  # fmt: skip

    monkeypatch.setattr(evidence, "run_one", fake)
    campaign = Campaign(families=["repeat"], methods=[UNIFORM, "filter"], seeds=[0, 1], steps=4, val_every=2,
                        workdir=tmp_path)  # fmt: skip
    grid = evidence.parse_grid(["lr=3e-3,5e-3"])
    out = io.StringIO()
    results = evidence.run_grid(campaign, grid, out=out)
    assert set(results) == {"default", "lr0.005"} and len(calls) == 8
    assert (tmp_path / "runs" / "repeat" / "filter" / "seed1.json").is_file()
    assert (tmp_path / "settings" / "lr0.005" / "runs" / "repeat" / "filter" / "seed1.json").is_file()
    assert "# setting 2/2: lr 0.005" in out.getvalue()
    assert "--lr 0.005" in (tmp_path / "settings" / "lr0.005" / "table.md").read_text()
    evidence.run_grid(campaign, grid, out=io.StringIO())
    assert len(calls) == 8  # every run of both settings resumed


def test_pilot_commit_is_a_table_method_whose_block_is_the_preset_with_the_papers_band_and_mounts_on_trl(tmp_path):
    """The published method is a row of the table: ``pilot.preset: pilot-commit`` (backfilling a short step, where
    the preset would stop the run) admitting on the band [0.125, 0.75] of the pilot mean, mounted by TRL's trainer
    on the band family's data as a run of the campaign does."""
    from dataflex_trl.mount import mount

    from dataflex_core.mechanisms.pilot.settings import PILOT_COMMIT_BAND
    from dataflex_core.session import DataFlexSession
    from dataflex_lab import task_families
    from dataflex_lab.trl.toy import family_dataset
    from dataflex_lab.trl.training_demo import DemoSettings, grpo_config

    spec = METHODS["pilot_commit"]
    assert "pilot_commit" in TABLE_METHODS and spec.host == "trl" and spec.baseline == UNIFORM
    block = DemoSettings(**spec.options, task="band", steps=2, val_every=0, workdir=tmp_path).block()
    assert block["scorer"]["name"] == "group_solve_rate" and block["actuator"]["params"] == PILOT_COMMIT_BAND
    task = task_families.family("band")
    session = DataFlexSession(block)
    mount(session, grpo_config(DemoSettings(**spec.options, task="band", steps=2, val_every=0, workdir=tmp_path),
                               "pilot_commit", 0),
          family_dataset(task.build(task_families.structure_from(None, task), 0).train))  # fmt: skip
    settings = session.mechanism.settings
    assert settings.preset == "pilot-commit" and settings.carry is not None and settings.evict_solved
    assert settings.on_short == "backfill" and settings.max_rounds == 10 and settings.prompts == 3
