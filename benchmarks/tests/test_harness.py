"""The benchmark harness's own logic on tiny shapes: statistics, pairing, baselines, rows, JSON, exit codes.

No figure here is a speed claim (speed is what ``nox -s bench`` measures);
these tests make sure the figures it prints are computed the way its README says.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from dataflex_bench import allocator, cli, discovery, host, memory, pairs, results
from dataflex_bench.synthetic import SyntheticGRPO
from dataflex_bench.timing import Fresh, measure_interleaved, merged, passes_paired_ratio, split_reps
from toy_components import toy_registry

TINY = pairs.Shape(num_groups=8, group_size=4, length=16)


class FakeClock:
    """A clock the timed functions advance by a scripted amount."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[str] = []

    def __call__(self) -> float:
        return self.now

    def work(self, name: str, durations: list[float]):
        durations = iter(durations)

        def fn():
            self.calls.append(name)
            self.now += next(durations)

        return fn


def test_measure_interleaved_alternates_skips_warmup_and_takes_medians():
    clock = FakeClock()
    # The warm-up round is very slow and must not count; one timed rep is an outlier the median ignores.
    base = clock.work("base", [100.0, 1.0, 1.0, 50.0])
    case = clock.work("case", [100.0, 2.0, 3.0, 2.5])
    timings = measure_interleaved({"base": base, "case": case}, reps=3, warmup=1, clock=clock)
    assert clock.calls == ["base", "case"] * 4
    assert timings.samples == {"base": [1.0, 1.0, 50.0], "case": [2.0, 3.0, 2.5]}
    assert timings.median("base") == 1.0 and timings.median("case") == 2.5
    assert timings.ratio("case", "base") == 2.5


def test_a_paired_ratio_keeps_a_burst_of_several_rounds_out_where_a_ratio_of_medians_does_not():
    clock = FakeClock()
    # a 5 % cost; a burst of load (everything 1.5x slower) starts after the base call of round 2 and lasts until
    # round 5's end: the case is slowed in 4 of 7 rounds, the base in 3 (what a full run's miss looked like)
    base = clock.work("base", [1.0, 1.0, 1.0, 1.5, 1.5, 1.5, 1.0, 1.0])
    case = clock.work("case", [1.05, 1.05, 1.575, 1.575, 1.575, 1.575, 1.05, 1.05])
    timings = measure_interleaved({"base": base, "case": case}, reps=7, warmup=1, clock=clock)
    assert timings.ratio("case", "base") == pytest.approx(1.575)  # each median from different rounds
    assert timings.paired_ratio("case", "base") == pytest.approx(1.05)  # the cost the case adds


def test_a_spell_lasting_a_whole_pass_moves_one_pass_where_rounds_in_a_row_take_it_whole():
    # the base 12 % faster in every round of one pass (a full run's padding-row miss: the unpadded step fast for
    # the pair's whole measurement) and a true cost of 0
    clock = FakeClock()
    spell = measure_interleaved(
        {"base": clock.work("base", [1.0] + [1 / 1.12] * 8), "case": clock.work("case", [1.0] * 9)},
        reps=8,
        warmup=1,
        clock=clock,
    )
    quiet = measure_interleaved(
        {"base": clock.work("base", [1.0] * 8), "case": clock.work("case", [1.0] * 8)}, reps=7, warmup=1, clock=clock
    )
    assert spell.paired_ratio("case", "base") == pytest.approx(1.12)  # all 8 rounds in a row: the spell whole
    assert passes_paired_ratio([spell, quiet], "case", "base") == pytest.approx(1.12**0.5)  # 1.058
    # a cost the case really adds shows in every pass and stays whole
    costly = measure_interleaved(
        {"base": clock.work("base", [1.0] * 8), "case": clock.work("case", [1.12] * 8)}, reps=7, warmup=1, clock=clock
    )
    assert passes_paired_ratio([costly, costly], "case", "base") == pytest.approx(1.12)
    # of three passes the median: a spell in one is left out, a cost in every pass stays
    assert passes_paired_ratio([quiet, spell, quiet], "case", "base") == pytest.approx(1.0)
    assert passes_paired_ratio([costly, spell, costly], "case", "base") == pytest.approx(1.12)
    assert passes_paired_ratio([costly, quiet, costly], "case", "base") == pytest.approx(1.12)
    every = merged([spell, quiet])
    assert len(every.samples["base"]) == 15 and len(every.cpu_samples["case"]) == 15
    assert every.samples["base"][:8] == spell.samples["base"]
    with pytest.raises(ValueError, match="at least one pass"):
        passes_paired_ratio([], "case", "base")


