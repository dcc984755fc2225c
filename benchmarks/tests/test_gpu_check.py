"""The prepared GPU check runs as a dry run on the CPU, so it cannot rot between GPU runs (issue 18)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "gpu_check.py"


def check(tmp_path: Path, *args: str, timeout: float = 240) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "reports"
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), "--venv", str(tmp_path / "venv"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    return proc, summary


def test_the_dry_run_runs_every_phase_on_the_cpu(tmp_path):
    proc, summary = check(tmp_path, "--dry-run", "--plugins", "dataflex-scorers-reward")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    status = {p["name"]: p["status"] for p in summary["phases"]}
    assert status == {
        "environment": "pass",
        "venv": "pass",
        "install": "skip",
        "certify": "pass",
        "host": "pass",
    }
    assert summary["ok"] and summary["dry_run"] and summary["device"] == "cpu"
    phases = {p["name"]: p for p in summary["phases"]}
    (plugin,) = phases["certify"]["data"]["plugins"]
    assert plugin["dist"] == "dataflex-scorers-reward" and plugin["devices"] == ["cpu"]
    assert set(plugin["components"]) == {"reward_difficulty", "group_solve_rate", "group_reward_variance"}
    certificate = json.loads((tmp_path / "reports" / "conformance" / "dataflex-scorers-reward.json").read_text())
    assert certificate["ok"] and certificate["devices"] == ["cpu"]
    host = phases["host"]["data"]
    assert host["ok"] and host["device"] == "cpu" and len(host["rows"]) >= 5
    markdown = (tmp_path / "reports" / "summary.md").read_text()
    assert markdown.startswith("# GPU check: PASS (dry run on the CPU)")
    assert "| host step |" in markdown


@pytest.mark.skipif(
    torch.cuda.is_available() or shutil.which("nvidia-smi") is not None, reason="this machine has a GPU"
)
def test_a_real_run_on_a_machine_without_a_gpu_stops_before_installing_anything(tmp_path):
    proc, summary = check(tmp_path, timeout=60)
    assert proc.returncode == 1
    status = {p["name"]: p["status"] for p in summary["phases"]}
    assert status["environment"] == "fail" and all(s == "skip" for n, s in status.items() if n != "environment")
    assert "not a CUDA machine" in summary["phases"][0]["detail"] and "--dry-run" in summary["phases"][0]["detail"]
    assert not (tmp_path / "venv").exists(), "nothing may be created or installed on a machine that cannot run it"
