"""``dataflex compare`` reads what the loggers really write, names runs, and refuses what it cannot read.

Logs are written by the real writers where they are installed: verl's
``FileLogger`` (``trainer.logger=[file]``), transformers' ``TrainerState``
(the ``trainer_state.json`` TRL's trainers save) and torch's ``SummaryWriter``
(verl's and transformers' ``tensorboard`` logger).
"""

from __future__ import annotations

import json
import math
import sys

import pytest

from dataflex_core.cli import main
from dataflex_lab.cli import EXIT_COMPARE_ERROR
from dataflex_lab.compare import CompareError, RunSpec, read_path, read_runs

REWARD = "critic/score/mean"
STEPS = range(1, 9)


def reward(arm: str, seed: int, step: int) -> float:
    return 0.3 + 0.01 * step + 0.02 * seed + (0.05 if arm == "dataflex_sync" else 0.0)


def demo_document(arms=("sync", "dataflex_sync"), seeds=(0, 1, 2)) -> dict:
    runs = [
        {
            "arm": arm,
            "seed": seed,
            "steps": [{"step": s, "metrics": {REWARD: reward(arm, seed, s), "actor/entropy": 1.0}} for s in STEPS],
        }
        for arm in arms
        for seed in seeds
    ]
    return {
        "format": "dataflex-demo/1",
        "host": "verl",
        "seed": seeds[0],
        "seeds": list(seeds),
        "arms": {r["arm"]: r["steps"] for r in runs if r["seed"] == seeds[0]},
        "runs": runs,
        "settings": {"steps": len(STEPS)},
    }


def write_verl_file_log(path, arm: str, seed: int, monkeypatch) -> None:
    tracking = pytest.importorskip("verl.utils.tracking")
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = tracking.FileLogger("project", "experiment")
    logger.log({"val-core/acc": 0.1}, step=0)  # verl validates before the first step
    for step in STEPS:
        logger.log({REWARD: reward(arm, seed, step), "timing_s/step": 1.5}, step=step)
    logger.finish()


# -- the demo format -------------------------------------------------------------------------------------------


def test_demo_file_names_its_runs(tmp_path):
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(demo_document()))
    runs = read_path(path)
    assert sorted(r.label for r in runs) == sorted(f"{a}@{s}" for a in ("sync", "dataflex_sync") for s in (0, 1, 2))
    assert runs[0].source == str(path) and runs[0].curve(REWARD)[0] == (1, reward("sync", 0, 1))


def test_an_older_demo_file_without_runs_is_one_run_per_arm(tmp_path):
    document = demo_document(seeds=(4,))
    del document["runs"]
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(document))
    assert sorted(r.label for r in read_path(path)) == ["dataflex_sync@4", "sync@4"]


def test_demo_format_errors(tmp_path):
    path = tmp_path / "demo.json"
    path.write_text(json.dumps({**demo_document(), "format": "dataflex-demo/2"}))
    with pytest.raises(CompareError, match="newer DataFlex: upgrade dataflex-lab"):
        read_path(path)
    path.write_text(json.dumps(demo_document()))
    with pytest.raises(CompareError, match="names its own runs"):
        read_runs([f"sync@0={path}"])
    broken = demo_document()
    broken["runs"][1]["steps"][2] = {"step": 3}
    path.write_text(json.dumps(broken))
    with pytest.raises(CompareError, match="each entry of 'steps' must be"):
        read_path(path)


# -- verl's file logger ----------------------------------------------------------------------------------------


def test_verl_file_logger_lines_are_read_and_merged_by_step(tmp_path, monkeypatch):
    path = tmp_path / "run.jsonl"
    write_verl_file_log(path, "sync", 0, monkeypatch)
    (run,) = read_runs([f"sync@0={path}"])
    assert run.label == "sync@0" and run.source == str(path)
    assert run.curve(REWARD) == [(s, reward("sync", 0, s)) for s in STEPS]
    assert run.curve("val-core/acc") == [(0, 0.1)]


def test_verl_writes_nan_as_null_and_compare_names_it(tmp_path, monkeypatch):
    tracking = pytest.importorskip("verl.utils.tracking")
    paths = []
    for seed in (0, 1):
        path = tmp_path / f"sync{seed}.jsonl"
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
        logger = tracking.FileLogger("p", "e")
        for step in STEPS:
            logger.log({REWARD: math.nan if (seed, step) == (1, 5) else 0.5}, step=step)
        logger.finish()
        paths.append(f"sync@{seed}={path}")
    assert "null" in (tmp_path / "sync1.jsonl").read_text()
    with pytest.raises(CompareError, match=r"not a finite number in sync@1 \(.*sync1.jsonl\) at step\(s\) 5"):
        from dataflex_lab.compare import compare_runs

        compare_runs(read_runs(paths))


def test_unnamed_single_run_logs_need_a_name(tmp_path, monkeypatch):
    path = tmp_path / "run.jsonl"
    write_verl_file_log(path, "sync", 0, monkeypatch)
    with pytest.raises(CompareError, match=r"does not record which arm and seed it is; name it as ARM@SEED="):
        read_runs([str(path)])