def test_trimmed_means_weigh_a_bimodal_call_by_how_often_it_lands_in_each_cluster():
    # the host case's shape: calls fast (0.7 s) or slow (1.1 s); DataFlex adds 5 % and lands slow in 13 of 21
    # calls, the plain call in 7 of 21 (a cost of its own, which the means charge), one plain call pre-empted (5 s)
    clock = FakeClock()
    plain = [0.7] * 13 + [1.1] * 7 + [5.0]
    case = [0.735] * 8 + [1.155] * 13
    timings = measure_interleaved(
        {"base": clock.work("base", [1.0, *plain]), "case": clock.work("case", [1.0, *case])},
        reps=21,
        warmup=1,
        clock=clock,
    )
    assert timings.ratio("case", "base") == pytest.approx(1.155 / 0.7)  # 1.65: each median in another cluster
    # 2 of 21 off each end: the pre-empted call goes, the clusters count as often as calls land in them
    expected = statistics.fmean(sorted(case)[2:19]) / statistics.fmean(sorted(plain)[2:19])
    assert timings.trimmed_ratio("case", "base") == pytest.approx(expected)
    assert 1.1 < expected < 1.2
    assert timings.trimmed_mean("base", trim=0.0) == pytest.approx(statistics.fmean(plain))
    with pytest.raises(ValueError, match="got 0.5"):
        timings.trimmed_mean("base", trim=0.5)


def test_split_reps_gives_near_equal_passes_and_no_empty_one():
    assert split_reps(15) == [8, 7] and split_reps(2) == [1, 1] and split_reps(1) == [1]
    assert split_reps(7, passes=3) == [3, 2, 2]
    with pytest.raises(ValueError, match="reps=0"):
        split_reps(0)


def test_rotated_rounds_start_at_each_function_in_turn_and_keep_each_functions_samples():
    clock = FakeClock()
    a, b, c = (clock.work(name, [1.0] * 5) for name in "abc")
    timings = measure_interleaved({"a": a, "b": b, "c": c}, reps=4, warmup=1, clock=clock, rotate=True)
    assert clock.calls == [*"abc", *"bca", *"cab", *"abc", *"bca"]
    assert timings.samples == {"a": [1.0] * 4, "b": [1.0] * 4, "c": [1.0] * 4}


def test_measure_interleaved_syncs_around_every_timed_call():
    events = []
    measure_interleaved({"f": lambda: events.append("f")}, reps=2, warmup=0, sync=lambda: events.append("sync"))
    assert events == ["sync", "f", "sync"] * 2


def test_pairs_follow_granularity_and_baseline_reads_exactly_the_declared_fields():
    found = {p.name: p for p in pairs.discover_pairs(toy_registry())}
    # Token scorers go with token reweighters only, sample scorers with sample reweighters only;
    # a pre_rollout scorer (prompt_table) feeds a sampler, never a reweighter.
    assert sorted(found) == ["abs_adv+softmax", "solve_rate+softmax", "token_prob+token_linear"]
    assert found["abs_adv+softmax"].fields == ("response_mask", "is_padding", "advantages")
    assert not found["abs_adv+softmax"].needs_groups
    assert found["solve_rate+softmax"].needs_groups
    assert [p.name for p in pairs.discover_pairs(toy_registry(), ["token"])] == ["token_prob+token_linear"]

    batch = SyntheticGRPO(4, 2, 8).batch(found["solve_rate+softmax"].fields)
    copies = pairs.clone_inputs(batch, found["solve_rate+softmax"].fields, with_uid=True)
    assert len(copies) == 4  # three tensors and the uid array
    assert copies[0].data_ptr() != batch.batch["response_mask"].data_ptr()
    assert torch.equal(copies[2], batch.batch["rm_scores"])


