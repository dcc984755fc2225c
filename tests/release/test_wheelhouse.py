"""The built distributions install from the wheelhouse alone and work: the third install path.

``nox -s build`` writes an sdist and a wheel of every distribution into
``dist/`` and runs these tests on it (``DATAFLEX_WHEELHOUSE``); run directly,
the tests build the wheels themselves with ``pip wheel``.

The fresh virtualenv gets the DataFlex distributions **only** from the
wheelhouse (``pip install --no-index --find-links``, pip's own configuration
switched off). Their third-party requirements (torch, pluggy, numpy, ...) are
not ours to ship: the virtualenv sees the ones this session has installed
through a ``.pth`` file naming a folder that links exactly the distributions
the wheels declare (and what those declare in turn). A requirement a wheel
forgets to declare is therefore missing there, as it would be for a user.
"""

from __future__ import annotations

import email
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from monorepo_dists import ROOT, Dist, all_dists
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DISTS = all_dists()
#: The host needs verl, Ray and TransferQueue, which are not the wheelhouse's to provide: its
#: wheel is installed without its requirements and only its command line (which imports no verl) is run.
HOST = "dataflex-verl"
#: The production wheels: what training needs, nothing of the lab.
PRODUCTION = ("dataflex-core", "dataflex-verl", "dataflex-trl")
#: What only dataflex-lab may ship: comparisons, demos, toys, verl's CPU harness and sandbox, the testing kit.
LAB_MODULES = re.compile(r"/(compare|cpu_loop|testing)/|/(demo\w*|toy\w*|sandbox|training_demo)\.py$")


def _pip_env() -> dict[str, str]:
    """The environment with pip's configuration (indexes, find-links) switched off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    given = os.environ.get("DATAFLEX_WHEELHOUSE")
    if given:
        return Path(given).resolve()
    out = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), *(str(d.path) for d in DISTS)],
        check=True,
    )
    return out


def wheel_of(wheelhouse: Path, dist: Dist) -> Path:
    found = sorted(wheelhouse.glob(f"{dist.wheel_stem}-{dist.version}-*.whl"))
    assert len(found) == 1, f"expected one wheel of {dist.name} {dist.version} in {wheelhouse}, found {found}"
    return found[0]


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: d.name)
def test_the_wheel_carries_license_urls_and_the_license_file(wheelhouse, dist):
    wheel = wheel_of(wheelhouse, dist)
    meta = wheel_metadata(wheel)
    assert meta["License-Expression"] == "Apache-2.0", (
        f"{wheel.name}: License-Expression={meta['License-Expression']!r}"
    )
    assert meta["License"] is None, f"{wheel.name} still has the deprecated License field"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Repository", "Documentation", "Changelog"} <= set(urls), f"{wheel.name}: Project-URL {urls}"
    with zipfile.ZipFile(wheel) as archive:
        licenses = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert licenses and archive.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: d.name)
def test_the_sdist_is_there_with_its_license(wheelhouse, dist):
    sdists = sorted(wheelhouse.glob(f"{dist.wheel_stem}-{dist.version}.tar.gz"))
    if not sdists and not os.environ.get("DATAFLEX_WHEELHOUSE"):
        pytest.skip("wheels built by pip wheel here; `nox -s build` builds the sdists too")
    assert len(sdists) == 1, f"expected the sdist {dist.wheel_stem}-{dist.version}.tar.gz in {wheelhouse}"
    import tarfile

    with tarfile.open(sdists[0]) as archive:
        names = set(archive.getnames())
    top = f"{dist.wheel_stem}-{dist.version}"
    assert {f"{top}/LICENSE", f"{top}/pyproject.toml", f"{top}/README.md", f"{top}/PKG-INFO"} <= names


@pytest.mark.parametrize("name", PRODUCTION)
def test_a_production_wheel_holds_no_demo_toy_or_harness_module(wheelhouse, name):
    dist = next(d for d in DISTS if d.name == name)
    with zipfile.ZipFile(wheel_of(wheelhouse, dist)) as archive:
        modules = [n for n in archive.namelist() if n.endswith(".py")]
    assert modules, f"{name}'s wheel holds no module"
    lab = [n for n in modules if LAB_MODULES.search(n)]
    assert not lab, f"{name}'s wheel ships lab modules {lab}; they belong in packages/dataflex-lab"


def test_the_lab_wheel_holds_what_the_production_wheels_do_not():
    """The pattern above matches what really moved (so the check above can fail)."""
    lab = next(d for d in DISTS if d.name == "dataflex-lab")
    sources = [p.relative_to(lab.path / "src").as_posix() for p in (lab.path / "src").rglob("*.py")]
    for module in ("dataflex_lab/compare/stats.py", "dataflex_lab/toy_model.py", "dataflex_lab/demo_report.py",
                   "dataflex_lab/verl/cpu_loop/verl_internals.py", "dataflex_lab/verl/sandbox.py",
                   "dataflex_lab/trl/toy.py", "dataflex_lab/testing/batches.py"):  # fmt: skip
        assert module in sources and LAB_MODULES.search("/" + module), module


def _requirements(requires: list[str] | None) -> list[Requirement]:
    reqs = [Requirement(r) for r in requires or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def third_party_closure(wheels: list[Path]) -> list[metadata.Distribution]:
    """The installed distributions the wheels require (their requirements too), DataFlex's own left out."""
    todo = [r for w in wheels for r in _requirements(wheel_metadata(w).get_all("Requires-Dist"))]
    seen: dict[str, metadata.Distribution] = {}
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name.startswith("dataflex-") or name in seen:
            continue
        try:
            found = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{req} is required by the wheels but not installed in this session; install it here")
        assert req.specifier.contains(found.version, prereleases=True), f"{req} but this session has {found.version}"
        seen[name] = found
        todo += _requirements(found.requires)
    return list(seen.values())


