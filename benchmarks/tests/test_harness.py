"""The harness's own logic: the CLI and its JSON, the synthetic batch, discovery's children, the peak meter, and the
quick components and memory cases on the installed plugins."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from dataflex_bench import cli, components, discovery, host, memory, results
from dataflex_bench.synthetic import SyntheticGRPO, padded

PLUGINS = pytest.mark.skipif(
    importlib.util.find_spec("dataflex_scorers_policy") is None, reason="needs the shipped plugins installed"
)


def stub_runners(rows_of: dict[str, list[results.Result] | None]):
    """``cli.case_runners`` giving these rows per case (``None``: the case crashes)."""
    runs = {case: (lambda rows=rows: rows) if rows is not None else (lambda: 1 / 0) for case, rows in rows_of.items()}
    return lambda plan, reps, only="": runs


def row(status_ratio: float, case: str = "host") -> results.Result:
    return results.measured(case, "x", "s", median_s=1.0, baseline_s=1.0, ratio=status_ratio, target=1.3, reps=1)


def test_the_cli_writes_json_prints_the_table_and_fails_on_a_crash_only(tmp_path, monkeypatch, capsys):
    out = tmp_path / "bench.json"
    monkeypatch.setattr(cli, "case_runners", stub_runners({"host": [row(1.1)], "scale": [row(1.4, "scale")]}))
    assert cli.main(["--quick", "--cases", "host,scale", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["mode"] == "quick" and payload["machine"]["torch"] == torch.__version__
    assert [(r["case"], r["status"]) for r in payload["results"]] == [("host", "pass"), ("scale", "miss")]
    assert set(payload["load_average"]) == {"start", "end"}
    printed = capsys.readouterr().out
    assert "<= 1.3" in printed and "miss: scale x [s]" in printed
    assert cli.main(["--cases", "host,scale", "--fail-on-miss"]) == 2  # a miss fails the run only when asked
    monkeypatch.setattr(cli, "case_runners", stub_runners({"host": None, "scale": [row(1.0)]}))
    assert cli.main(["--cases", "host,scale", "--json", str(out)]) == 1  # a crash is a row, and exit 1
    assert [r["status"] for r in json.loads(out.read_text())["results"]] == ["error", "pass"]
    assert cli.main(["--cases", "pairs"]) == 1  # removed cases are refused by name


def test_every_case_has_a_runner_and_nox_runs_them_all():
    assert set(cli.case_runners(cli.QUICK, None)) == set(cli.CASES)
    source = (Path(__file__).resolve().parents[2] / "noxfile.py").read_text()
    line = next(line for line in source.splitlines() if line.startswith("BENCH_CASES = "))
    bench_cases = ast.literal_eval(line.split("=", 1)[1].strip())
    assert {case for cases in bench_cases.values() for case in cases.split(",")} == set(cli.CASES)


def test_json_has_no_infinite_numbers_and_a_row_without_target_is_information(tmp_path):
    inf = results.measured("scale", "x", "s", ratio=float("inf"), target=3.0, reps=1)
    assert inf.status == "miss"
    assert results.measured("components", "x", "s", ratio=9.0, target=None, reps=1).status == "info"
    path = tmp_path / "r.json"
    results.write_json(path, [inf], {"mode": "test"})
    assert json.loads(path.read_text())["results"][0]["ratio"] is None


def test_the_synthetic_batch_is_a_grpo_rollout_and_padding_rows_are_verls():
    synth = SyntheticGRPO(num_groups=16, group_size=4, length=32, seed=3)
    batch = synth.batch(["advantages", "rm_scores"])
    mask = batch.batch["response_mask"].bool()
    assert mask.any(-1).all()
    reward = batch.batch["rm_scores"]
    assert torch.equal(reward.sum(-1), synth.reward) and (reward[~mask] == 0).all()  # on the last token only
    uid = batch.non_tensor_batch["uid"]
    for group in set(uid.tolist()):  # advantages: the group-normalised reward over each response
        rows = torch.from_numpy(uid == group)
        r = synth.reward[rows]
        expected = (r - r.mean()) / (r.std(unbiased=False) + 1e-6)
        torch.testing.assert_close(batch.batch["advantages"][rows].sum(-1) / mask[rows].sum(-1), expected)
    out = padded(batch, rows=3)
    pad = out.batch["is_padding"]
    assert len(out) == 67 and int(pad.sum()) == 3
    assert (out.batch["response_mask"][pad] == 0).all() and (out.batch["rm_scores"][pad] == 0).all()
    assert len(set(out.non_tensor_batch["uid"][pad.numpy()].tolist())) == 1  # one shared pad uid
    assert torch.equal(out.batch["advantages"][~pad], batch.batch["advantages"])  # the real rows in order


def test_the_host_case_is_a_skip_with_the_reason_when_the_host_is_missing(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "dataflex_verl" else real(name, *a)
    )
    (skip,) = host.run_host(bs=16, length=8, group_size=4, reps=1, progress=lambda _: None)
    assert skip.status == "skip" and "dataflex_verl is not installed" in skip.note and skip.target == host.HOST_TARGET


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
    monkeypatch.setenv("DATAFLEX_PLUGINS", "bench-ok")  # ignored: discovery loads everything installed
    (found,) = discovery.run_discovery(reps=1, warmup=0, progress=lambda m: None)
    assert "bench-ok==1.0" in found.extra["plugins"]
    assert found.status == "error" and "bench bad plugin" in found.note
    # each timer ends with one full collection of its own heap, the automatic collector off before it
    assert found.extra["collect_ms"]["torch"] > 0 and found.extra["collect_ms"]["plugins"] > 0


def test_discovery_refuses_a_child_whose_import_turned_the_collector_back_on(tmp_path, monkeypatch):
    (tmp_path / "gc_on.py").write_text(
        "import gc\ngc.enable()\ngc.set_threshold(1, 1, 1)\nfor _ in range(2000):\n    a = []; a.append(a)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"full garbage collections.*gc.enable"):
        discovery.run_child(discovery.TORCH_ONLY.replace("import torch\n", "import torch\nimport gc_on\n"))


@pytest.mark.skipif(memory.unsupported() is not None, reason="peak resident memory needs Linux /proc")
def test_the_peak_meter_sees_allocations_freed_before_it_is_read():
    # in a fresh child with the memory case's allocator, as the case runs it
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
    env = {**os.environ, **memory.CHILD_ENV, "PYTHONPATH": harness}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    first, second = (int(word) for word in out.stdout.split())
    assert 60 << 20 <= first <= 80 << 20 and second < 8 << 20


@PLUGINS
def test_each_component_gets_one_row_with_a_partner_that_accepts_it_and_one_scaling_row():
    import dataflex_core

    partners = {label: blocks[0] for label, blocks in components.blocks(dataflex_core.get_registry())}
    assert partners["scorer advantage_magnitude"]["actuator"]["name"] == "softmax"  # the default partner first
    assert partners["reweighter softmax"]["scorer"]["name"] == "advantage_magnitude"
    rows = components.run_components(quick=True, reps=1, only="signed", unjudged="smoke", progress=lambda _: None)
    (row,) = [r for r in rows if r.case == "components"]
    assert row.name == "scorer advantage_signed" and row.status == "smoke" and row.ratio > 0 and row.target is None
    (scaling,) = [r for r in rows if r.case == "scaling"]
    assert scaling.target == components.SCALING_TARGET and "the largest is scorer advantage_signed's" in scaling.note


@PLUGINS
@pytest.mark.skipif(memory.unsupported() is not None, reason="peak resident memory needs Linux /proc")
def test_the_memory_row_is_the_largest_peak_over_the_fields_read_of_every_components_step():
    (peak,) = memory.run_memory(quick=True, only="token_", progress=lambda _: None)
    assert peak.case == "memory" and peak.status in ("pass", "miss") and peak.target == memory.MEMORY_TARGET
    peaks = peak.extra["peaks"]
    assert {p["name"] for p in peaks} == {"scorer token_entropy", "scorer token_prob"}
    assert all(p["field_bytes"] > 0 for p in peaks)
    assert peak.ratio == pytest.approx(max(p["peak_bytes"] / p["field_bytes"] for p in peaks))