def test_synthetic_batch_is_a_grpo_rollout():
    synth = SyntheticGRPO(num_groups=16, group_size=4, length=32, seed=3)
    batch = synth.batch(["advantages", "rm_scores"])
    mask = batch.batch["response_mask"].bool()
    assert mask.any(-1).all(), "every row has at least one response token"
    # Reward sits on the last response token only.
    reward = batch.batch["rm_scores"]
    assert torch.equal(reward.sum(-1), synth.reward)
    assert (reward[~mask] == 0).all()
    # Advantages are the group-normalised reward, constant over each response, zero in solved-by-all groups.
    adv = batch.batch["advantages"]
    uid = batch.non_tensor_batch["uid"]
    for group in set(uid.tolist()):
        rows = torch.from_numpy(uid == group)
        r = synth.reward[rows]
        expected = (r - r.mean()) / (r.std(unbiased=False) + 1e-6)
        torch.testing.assert_close(adv[rows].sum(-1) / mask[rows].sum(-1), expected)
    assert sorted(synth.unknown) == []


def test_run_pairs_reports_ratios_splits_scaling_and_errors():
    rows = pairs.run_pairs(
        pairs.discover_pairs(toy_registry(broken=True)),
        TINY,
        reps=2,
        warmup=1,
        scaling_groups=4,
        progress=lambda m: None,
    )
    by_key = {(r.case, r.name): r for r in rows}
    good = by_key[("pair", "solve_rate+softmax")]
    assert good.status in ("pass", "miss") and good.reps == 2
    assert good.ratio == pytest.approx(good.median_s / good.baseline_s)
    assert good.status == ("pass" if good.ratio <= pairs.PAIR_TARGET else "miss")
    assert good.extra["fields"] == ["response_mask", "is_padding", "rm_scores"] and good.extra["uid_copied"]
    assert "scorer solve_rate" in good.note or "reweighter softmax" in good.note
    scaling = by_key[("scaling", "solve_rate+softmax")]
    assert scaling.target == pairs.SCALING_TARGET and scaling.shape.startswith("8 vs 4 groups")
    assert scaling.ratio == pytest.approx(scaling.median_s / scaling.baseline_s)
    # A crashing component and one with unusable output are error rows naming the problem; the rest still ran.
    assert by_key[("pair", "abs_adv+broken")].status == "error"
    assert "broken on purpose" in by_key[("pair", "abs_adv+broken")].note
    assert "shape (32, 1), expected (32,)" in by_key[("pair", "abs_adv+wrong_shape")].note
    assert by_key[("pair", "token_prob+token_linear")].ratio is not None
    # A reweighter that rejects a scorer's scores by its input contract is a skipped combination,
    # not a crash; with scores it accepts, the same reweighter is measured.
    rejected = by_key[("pair", "abs_adv+rates_only")]
    assert rejected.status == "skip" and "rejects these scores" in rejected.note and "[0, 1]" in rejected.note
    assert by_key[("pair", "solve_rate+rates_only")].ratio is not None


def test_device_path_runs_on_the_cpu_as_a_dry_run():
    rows = pairs.run_pairs(
        pairs.discover_pairs(toy_registry()),
        TINY,
        reps=1,
        device="cpu",
        case="pair_device",
        unjudged="dry-run",
        progress=lambda m: None,
    )
    assert {r.status for r in rows} == {"dry-run"} and {r.case for r in rows} == {"pair_device"}
    assert all(r.passed is None for r in rows)
    if not torch.cuda.is_available():
        assert cli.device_case_setup(quick=True)[:2] == ("cpu", "dry-run")
        assert cli.device_case_setup(quick=False)[0] is None


def test_host_case_is_skipped_with_the_reason_when_the_host_is_missing(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "dataflex_verl" else real(name, *a)
    )
    printed = []
    (row,) = host.run_host(bs=16, length=8, group_size=4, reps=1, progress=printed.append)
    assert row.status == "skip" and "dataflex_verl is not installed" in row.note
    assert any("SKIP" in line for line in printed)


