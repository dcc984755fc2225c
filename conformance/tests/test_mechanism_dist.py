"""A mechanism-and-kind distribution from a fresh site: listed, locked (bytes checked) and run through conformance.

``dataflex-rankweight`` (``packages/dataflex-core/tests/dists``, test-only) ships the ``rank_weight`` mechanism and
a ``ranker`` kind of its own. Installed with ``pip install --target`` into a directory only the subprocesses see:
``dataflex plugins`` shows both under the distribution, a lock records them and refuses the distribution once a
byte of it changes, and ``dataflex-conformance`` checks the mechanism's declarations without crashing on the kind
it has no suite for. The host step paths are tested in the hosts' ``test_rankweight_dist.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataflex_lab.testing.plugin_sites import install_into_target

DIST = Path(__file__).resolve().parents[2] / "packages" / "dataflex-core" / "tests" / "dists" / "dataflex-rankweight"

LOCK_THEN_TAMPER = """
import sys
from pathlib import Path
from dataflex_core.lock import PluginSetMismatch, locked_manager, restrict_to, scan_environment, write_lock

lock = Path(sys.argv[1])
plugin_set = restrict_to(scan_environment(load=["dataflex-rankweight"]), ["dataflex-rankweight"])
print("COMPONENTS", dict(plugin_set.plugins["dataflex-rankweight"].components))
write_lock(plugin_set, lock)
module = Path(sys.argv[2]) / "dataflex_rankweight" / "mechanism.py"
module.write_text(module.read_text() + "\\n# changed after locking\\n")
try:
    locked_manager(lock, allow_drift=False, expected_from=None)
except PluginSetMismatch as exc:
    print("REFUSED", exc)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return install_into_target(DIST, tmp_path_factory.mktemp("rankweight") / "site")


def _run(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "DATAFLEX_PLUGINS": "dataflex-rankweight"}  # fmt: skip
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=180)


def test_the_distribution_is_a_handful_of_small_files():
    files = sorted(p for p in DIST.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    lines = {p.relative_to(DIST).as_posix(): len(p.read_text().splitlines()) for p in files}
    print(f"dataflex-rankweight: {len(lines)} files, {sum(lines.values())} lines: {lines}")
    assert len(lines) <= 6 and sum(lines.values()) < 200, lines


def test_dataflex_plugins_lists_the_mechanism_and_the_new_kind(site):
    run = _run(site, "-c", "from dataflex_core.cli import main; raise SystemExit(main(['plugins', '--json']))")
    assert run.returncode == 0, run.stderr[-3000:]
    [row] = [r for r in json.loads(run.stdout) if r["distribution"] == "dataflex-rankweight"]
    assert row["components"] == {"mechanism": ["rank_weight"], "ranker": ["score_order"]}


def test_the_lock_records_both_and_refuses_a_changed_byte(site, tmp_path):
    run = _run(site, "-c", LOCK_THEN_TAMPER, str(tmp_path / "dataflex_plugins.lock"), str(site))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "COMPONENTS {'mechanism': ('rank_weight',), 'ranker': ('score_order',)}" in run.stdout
    assert "REFUSED" in run.stdout and "dataflex_rankweight/mechanism.py" in run.stdout


def test_conformance_checks_the_mechanisms_declarations_and_notes_the_kind(site, tmp_path):
    report = tmp_path / "report.json"
    run = _run(site, "-m", "dataflex_conformance.cli", "dataflex-rankweight", "--device", "cpu", "--report", str(report))  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [package] = json.loads(report.read_text())["packages"]
    assert package["components"] == ["mechanism:rank_weight", "ranker:score_order"]
    assert package["errors"] == []
    assert any(n.startswith("mechanism rank_weight: declarations checked") for n in package["notes"])
    assert any("kind 'ranker' is declared by its distribution" in n for n in package["notes"])


def test_a_mechanism_with_bad_declarations_gets_one_line_per_problem():
    from dataflex_conformance.checks_mechanism import mechanism_problems
    from dataflex_core.mechanisms import Mechanism

    class Careless(Mechanism):
        name = "careless"
        actuator_kind = "rankr"
        seams = (int,)
        timings = ("later",)

    problems = mechanism_problems(Careless)
    assert len(problems) == 4, problems
    assert "actuator_kind = 'rankr' is not a declared component kind" in problems[0]
    assert "seams = (<class 'int'>,)" in problems[1] and "timings = ('later',)" in problems[2]
    assert "does not implement run()" in problems[3]
