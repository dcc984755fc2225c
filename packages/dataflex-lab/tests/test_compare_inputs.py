"""Inputs ``dataflex compare`` once answered with a traceback (issue 24.15), and one baseline name across hosts
(issue 29.6)."""

from __future__ import annotations

import json

import pytest

from dataflex_lab.compare import CompareError, compare_runs, read_runs


def demo_file(tmp_path, host, arms, seeds=(0, 1, 2), declare=True):
    runs = [
        {"arm": arm, "seed": s, "steps": [{"step": k, "metrics": {"reward": 0.1 * k + 0.01 * s}} for k in (1, 2, 3)]}
        for arm in arms
        for s in seeds
    ]
    document = {"format": "dataflex-demo/1", "host": host, "runs": runs}
    path = tmp_path / f"{host}.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("step", ["NaN", "Infinity", "-Infinity"])
def test_a_step_that_is_not_finite_is_named(tmp_path, step):
    path = tmp_path / "run.jsonl"
    path.write_text(f'{{"step": {step}, "data": {{"reward": 0.5}}}}\n')
    with pytest.raises(
        CompareError, match=f"step {step.replace('Infinity', 'inf').replace('NaN', 'nan')} is not an integer"
    ):
        read_runs([f"a@0={path}"])


def test_deeply_nested_json_is_named_not_a_recursion_traceback(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    for name, text in (("deep.json", deep), ("deep.jsonl", '{"step": 1, "data": ' + deep + "}\n")):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(CompareError, match="nested too deeply"):
            read_runs([f"a@0={path}"])


def test_name_from_with_a_seed_that_is_not_a_number_says_how_to_write_the_group(tmp_path):
    run = tmp_path / "runs" / "dataflex" / "seedX" / "log.jsonl"
    run.parent.mkdir(parents=True)
    run.write_text('{"step": 1, "data": {"reward": 0.5}}\n')
    with pytest.raises(CompareError, match=r"gives seed 'X' .* not an integer; .*\\d\+"):
        read_runs([str(run)], name_from=r"runs/(?P<arm>[^/]+)/seed(?P<seed>[^/]+)")


def test_one_baseline_name_works_on_both_hosts_output(tmp_path):
    trl = read_runs([str(demo_file(tmp_path, "trl", ["dataflex", "baseline"]))])
    verl = read_runs([str(demo_file(tmp_path, "verl", ["dataflex_sync", "sync"]))])
    for runs, plain in ((trl, "baseline"), (verl, "sync")):
        # unnamed: the arm the file declares its baseline, even when it is not the first
        assert compare_runs(runs).baseline == plain
        for name in ("sync", "baseline"):  # the docs' --baseline sync works on TRL's output too, and vice versa
            assert compare_runs(runs, baseline=name).baseline == plain
    with pytest.raises(CompareError, match="did you mean 'dataflex'"):
        compare_runs(trl, baseline="dataflx")


def test_a_single_demo_run_says_it_needs_at_least_two_seeds(tmp_path):
    runs = read_runs([str(demo_file(tmp_path, "trl", ["baseline", "dataflex"], seeds=(0,)))])
    with pytest.raises(CompareError, match="at least 2 seeds per arm.*--seeds K"):
        compare_runs(runs, baseline="sync")
