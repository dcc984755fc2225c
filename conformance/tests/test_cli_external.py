"""The CLI on plugin packages written outside the monorepo, pip-installed into a scratch directory.

This is the path a third-party repository takes: its own distribution,
entry point in group ``dataflex``, certified by ``dataflex-conformance DIST``.
The packages are installed with ``pip --target`` into a temporary directory
put on ``PYTHONPATH`` of the CLI's process, so the test environment is never changed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

GOOD_PLUGIN = '''
import torch
from dataflex_core import Reweighter, Scorer, masked_seq_mean, mean_one, register_reweighter, register_scorer, valid_mask_for


@register_scorer("acme_length")
class AcmeLength(Scorer):
    """Response length as a fraction of L."""

    granularity = "response"
    score_range = (0.0, 1.0)

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"]
        return mask.float().sum(-1) / max(mask.shape[-1], 1)


@register_reweighter("acme_linear")
class AcmeLinear(Reweighter):
    """1 + s, on [0, 1] scores."""

    score_range = (0.0, 1.0)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        s = scores.float()
        valid = valid_mask_for(s, batch)
        if (valid & ((s < 0) | (s > 1))).any():
            raise ValueError("acme_linear needs scores in [0, 1]")
        return mean_one(torch.where(valid, 1.0 + s, torch.zeros_like(s)), batch)
'''

BROKEN_PLUGIN = '''
import torch
from dataflex_core import Reweighter, mean_one, register_reweighter


@register_reweighter("acme_tilted")
class AcmeTilted(Reweighter):
    """Uniform weights, scaled by 1.02 (a normalisation bug)."""

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        return mean_one(torch.ones_like(scores, dtype=torch.float32), batch) * 1.02
'''


UNDECLARED_DEPENDENCY_PLUGIN = """
import acme_private_helpers  # not in the package's dependencies
"""

#: Registers a scorer under the name acme-dataflex-ext already uses.
CLASHING_PLUGIN = GOOD_PLUGIN.replace("class AcmeLength", "class OtherLength").replace(
    '@register_reweighter("acme_linear")', '@register_reweighter("acme_clash_linear")'
)


def _write_package(root: Path, dist: str, version: str, source: str) -> Path:
    module = dist.replace("-", "_")
    pkg = root / dist
    (pkg / "src" / module).mkdir(parents=True)
    (pkg / "src" / module / "__init__.py").write_text(textwrap.dedent(source))
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{dist}"
            version = "{version}"
            dependencies = ["dataflex-core>=0.1,<1", "torch>=2.1"]

            [project.entry-points.dataflex]
            {module} = "{module}"

            [tool.setuptools.packages.find]
            where = ["src"]
            """
        )
    )
    return pkg


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A scratch site directory holding the two external plugin packages."""
    root = tmp_path_factory.mktemp("external")
    target = root / "site"
    packages = [
        _write_package(root / "src", "acme-dataflex-ext", "0.3.1", GOOD_PLUGIN),
        _write_package(root / "src", "acme-broken-ext", "0.0.1", BROKEN_PLUGIN),
        _write_package(root / "src", "acme-undeclared-ext", "1.0.0", UNDECLARED_DEPENDENCY_PLUGIN),
        _write_package(root / "src", "acme-clash-ext", "2.0.0", CLASHING_PLUGIN),
    ]
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
    sources = [str(p) for p in packages]
    # Reuse this environment's setuptools when it can build them (fast, offline); else let pip isolate the build.
    if (
        importlib.util.find_spec("setuptools") is None
        or subprocess.run([*install, "--no-build-isolation", *sources]).returncode
    ):
        subprocess.run([*install, *sources], check=True)
    return target


def _cli(site: Path, *args: str, plugins: str = "acme-dataflex-ext,acme-broken-ext,acme-undeclared-ext"):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    # Load only the external plugins, as in the third party's own environment.
    env["DATAFLEX_PLUGINS"] = plugins
    return subprocess.run(
        [sys.executable, "-m", "dataflex_conformance.cli", *args], env=env, capture_output=True, text=True
    )


def test_external_plugin_is_certified_with_a_full_report(site, tmp_path):
    report_path = tmp_path / "report.json"
    run = _cli(site, "acme-dataflex-ext", "--device", "cpu", "--report", str(report_path))
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(report_path.read_text())
    assert report["ok"] is True and report["devices"] == ["cpu"] and report["device_request"] == "cpu"
    assert report["torch"] == torch.__version__ and report["dataflex_core"]
    assert report["packages"] == [
        {
            "name": "acme-dataflex-ext",
            "version": "0.3.1",
            "components": ["scorer:acme_length", "reweighter:acme_linear"],
            "errors": [],
            "notes": [],
        }
    ]
    by_name = {c["name"]: c for c in report["components"]}
    assert set(by_name) == {"acme_length", "acme_linear"}
    for component in by_name.values():
        assert component["package"] == "acme-dataflex-ext" and component["version"] == "0.3.1"
        assert component["certified_devices"] == ["cpu"] and component["status"] == "certified"
        assert component["checks"] and all(c["status"] == "passed" for c in component["checks"])
    subjects = {c["subject"] for c in by_name["acme_linear"]["checks"]}
    assert subjects == {"acme_linear@acme_length", "acme_linear@sample_scores"}  # undeclared: per-sample scores
    assert "acme_length  scorer      acme-dataflex-ext  0.3.1" in run.stdout
    assert "CERTIFIED:" in run.stdout


def test_broken_external_plugin_fails_and_a_declared_expected_failure_is_reported_with_its_reason(site, tmp_path):
    report_path = tmp_path / "broken.json"
    run = _cli(site, "acme-broken-ext", "--device", "cpu", "--report", str(report_path))
    assert run.returncode == 1
    assert "NOT CERTIFIED" in run.stdout
    # the report leads with one line for the one problem, however many cases and score sources show it
    problems = run.stdout.split("problems (1):\n", 1)[1].splitlines()[0]
    assert problems.startswith("  acme_tilted check_mean_one fails in ")
    assert "weights mean=1.02 over 7 valid samples, expected 1 ± 1e-4 [acme_tilted(), scores=" in problems
    component = json.loads(report_path.read_text())["components"][0]
    failed = {c["check"] for c in component["checks"] if c["status"] == "failed"}
    assert failed == {"check_mean_one"} and component["certified_devices"] == []

    reason = "tilts every weight by 2%, fixed in 0.0.2"
    run = _cli(
        site,
        "acme-broken-ext",
        "--device",
        "cpu",
        "--report",
        str(report_path),
        "--xfail",
        f"acme_tilted-check_mean_one={reason}",
    )
    assert run.returncode == 0, run.stdout
    checks = json.loads(report_path.read_text())["components"][0]["checks"]
    xfails = [c for c in checks if c["status"] == "expected-failure"]
    assert xfails and all(c["reason"] == reason and c["message"].startswith("weights mean=1.02") for c in xfails)
    assert f"acme_tilted-check_mean_one: {len(xfails)} check(s) — {reason}" in run.stdout


def test_cli_failures_that_are_not_checks(site, tmp_path):
    report_path = tmp_path / "undeclared.json"
    run = _cli(site, "acme-undeclared-ext", "--device", "cpu", "--report", str(report_path))
    assert run.returncode == 1
    package = json.loads(report_path.read_text())["packages"][0]
    assert package["name"] == "acme-undeclared-ext" and package["version"] == "1.0.0"
    assert "ModuleNotFoundError: No module named 'acme_private_helpers'" in package["errors"][0]
    assert "ERROR acme-undeclared-ext: plugin failed to load" in run.stdout

    run = _cli(site, "acme-not-installed", "--device", "cpu", "--xfail", "check_mean_on=typo")
    assert run.returncode == 1
    assert "distribution 'acme-not-installed' is not installed" in run.stdout
    assert "expected failure 'check_mean_on' names no check that ran" in run.stdout

    if not torch.cuda.is_available():
        report_path = tmp_path / "cuda.json"
        cuda = _cli(site, "acme-dataflex-ext", "--device", "cuda", "--report", str(report_path))
        assert cuda.returncode == 1
        report = json.loads(report_path.read_text())
        assert report["devices"] == [] and report["ok"] is False
        assert "torch.cuda.is_available() is False" in report["errors"][0]
        assert all(c["certified_devices"] == [] for c in report["components"])


def test_a_name_clash_between_two_distributions_spares_unrelated_plugins(site, tmp_path):
    plugins = "acme-dataflex-ext,acme-broken-ext,acme-clash-ext"
    report_path = tmp_path / "unrelated.json"
    run = _cli(site, "acme-broken-ext", "--device", "cpu", "--report", str(report_path), plugins=plugins)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    report = json.loads(report_path.read_text())
    assert report["packages"][0]["errors"] == []  # only its own mean-one bug
    assert "acme_tilted check_mean_one fails" in run.stdout

    run = _cli(site, "acme-dataflex-ext", "--device", "cpu", "--report", str(report_path), plugins=plugins)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    errors = json.loads(report_path.read_text())["packages"][0]["errors"]
    assert len(errors) == 1 and "scorer name 'acme_length' is registered twice" in errors[0]
    assert "acme-dataflex-ext==0.3.1" in errors[0] and "acme-clash-ext==2.0.0" in errors[0]