def test_cli_quick_run_writes_json_and_exits_on_crash_only(tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = ["--quick", "--reps", "1", "--cases", "pairs,device", "--json", str(out)]
    threads_before = torch.get_num_threads()
    assert cli.main(args, registry=toy_registry()) == 0
    payload = json.loads(out.read_text())
    assert payload["mode"] == "quick" and payload["machine"]["torch"] == torch.__version__
    # One torch thread by default (steady on a shared machine); the caller's setting is restored afterwards.
    assert payload["machine"]["torch_threads"] == 1 and torch.get_num_threads() == threads_before
    keys = {"case", "name", "shape", "median_s", "baseline_s", "ratio", "target", "status", "passed"}
    assert payload["results"] and all(keys <= set(row) for row in payload["results"])
    # Quick mode measures with the default allocator only; its scaling rows are not the judged ones.
    assert payload["allocator"] == "default"
    assert {row["case"] for row in payload["results"]} >= {"pair", "scaling_default_alloc", "pair_device"}
    assert "abs_adv+softmax" in capsys.readouterr().out  # the table is printed

    # The compact Markdown summary lists every measured pair with one column per shape.
    assert cli.main(["--summarize", str(out)]) == 0
    summary = capsys.readouterr().out
    assert "| abs_adv+softmax |" in summary and "bs=32 (8x4) L=16" not in summary
    assert "| pair | bs=512 (64x8) L=32 | bs=256 (16x16) L=128 | scaling (default allocator) |" in summary

    # A crashing component fails the run (exit 1); its row is still written.
    assert cli.main(args, registry=toy_registry(broken=True)) == 1
    assert any(row["status"] == "error" for row in json.loads(out.read_text())["results"])


def test_missed_target_fails_the_run_only_when_asked(monkeypatch):
    monkeypatch.setattr(pairs, "PAIR_TARGET", 0.0)  # nothing can pass
    args = ["--reps", "1", "--cases", "pairs", "--pairs", "abs_adv"]
    monkeypatch.setattr(cli, "FULL", cli.QUICK.__class__(**{**cli.QUICK.__dict__, "unjudged": None}))
    assert cli.main(args, registry=toy_registry()) == 0
    assert cli.main([*args, "--fail-on-miss"], registry=toy_registry()) == 2


def test_json_has_no_infinite_numbers(tmp_path):
    row = results.measured("pair", "x", "s", median_s=1.0, baseline_s=0.0, ratio=float("inf"), target=3.0, reps=1)
    assert row.status == "miss"
    path = tmp_path / "r.json"
    results.write_json(path, [row], {"mode": "test"})
    assert json.loads(path.read_text())["results"][0]["ratio"] is None


def test_discovery_times_fresh_interpreters_and_flags_a_failing_plugin(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "bench_ok_plugin").mkdir(parents=True)
    (site / "bench_ok_plugin" / "__init__.py").write_text(
        textwrap.dedent(
            """
            from dataflex_core import Scorer, register_scorer

            @register_scorer("bench_ok")
            class Ok(Scorer):
                def score(self, batch, step_id, **ctx):
                    return batch.batch["response_mask"].float().sum(-1)
            """
        )
    )
    (site / "bench_bad_plugin.py").write_text("raise ImportError('bench bad plugin')\n")
    for dist, module in (("bench-ok", "bench_ok_plugin"), ("bench-bad", "bench_bad_plugin")):
        info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[dataflex]\n{module} = {module}\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("DATAFLEX_PLUGINS", "bench-ok")  # must be ignored: discovery loads everything installed
    (row,) = discovery.run_discovery(reps=1, warmup=0, progress=lambda m: None)
    assert "bench-ok==1.0" in row.extra["plugins"]
    assert row.status == "error" and "bench bad plugin" in row.note
    assert row.ratio == pytest.approx(row.median_s / row.baseline_s)
    # each timer ends with one full collection, the automatic collector off before it (a threshold crossed inside
    # one side would charge it for the other's heap)
    assert row.extra["collect_ms"]["torch"] > 0 and row.extra["collect_ms"]["with_plugins"] > 0


def test_discovery_refuses_a_child_whose_import_turned_the_collector_back_on(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    # a module that re-enables the collector and then allocates enough cycles for automatic full collections
    (site / "gc_on.py").write_text(
        "import gc\ngc.enable()\ngc.set_threshold(1, 1, 1)\nfor _ in range(2000):\n    a = []; a.append(a)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    with pytest.raises(RuntimeError, match=r"full garbage collections.*gc.enable"):
        discovery.run_child(discovery.TORCH_ONLY.replace("import torch\n", "import torch\nimport gc_on\n"))


# -- allocators ---------------------------------------------------------------------------


def test_pair_rows_name_the_allocator_and_only_the_fixed_threshold_scaling_is_judged(monkeypatch):
    plan = cli.QUICK.__class__(**{**cli.QUICK.__dict__, "unjudged": None, "pair_shapes": (TINY,), "pair_reps": (1,)})
    registry_pairs = pairs.discover_pairs(toy_registry(), ["solve_rate"])
    default_rows = cli._pairs_case(registry_pairs, plan, [1])
    by_case = {r.case: r for r in default_rows}
    assert by_case["pair"].status in ("pass", "miss")  # judged
    assert by_case["scaling_default_alloc"].status == "info"  # measures glibc's 32 MiB boundary: not judged
    assert by_case["pair"].extra["allocator"] == allocator.describe()
    fixed_rows = cli._pairs_case(registry_pairs, plan, [1], fixed_child=True)
    by_case = {r.case: r for r in fixed_rows}
    assert by_case["pair_fixed_mmap"].status == "info" and by_case["scaling"].status in ("pass", "miss")


def test_allocator_description_and_settle():
    assert allocator.describe({}) == "glibc default (dynamic mmap threshold)"
    assert allocator.describe(allocator.FIXED_ENV) == "MALLOC_MMAP_THRESHOLD_=1048576"
    allocator.settle()  # allocates, touches and frees; leaves nothing behind


@pytest.mark.skipif(importlib.util.find_spec("dataflex_reweighters_sample") is None, reason="needs the plugins")
def test_fixed_threshold_pairs_run_in_a_child_with_the_threshold_set(tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = ["--quick", "--reps", "1", "--cases", "pairs", "--pairs", "reward_difficulty+softmax"]
    assert cli.main([*args, "--allocator", "both", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    cases = {row["case"]: row for row in rows if row["name"] == "reward_difficulty+softmax"}
    assert set(cases) == {"pair", "scaling_default_alloc", "pair_fixed_mmap", "scaling"}
    assert cases["pair_fixed_mmap"]["extra"]["allocator"] == "MALLOC_MMAP_THRESHOLD_=1048576"
    assert cases["pair"]["extra"]["allocator"] == allocator.describe()


# -- memory -------------------------------------------------------------------------------


@pytest.mark.skipif(memory.unsupported() is not None, reason="peak resident memory needs Linux /proc")
def test_peak_meter_sees_torch_allocations_freed_before_it_is_read():
    # In a fresh child with the memory case's allocator settings, as the case runs it: in this process, after
    # hundreds of tests, glibc may serve the block from pages that are already resident, so the peak would not move.
    script = textwrap.dedent(
        """
        import torch
        from dataflex_bench import memory
        meter = memory.PeakMeter()
        meter.reset()
        block = torch.ones(64 << 18)  # 64 MiB of float32, touched, then freed
        del block
        first = meter.peak_extra()
        meter.reset()
        print(first, meter.peak_extra())
        """
    )
    harness = str(Path(memory.__file__).resolve().parent.parent)
    env = {
        **os.environ,
        **memory.CHILD_ENV,
        "PYTHONPATH": os.pathsep.join(filter(None, [harness, os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    first, second = (int(word) for word in out.stdout.split())
    assert 60 << 20 <= first <= 80 << 20
    assert second < 8 << 20


@pytest.mark.skipif(memory.unsupported() is not None, reason="peak resident memory needs Linux /proc")
@pytest.mark.skipif(importlib.util.find_spec("dataflex_scorers_policy") is None, reason="needs the plugins")
def test_memory_case_reports_peak_over_the_bytes_of_the_fields_read():
    shape = pairs.Shape(4, 8, 512)
    rows = memory.run_memory([shape], only=["token_prob+advantage_reweight"], progress=lambda m: None)
    (row,) = rows
    assert row.case == "memory" and row.status in ("pass", "miss") and row.target == memory.MEMORY_TARGET
    # response_mask (int64) + is_padding (bool) + old_log_probs (float32), as the pair reads them.
    assert row.extra["field_bytes"] == 32 * 512 * 8 + 32 + 32 * 512 * 4
    assert row.ratio == pytest.approx(row.extra["peak_bytes"] / row.extra["field_bytes"])
    # The step returns (bs, L) float32 weights at least: the peak cannot be below them.
    assert row.extra["peak_bytes"] >= 32 * 512 * 4


def test_summary_has_the_fixed_threshold_scaling_and_memory_columns():
    def row(case, name, shape, ratio, status="pass", **extra):
        return {
            "case": case,
            "name": name,
            "shape": shape,
            "ratio": ratio,
            "status": status,
            "note": "",
            "extra": extra,
        }

    payload = {
        "results": [
            row("pair", "a+b", "bs=8 L=4", 1.5),
            row("scaling_default_alloc", "a+b", "8 vs 4 groups", 3.1, "info"),
            row("pair_fixed_mmap", "a+b", "bs=8 L=4", 1.2, "info"),
            row("scaling", "a+b", "8 vs 4 groups", 2.0),
            row("memory", "a+b", "bs=8 L=4", 2.5, "miss", peak_bytes=5 << 20, field_bytes=2 << 20),
        ]
    }
    text = results.summary_markdown(payload)
    assert (
        "| pair | bs=8 L=4 | fixed mmap threshold bs=8 L=4 | scaling (fixed mmap threshold) | "
        "scaling (default allocator) |" in text
    )
    assert "| a+b | 1.50 | 1.20 | 2.00 | 3.10 |" in text
    assert "| a+b | 2.50 **miss** (5 / 2 MiB) |" in text


# -- fresh batches, thread counts, repeated runs ------------------------------------------------


def test_fresh_inputs_are_built_outside_the_clock_and_new_for_every_call():
    clock = FakeClock()
    built = []

    def setup():
        clock.now += 100.0  # building the batch is slow and must not count
        built.append(object())
        return built[-1]

    seen = []
    run = Fresh(lambda inputs: (seen.append(inputs), clock.work("run", [1.0])()), setup)
    timings = measure_interleaved({"run": run}, reps=2, warmup=1, clock=clock)
    assert timings.samples == {"run": [1.0, 1.0]}
    assert seen == built and len({id(x) for x in seen}) == 3  # one batch per call, warm-up included


def test_a_fresh_batch_copies_what_the_pair_reads_and_shares_the_rest():
    template = SyntheticGRPO(4, 2, 8).batch(["advantages", "rm_scores"])
    batch = pairs.fresh_batch(template, ("response_mask", "advantages"))
    for name in ("response_mask", "advantages"):
        assert batch.batch[name] is not template.batch[name] and torch.equal(batch.batch[name], template.batch[name])
    assert batch.batch["rm_scores"] is template.batch["rm_scores"]
    uid = batch.non_tensor_batch["uid"]
    assert uid is not template.non_tensor_batch["uid"] and (uid == template.non_tensor_batch["uid"]).all()
    assert not batch.meta_info  # nothing prepared yet: the pair's prepare_batch starts from scratch


def test_thread_settings_parse_and_zero_is_torchs_default():
    assert cli.thread_settings("1,0") == (1, 0)
    assert cli.resolve_threads((1, 0), default=2) == [1, 2]
    assert cli.resolve_threads((1, 0), default=1) == [1]  # one thread is torch's default: measured once
    for bad in ("", "a", "1,-2"):
        with pytest.raises(argparse.ArgumentTypeError, match="--threads"):
            cli.thread_settings(bad)


def test_pairs_run_at_every_thread_count_and_say_which():
    plan = cli.QUICK.__class__(**{**cli.QUICK.__dict__, "unjudged": None, "pair_shapes": (TINY,), "pair_reps": (1,)})
    rows = cli._pairs_case(pairs.discover_pairs(toy_registry(), ["solve_rate"]), plan, [1], threads=(1, 2))
    by_key = {(r.case, r.shape): r for r in rows}
    assert by_key[("pair", TINY.label)].extra["threads"] == 1
    assert by_key[("pair", f"{TINY.label} @ 2 threads")].extra["threads"] == 2
    assert [r.extra["threads"] for r in rows if r.case == "scaling_default_alloc"] == [1]  # scaling: first only


def test_summary_of_repeated_runs_gives_the_median_and_range_and_counts_misses():
    def run(ratio, status, load):
        row = {"case": "pair", "name": "a+b", "shape": "s", "ratio": ratio, "status": status, "note": "", "extra": {}}
        return {"results": [row], "started": "t", "duration_s": 1, "load_average": {"start": [load], "end": [load]}}

    text = results.summary_markdown([run(1.2, "pass", 1.0), run(3.0, "miss", 6.5), run(1.5, "pass", 2.0)])
    assert "Median of 3 runs" in text and "1-minute load average 6.5 at the start" in text
    assert "| a+b | 1.50 (1.20-3.00) **1/3 miss** |" in text