def test_name_from_a_directory_layout(tmp_path, monkeypatch):
    specs = []
    for arm in ("sync", "dataflex_sync"):
        for seed in (0, 1):
            path = tmp_path / "runs" / arm / f"seed{seed}" / "log.jsonl"
            path.parent.mkdir(parents=True)
            write_verl_file_log(path, arm, seed, monkeypatch)
            specs.append(str(path))
    runs = read_runs(specs, name_from=r"runs/(?P<arm>[^/]+)/seed(?P<seed>\d+)")
    assert sorted(r.label for r in runs) == ["dataflex_sync@0", "dataflex_sync@1", "sync@0", "sync@1"]
    with pytest.raises(CompareError, match="lacks the named group"):
        read_runs(specs, name_from=r"runs/(?P<arm>[^/]+)")
    with pytest.raises(CompareError, match="does not match"):
        read_runs(specs, name_from=r"elsewhere/(?P<arm>\w+)/(?P<seed>\d+)")


def test_bad_lines_and_conflicting_values(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 1, "data": {"r": 1.0}}\n{"step": 2, "data": {"r": 2.0}\n')
    with pytest.raises(CompareError, match=r"run.jsonl:2: not JSON"):
        read_runs([f"a@0={path}"])
    path.write_text('{"step": 1, "data": {"r": 1.0}}\n{"step": 1, "data": {"r": 2.0}}\n')
    with pytest.raises(CompareError, match="'r' is logged twice at step 1 with different values"):
        read_runs([f"a@0={path}"])
    path.write_text('{"step": 1, "data": {"r": 1.0}}\n')  # a single line is also one JSON document
    (run,) = read_runs([f"a@0={path}"])
    assert run.curve("r") == [(1, 1.0)]


def test_unknown_files_and_missing_paths(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(CompareError, match="not a log this command reads; expected a demo's --json file"):
        read_path(path)
    with pytest.raises(CompareError, match=r"no such file or directory: 'nope.jsonl' \(to name a run's arm"):
        RunSpec.parse("nope.jsonl")
    with pytest.raises(CompareError, match="no such file or directory: 'missing.jsonl'"):
        RunSpec.parse("a@1=missing.jsonl")
    with pytest.raises(CompareError, match="holding none of the logs"):
        read_path(tmp_path)


# -- transformers / TRL ----------------------------------------------------------------------------------------


def write_trainer_state(directory, seed: int, arm: str) -> None:
    transformers = pytest.importorskip("transformers")
    state = transformers.TrainerState()
    state.log_history = [
        {"loss": 0.1, "reward": reward(arm, seed, s), "reward_std": 0.2, "epoch": s / 8, "step": s} for s in STEPS
    ]
    state.log_history.append({"train_runtime": 12.5, "train_loss": 0.1, "step": STEPS[-1]})  # the end-of-train entry
    directory.mkdir(parents=True, exist_ok=True)
    state.save_to_json(str(directory / "trainer_state.json"))


def test_trainer_state_files_and_checkpoint_directories(tmp_path):
    write_trainer_state(tmp_path / "out", 0, "sync")
    write_trainer_state(tmp_path / "ckpt" / "checkpoint-4", 1, "sync")
    write_trainer_state(tmp_path / "ckpt" / "checkpoint-12", 2, "sync")  # the latest holds the whole history
    runs = read_runs(
        [
            f"sync@0={tmp_path / 'out' / 'trainer_state.json'}",
            f"sync@1={tmp_path / 'out'}",
            f"sync@2={tmp_path / 'ckpt'}",
        ]
    )
    assert [r.curve("reward")[0][1] for r in runs] == [reward("sync", 0, 1), reward("sync", 0, 1), reward("sync", 2, 1)]
    assert runs[2].source.endswith("checkpoint-12/trainer_state.json")
    assert runs[0].curve("train_runtime") == [(8, 12.5)]


# -- TensorBoard -----------------------------------------------------------------------------------------------


def test_tensorboard_event_directories_are_read_without_tensorflow(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    for step in STEPS:
        writer.add_scalar("train/reward", reward("sync", 0, step), step)  # transformers prefixes train/
    writer.close()
    (run,) = read_runs([f"sync@0={tmp_path / 'tb'}"])
    assert [s for s, _ in run.curve("train/reward")] == list(STEPS)
    assert run.curve("train/reward")[3][1] == pytest.approx(reward("sync", 0, 4), rel=1e-6)  # stored as float32
    (event_file,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    assert read_runs([f"sync@0={event_file}"])[0].curve("train/reward") == run.curve("train/reward")
    assert "tensorflow" not in sys.modules


def test_tensorboard_missing_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing", None)
    with pytest.raises(CompareError, match=r"pip install 'dataflex-lab\[tensorboard\]'"):
        read_runs([f"a@0={tmp_path}"])


# -- the command line ------------------------------------------------------------------------------------------


def test_cli_prints_the_table_and_writes_json(tmp_path, capsys):
    demo = tmp_path / "demo.json"
    demo.write_text(json.dumps(demo_document(seeds=tuple(range(6)))))
    out_json = tmp_path / "report.json"
    assert main(["compare", str(demo), "--baseline", "sync", "--window", "3", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# dataflex compare\n") and f"## `{REWARD}`" in out
    row = "| `dataflex_sync` | 6 | final | 0.4700 [0.4433, 0.4967] | 0.0374 | +0.0500 [+0.0500, +0.0500] | 0.031 |"
    assert row + " 0.031 | **higher** |" in out
    report = json.loads(out_json.read_text())
    assert report["metrics"][REWARD]["window"]["steps"] == [6, 8]
    assert report["metrics"][REWARD]["arms"]["dataflex_sync"]["final"]["vs_baseline"]["verdict"] == "higher"


def test_cli_mixes_demo_files_and_named_logs(tmp_path, monkeypatch, capsys):
    demo = tmp_path / "demo.json"
    demo.write_text(json.dumps(demo_document(arms=("sync",), seeds=(0, 1))))
    logs = []
    for seed in (0, 1):
        path = tmp_path / f"m{seed}.jsonl"
        write_verl_file_log(path, "dataflex_sync", seed, monkeypatch)
        logs.append(f"dataflex_sync@{seed}={path}")
    capsys.readouterr()  # verl's logger announces its file on stdout
    assert main(["compare", str(demo), *logs, "--test", "t", "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["arms"] == ["sync", "dataflex_sync"]
    assert report["metrics"][REWARD]["arms"]["dataflex_sync"]["auc"]["vs_baseline"]["test"].startswith("paired t")


def test_cli_errors_exit_2_with_the_message(tmp_path, capsys):
    demo = tmp_path / "demo.json"
    demo.write_text(json.dumps(demo_document()))
    assert main(["compare", str(demo), "--metric", "critic/score/mena"]) == EXIT_COMPARE_ERROR
    err = capsys.readouterr().err
    assert err.startswith("dataflex compare: unknown metric 'critic/score/mena'") and "critic/score/mean" in err
    assert main(["compare", str(demo), "--seeds", "0"]) == EXIT_COMPARE_ERROR
    assert "single seed" in capsys.readouterr().err
    assert main(["compare", str(demo), "--list-metrics"]) == 0
    assert capsys.readouterr().out.split() == ["actor/entropy", REWARD]


def test_cli_plot_writes_an_image(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    demo = tmp_path / "demo.json"
    demo.write_text(json.dumps(demo_document()))
    image = tmp_path / "curves.png"
    assert main(["compare", str(demo), "--metric", REWARD, "actor/entropy", "--plot", str(image)]) == 0
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_plot_without_matplotlib_fails_first_and_says_what_to_install(tmp_path, monkeypatch, capsys):
    demo = tmp_path / "demo.json"
    demo.write_text(json.dumps(demo_document()))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["compare", str(demo), "--plot", str(tmp_path / "c.png")]) == EXIT_COMPARE_ERROR
    captured = capsys.readouterr()
    assert (
        "--plot needs matplotlib, which is not installed: pip install matplotlib" in captured.err and captured.out == ""
    )


# -- paths that cannot take the report, and cut files (issue 39, item 13) -------------------------------------


@pytest.mark.parametrize("target", ["{tmp}", "{tmp}/missing/report.json", "/dev/full"], ids=["dir", "missing", "full"])
def test_cli_json_to_a_path_that_cannot_take_a_file_is_one_line_and_exit_2(tmp_path, capsys, target):
    demo = tmp_path / "demo.json"
    demo.write_text(json.dumps(demo_document()))
    target = target.format(tmp=tmp_path)
    assert main(["compare", str(demo), "--json", target]) == EXIT_COMPARE_ERROR
    err = capsys.readouterr().err.strip()
    assert err.startswith("dataflex compare: ") and target in err and "\n" not in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.json"]


def test_cli_json_on_a_full_disk_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    demo = tmp_path / "demo.json"
    demo.write_text(json.dumps(demo_document()))

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", full)
    target = tmp_path / "report.json"
    assert main(["compare", str(demo), "--json", str(target)]) == EXIT_COMPARE_ERROR
    err = capsys.readouterr().err.strip()
    assert err == f"dataflex compare: cannot write {str(target)!r}: No space left on device"


@pytest.mark.parametrize("indent", [2, None], ids=["pretty", "one-line"])
@pytest.mark.parametrize("cut", [0.5, 0.999], ids=["half", "last-byte"])
def test_a_truncated_demo_file_is_named_truncated_not_a_bad_verl_log(tmp_path, indent, cut):
    text = json.dumps(demo_document(), indent=indent)
    path = tmp_path / "demo.json"
    path.write_text(text[: int(len(text) * cut)])
    with pytest.raises(CompareError) as caught:
        read_path(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: truncated") and "verl" not in message