def link_distributions(dists: list[metadata.Distribution], folder: Path) -> None:
    """A folder of links to each distribution's top-level files and its metadata directory."""
    folder.mkdir()
    for dist in dists:
        site = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")} - {"__pycache__"}
        for top in tops:
            target = folder / top
            if not target.exists() and (site / top).exists():
                target.symlink_to(site / top)


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, env=kwargs.pop("env", _pip_env()), **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def fresh_venv(wheelhouse, tmp_path_factory) -> Path:
    """A virtualenv with every distribution but the host installed from the wheelhouse alone."""
    work = tmp_path_factory.mktemp("fresh_venv")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    wanted = [d for d in DISTS if d.name != HOST]
    deps = work / "third_party"
    link_distributions(third_party_closure([wheel_of(wheelhouse, d) for d in wanted]), deps)
    Path(purelib, "_third_party.pth").write_text(f"{deps}\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index"]
    run([*pip, "--find-links", str(wheelhouse), *(d.name for d in wanted)])
    run([*pip, "--no-deps", "--find-links", str(wheelhouse), HOST])
    return venv


def venv_run(venv: Path, args: list[str]) -> subprocess.CompletedProcess:
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    return run([str(bindir / args[0]), *args[1:]], cwd=venv.parent)


def test_dataflex_plugins_lists_every_plugin_from_the_wheels(fresh_venv):
    listed = json.loads(venv_run(fresh_venv, ["dataflex", "plugins", "--json"]).stdout)
    shipped = {d.name: d.version for d in DISTS if d.rel.startswith("plugins/")}
    seen = {p["distribution"]: p for p in listed}
    assert set(shipped) <= set(seen), f"plugins missing from `dataflex plugins`: {set(shipped) - set(seen)}"
    for name, version in shipped.items():
        assert seen[name]["version"] == version and seen[name]["status"] == "loaded", seen[name]


PAIR = textwrap.dedent(
    """
    import json, sys
    import torch
    import dataflex_core, dataflex_scorers_advantage, dataflex_reweighters_sample
    from dataflex_core import Batch, build_from_config

    mask = (torch.arange(6) < torch.tensor([[6], [3], [0], [5]])).long()  # row 2 is an empty response
    batch = Batch({"advantages": torch.tensor([[2.0], [-1.0], [9.0], [0.5]]) * mask, "response_mask": mask})
    pipeline = build_from_config(
        {"mechanism": "reweight", "scorer": {"name": "advantage_magnitude"},
         "actuator": {"name": "softmax", "params": {"temperature": 1.0}}},
        adv_estimator="grpo",
    )
    weights = pipeline.actuator.act(pipeline.scorer.score(batch, step_id=0), batch)
    json.dump({"weights": weights.tolist(), "files": [m.__file__ for m in (
        dataflex_core, dataflex_scorers_advantage, dataflex_reweighters_sample)], "torch": torch.__file__}, sys.stdout)
    """
)


def test_a_scorer_and_reweighter_pair_runs_from_the_installed_wheels(fresh_venv):
    out = json.loads(venv_run(fresh_venv, ["python", "-c", PAIR]).stdout)
    for path in out["files"]:
        assert Path(path).is_relative_to(fresh_venv), f"{path} was imported from outside the fresh virtualenv"
    assert not Path(out["torch"]).is_relative_to(ROOT), out["torch"]
    weights = out["weights"]
    assert weights[2] == 0.0, "the empty row must get weight 0"
    valid = [w for i, w in enumerate(weights) if i != 2]
    assert abs(sum(valid) / len(valid) - 1.0) < 1e-5 and weights[0] > weights[1] > 0, weights


def test_the_host_wheel_installs_its_command_line(fresh_venv):
    out = venv_run(fresh_venv, ["dataflex-verl", "--help"]).stdout
    assert "usage: dataflex-verl" in out


def test_the_lab_wheel_adds_its_commands_to_the_production_command_lines(fresh_venv):
    assert venv_run(fresh_venv, ["dataflex", "compare", "--help"]).stdout.startswith("usage: dataflex compare")
    for program, commands in (("dataflex-verl", ["demo", "demo-step"]), ("dataflex-trl", ["demo"])):
        listing = venv_run(fresh_venv, [program, "--help"]).stdout
        assert "not installed" not in listing and all(f"    {c} " in listing for c in commands), listing
