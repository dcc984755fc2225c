"""The lock against an attacker who can write files: under a lock only the locked bytes run.

Each case first shows the attack working without a lock (a plain ``python``
process imports the plugin and the planted code leaves a marker file), then
that ``dataflex verify`` and a lock in force see or ignore it: altered, added
or shadowing files, entry points outside their distribution, files planted in
a namespace folder. Code the lock let run is out of its reach, so no case here
attacks from inside a locked plugin (the production guide's threat model).

The plugins are real wheels, installed by one pip run for the module into a
throwaway site-packages (the testing kit's
:class:`~dataflex_lab.testing.plugin_sites.PipSite`); each test sees only the
distributions it names (:func:`only`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import dataflex_core as plugin_module
from dataflex_core import PluginLoadError, get_plugin_manager, use_plugin_lock
from dataflex_core.cli import main as cli_main
from dataflex_core.lock import (
    LockFileError,
    PluginDriftWarning,
    PluginSetMismatch,
    installed_plugin_set,
    parse_lock,
    read_lock,
    write_lock,
)
from dataflex_lab.testing import plugin_sites
from dataflex_lab.testing.hostile import HOSTILE, plant_bytecode

SCORERS = """
from dataflex_core import Scorer, register_scorer

BEHAVIOUR = "locked"


@register_scorer("hs_length")
class LengthScorer(Scorer):
    def score(self, batch, step_id, **ctx):
        return batch.batch["response_mask"].sum(-1).float()
"""
PACKAGE = {
    "hs_good/__init__.py": "from . import scorers  # noqa: F401\n",
    "hs_good/scorers.py": SCORERS,
    "hs_good/lazy.py": "VALUE = 1\n",
}
EXTENSION = f"hs_good/fast{importlib.machinery.EXTENSION_SUFFIXES[0]}"
NS_SCORERS = SCORERS.replace("hs_length", "hs_ns_length")
EXITS = """
import argparse

parser = argparse.ArgumentParser(prog="train_my_scorer")
parser.add_argument("--lr", type=float, default=1e-3)
ARGS = parser.parse_args()  # module level: runs at import, on the host's command line
"""
NOISY = """
import ctypes
import os

print("noise from print")
os.write(1, b"noise from file descriptor 1\\n")
ctypes.CDLL(None).printf(b"noise from C stdio\\n")
""" + SCORERS.replace("hs_length", "hs_noisy")
#: Every distribution the module installs: ``(dist, version, files, entry points)``.
INSTALLED = [
    ("hs-good", "0.1.0", {**PACKAGE, EXTENSION: "not really a shared object"}, {"hs_good": "hs_good"}),
    ("hs-ns", "0.1.0", {"hs_ns/plugin/__init__.py": NS_SCORERS}, {"hs_ns": "hs_ns.plugin"}),
    ("hs-other", "0.1.0", {"hs_ns/other.py": "VALUE = 2\n"}, {}),  # a portion of hs_ns, not a plugin
    ("hs-helper", "0.1.0", {"hs_helper/__init__.py": HOSTILE + SCORERS}, {}),  # a plain library, no plugin
    ("hs-outside", "0.1.0", {"hs_outside/__init__.py": SCORERS}, {"hs_outside": "hs_helper"}),
    ("hs-pth", "0.1.0", {"hs_pth/__init__.py": "", "hs_pth_startup.pth": "# run by site.py at every start-up\n"},
     {"hs_pth": "hs_pth"}),
    ("hs-exits", "0.1.0", {"hs_exits/__init__.py": EXITS}, {"hs_exits": "hs_exits"}),
    ("hs-noisy", "0.1.0", {"hs_noisy/__init__.py": NOISY}, {"hs_noisy": "hs_noisy"}),
]  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """One throwaway site for the module: every distribution its tests use, installed by one pip run."""
    with pytest.MonkeyPatch.context() as mp:
        with plugin_sites.pip_site(tmp_path_factory.mktemp("hostile"), mp, alone=True) as site:
            site.install_many(INSTALLED)
            site.keep()
            yield site


@pytest.fixture
def pip_site(site):
    """The module's site as pip installed it, in a fresh process's state (what a test changed is put back)."""
    site.reset()
    plugin_module.reset_plugin_manager()
    yield site
    site.reset()
    plugin_module.reset_plugin_manager()


def only(site, *dists: str) -> None:
    """Hide every installed distribution but ``dists`` (as if only they were installed)."""
    site.hide(*(dist for dist, *_ in INSTALLED if dist not in dists))


def fresh_process(pip_site) -> None:
    """What a job's new process starts from: no plugin module imported, no manager, no lock finder."""
    pip_site.forget_modules()
    plugin_module.reset_plugin_manager()


@pytest.fixture
def hs_lock(pip_site, tmp_path, marker) -> Path:
    """``hs-good`` (a package of three modules and an extension) the one plugin installed, locked, in a fresh
    process's state."""
    only(pip_site, "hs-good")
    path = tmp_path / "dataflex.lock"
    assert cli_main(["lock", "-o", str(path)]) == 0
    fresh_process(pip_site)
    return path


def prepend(monkeypatch, entry: Path) -> None:
    """Put ``entry`` in front of ``sys.path`` for this test (``setattr``, so the fixture's own path is restored)."""
    monkeypatch.setattr(sys, "path", [str(entry), *sys.path])
    importlib.invalidate_caches()


def plain_python(code: str, *, path: list[Path], cwd: Path | None = None, script: Path | None = None) -> None:
    """Run ``code`` in a new interpreter with ``path`` in front of ``sys.path``, as a job without a lock would."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in path)}
    if script is not None:
        script.write_text(code)
        args = [sys.executable, str(script)]
    else:
        args = [sys.executable, "-c", code]
    subprocess.run(args, env=env, cwd=cwd, check=False, capture_output=True)


def verify_json(lock: Path, capsys, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli_main(["verify", str(lock), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def content_detail(report: dict, dist: str) -> str:
    (row,) = [d for d in report["differences"] if d["distribution"] == dist and d["difference"] == "content changed"]
    return row["detail"]


def locked_scorer_module(pip_site) -> object:
    module = sys.modules["hs_good.scorers"]
    assert Path(inspect.getfile(module)).is_relative_to(pip_site.root)
    return module


# -- 1. cached bytecode ---------------------------------------------------------------------------
def test_planted_bytecode_is_reported_and_never_runs_under_the_lock(hs_lock, pip_site, marker, capsys):
    source = pip_site.root / "hs_good" / "scorers.py"
    cache = plant_bytecode(source, HOSTILE + SCORERS.replace('"locked"', '"hostile"'))
    plain_python("import hs_good", path=[pip_site.root])
    assert marker.exists(), "without a lock, CPython runs bytecode whose header matches its source"
    marker.unlink()

    code, report = verify_json(hs_lock, capsys)
    assert code == 1
    assert (
        content_detail(report, "hs-good") == f"bytecode not compiled from its source hs_good/__pycache__/{cache.name}"
    )
    with pytest.raises(PluginSetMismatch, match="bytecode not compiled from its source"):
        use_plugin_lock(hs_lock)
    plugin_module.reset_plugin_manager()
    with pytest.warns(PluginDriftWarning):
        manager = use_plugin_lock(hs_lock, allow_drift=True)  # even accepted drift compiles the source
    assert manager.registry().get("scorer", "hs_length") is not None
    assert locked_scorer_module(pip_site).BEHAVIOUR == "locked"
    assert not marker.exists()


def test_bytecode_pip_compiled_from_the_source_is_not_a_difference(hs_lock, pip_site, capsys):
    cached = Path(importlib.util.cache_from_source(str(pip_site.file("hs_good"))))  # beside it, or under a prefix
    assert cached.is_file(), "pip compiles at install"
    assert verify_json(hs_lock, capsys)[0] == 0


# -- 2. files inside a locked package that its RECORD does not list --------------------------------
def test_a_package_folder_shadowing_a_locked_module_is_reported_and_never_runs(hs_lock, pip_site, marker, capsys):
    shadow = pip_site.root / "hs_good" / "scorers" / "__init__.py"
    shadow.parent.mkdir()
    shadow.write_text(HOSTILE)
    plain_python("import hs_good", path=[pip_site.root])
    assert marker.exists(), "without a lock, the folder wins over the hashed hs_good/scorers.py"
    marker.unlink()

    code, report = verify_json(hs_lock, capsys)
    assert (code, content_detail(report, "hs-good")) == (1, "added hs_good/scorers/__init__.py")
    with pytest.raises(PluginSetMismatch, match="added hs_good/scorers/__init__.py"):
        use_plugin_lock(hs_lock)
    plugin_module.reset_plugin_manager()
    with pytest.warns(PluginDriftWarning):
        use_plugin_lock(hs_lock, allow_drift=True)  # drift changes locked bytes; it never adds files
    assert locked_scorer_module(pip_site).BEHAVIOUR == "locked"
    assert not marker.exists()


def test_a_module_dropped_into_a_locked_package_cannot_be_imported(hs_lock, pip_site, marker):
    use_plugin_lock(hs_lock)
    (pip_site.root / "hs_good" / "extra.py").write_text(HOSTILE)
    with pytest.raises(ModuleNotFoundError, match="among the checked files of hs-good"):
        importlib.import_module("hs_good.extra")
    assert not marker.exists()


# -- 3. a modified copy earlier on sys.path ---------------------------------------------------------
def _copy_with_hostile_scorers(folder: Path, pip_site) -> Path:
    shutil.copytree(pip_site.root / "hs_good", folder / "hs_good", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "hs_good" / "scorers.py").write_text(HOSTILE + SCORERS.replace('"locked"', '"hostile"'))
    return folder


@pytest.mark.parametrize("vector", ["PYTHONPATH", "working directory", "script folder", "zip archive"])
def test_a_modified_copy_earlier_on_sys_path_never_runs_under_the_lock(
    hs_lock, pip_site, marker, tmp_path, monkeypatch, capsys, vector
):
    copy = _copy_with_hostile_scorers(tmp_path / "job", pip_site)
    entry = copy
    if vector == "zip archive":
        entry = tmp_path / "shadow.zip"
        with zipfile.ZipFile(entry, "w") as zf:
            for file in (copy / "hs_good").iterdir():
                zf.write(file, f"hs_good/{file.name}")
    if vector == "working directory":
        plain_python("import hs_good", path=[pip_site.root], cwd=copy)
    elif vector == "script folder":
        plain_python("import hs_good", path=[pip_site.root], script=copy / "train.py")
    else:
        plain_python("import hs_good", path=[entry, pip_site.root])
    assert marker.exists(), f"without a lock, the copy on the {vector} runs"
    marker.unlink()

    prepend(monkeypatch, entry)  # where each of those puts the copy: before site-packages
    assert verify_json(hs_lock, capsys)[0] == 0  # the installed files are intact; the copy is never imported
    manager = use_plugin_lock(hs_lock)
    assert manager.registry().get("scorer", "hs_length") is not None
    assert locked_scorer_module(pip_site).BEHAVIOUR == "locked"
    assert importlib.import_module("hs_good.lazy").VALUE == 1  # later imports come from the locked files too
    assert not marker.exists()


def test_a_copy_with_its_own_metadata_is_hashed_where_it_is_and_refused(
    hs_lock, pip_site, marker, tmp_path, monkeypatch
):
    copy = _copy_with_hostile_scorers(tmp_path / "job", pip_site)
    (info,) = pip_site.root.glob("hs_good-*.dist-info")
    shutil.copytree(info, copy / info.name)
    prepend(monkeypatch, copy)
    with pytest.raises(PluginSetMismatch, match="modified hs_good/scorers.py"):
        use_plugin_lock(hs_lock)
    assert not marker.exists()


def test_plugin_modules_imported_before_the_lock_are_refused(hs_lock, pip_site, tmp_path, monkeypatch):
    copy = _copy_with_hostile_scorers(tmp_path / "job", pip_site)
    prepend(monkeypatch, copy)
    importlib.import_module("hs_good")  # the job imported the plugin itself, before any lock
    with pytest.raises(PluginLoadError, match=r"imported before the lock was in force.*hs_good \(hs-good\) from .*job"):
        use_plugin_lock(hs_lock)


def test_an_import_hook_installed_before_the_lock_does_not_serve_locked_modules(hs_lock, pip_site, marker, monkeypatch):
    class HostileLoader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            exec(HOSTILE, module.__dict__)

    class HostileFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            return importlib.util.spec_from_loader(name, HostileLoader()) if name == "hs_good.scorers" else None

    monkeypatch.setattr(sys, "meta_path", [HostileFinder(), *sys.meta_path])  # e.g. from a .pth or sitecustomize
    importlib.import_module("hs_good")
    assert marker.exists(), "without a lock, the hook serves the module"
    marker.unlink()
    pip_site.forget_modules()

    use_plugin_lock(hs_lock)
    assert locked_scorer_module(pip_site).BEHAVIOUR == "locked"
    assert not marker.exists()


# -- what changes after the check ---------------------------------------------------------------------
def test_a_locked_file_changed_after_the_check_is_not_imported(hs_lock, pip_site, marker):
    use_plugin_lock(hs_lock)
    lazy = pip_site.root / "hs_good" / "lazy.py"
    lazy.write_text(HOSTILE)
    with pytest.raises(ImportError, match="changed after its files were checked"):
        importlib.import_module("hs_good.lazy")
    assert not marker.exists()


def test_a_locked_extension_module_is_hashed_again_before_the_dynamic_loader_opens_it(hs_lock, pip_site):
    assert EXTENSION in parse_lock(hs_lock.read_text()).plugins["hs-good"].files
    use_plugin_lock(hs_lock)
    (pip_site.root / EXTENSION).write_bytes(b"\x7fELF replaced")
    with pytest.raises(ImportError, match="changed after its files were checked"):
        importlib.import_module("hs_good.fast")


# -- namespace packages, editable installs, .pth files -------------------------------------------------
def test_a_namespace_plugin_runs_no_init_found_elsewhere_and_keeps_other_portions(
    pip_site, marker, tmp_path, monkeypatch
):
    only(pip_site, "hs-ns", "hs-other")
    lock = tmp_path / "dataflex.lock"
    assert cli_main(["lock", "-o", str(lock)]) == 0
    pip_site.forget_modules()
    plugin_module.reset_plugin_manager()
    shadow = tmp_path / "shadow" / "hs_ns" / "__init__.py"  # a regular package of the namespace's name
    shadow.parent.mkdir(parents=True)
    shadow.write_text(HOSTILE)
    portion = tmp_path / "other" / "hs_ns" / "other_module.py"  # another distribution's portion
    portion.parent.mkdir(parents=True)
    portion.write_text("VALUE = 2\n")
    plain_python("import hs_ns.plugin", path=[shadow.parent.parent, pip_site.root])
    assert marker.exists()
    marker.unlink()

    prepend(monkeypatch, portion.parent.parent)
    prepend(monkeypatch, shadow.parent.parent)
    manager = use_plugin_lock(lock)
    assert manager.registry().get("scorer", "hs_ns_length") is not None
    assert getattr(sys.modules["hs_ns"], "__file__", None) is None  # a namespace: no __init__ ran
    assert importlib.import_module("hs_ns.other_module").VALUE == 2
    assert not marker.exists()


def test_an_editable_plugin_under_a_lock_is_compiled_from_its_source_tree(pip_site, marker, tmp_path, monkeypatch):
    only(pip_site)
    src = tmp_path / "src"
    for rel, text in PACKAGE.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    info = pip_site.root / "hs_good-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hs-good\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[dataflex]\nhs_good = hs_good\n")
    (info / "direct_url.json").write_text(json.dumps({"url": src.as_uri(), "dir_info": {"editable": True}}))
    pip_site.modules.add("hs_good")
    prepend(monkeypatch, src)  # what the editable install's .pth adds at start-up
    lock = tmp_path / "dataflex.lock"
    assert cli_main(["lock", "-o", str(lock)]) == 0
    assert parse_lock(lock.read_text()).plugins["hs-good"].editable
    pip_site.forget_modules()
    plugin_module.reset_plugin_manager()

    plant_bytecode(src / "hs_good" / "scorers.py", HOSTILE + SCORERS)
    with pytest.warns(PluginDriftWarning, match="bytecode not compiled from its source"):
        use_plugin_lock(lock, allow_drift=True)
    assert sys.modules["hs_good.scorers"].BEHAVIOUR == "locked"
    assert not marker.exists()


def test_a_pth_file_of_a_locked_plugin_is_named_when_locking_and_hashed(pip_site, tmp_path, capsys):
    only(pip_site, "hs-pth")
    lock = tmp_path / "dataflex.lock"
    capsys.readouterr()
    assert cli_main(["lock", "-o", str(lock)]) == 0
    assert "hs-pth installs hs_pth_startup.pth, which Python runs at every start-up" in capsys.readouterr().err
    (pip_site.root / "hs_pth_startup.pth").write_text("import os; os.system('id')\n")
    code, report = verify_json(lock, capsys)
    assert (code, content_detail(report, "hs-pth")) == (1, "modified hs_pth_startup.pth")


# -- the lock file itself ---------------------------------------------------------------------------
def test_a_lock_that_is_not_utf8_exits_2_with_the_fix(hs_lock, monkeypatch, capsys):
    hs_lock.write_bytes(b"lock_version = 1\n# \xff\xfe not text\n")
    capsys.readouterr()
    assert cli_main(["verify", str(hs_lock)]) == 2
    err = capsys.readouterr().err
    assert "is not UTF-8 text (byte 0xff at offset 19)" in err and f"dataflex lock -o {hs_lock}" in err
    monkeypatch.setenv("DATAFLEX_PLUGINS_LOCK", str(hs_lock))
    assert cli_main(["plugins"]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err
    monkeypatch.delenv("DATAFLEX_PLUGINS_LOCK")
    with pytest.raises(LockFileError, match="is not UTF-8 text"):
        use_plugin_lock(hs_lock)


# -- what a plugin does at import -------------------------------------------------------------------
def dataflex(*args: str, site: Path) -> subprocess.CompletedProcess:
    """The ``dataflex`` command in a process of its own (real file descriptors), the plugins of ``site`` installed."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-m", "dataflex_core.cli", *args], env=env, capture_output=True, text=True)


def test_a_plugin_exiting_at_import_is_a_failed_plugin_not_a_dead_process(pip_site, monkeypatch, capsys):
    only(pip_site, "hs-good", "hs-exits")
    done = dataflex("plugins", "--json", site=pip_site.root)
    assert done.returncode == 1, done.stderr  # a failed plugin, not argparse's exit 2
    rows = {r["distribution"]: r for r in json.loads(done.stdout)}
    assert rows["hs-good"]["status"] == "loaded", rows["hs-good"]
    assert rows["hs-exits"]["status"] == "failed"
    assert "tried to exit the process (SystemExit(2)" in rows["hs-exits"]["error"]
    # argparse's complaint is labelled as the plugin's, not read as dataflex rejecting its own subcommand
    assert "[dataflex plugin hs_exits (hs-exits==0.1.0), at import] usage: train_my_scorer" in done.stderr

    monkeypatch.setattr(sys, "argv", ["train.py", "--config", "job.yaml"])
    with pytest.warns(UserWarning, match="skipping plugin hs_exits"):
        registry = get_plugin_manager().registry()
    assert registry.get("scorer", "hs_length") is not None  # the process and the other plugins carry on
    plugin_module.reset_plugin_manager()
    monkeypatch.setenv("DATAFLEX_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="tried to exit the process"):
        get_plugin_manager()


def test_what_a_plugin_prints_at_import_never_reaches_machine_readable_output(pip_site, tmp_path):
    only(pip_site, "hs-noisy")
    listing = dataflex("plugins", "--json", site=pip_site.root)
    assert any(r["distribution"] == "hs-noisy" and r["status"] == "loaded" for r in json.loads(listing.stdout))
    for noise in ("noise from print", "noise from file descriptor 1", "noise from C stdio"):
        assert noise in listing.stderr and noise not in listing.stdout
    assert "[dataflex plugin hs_noisy (hs-noisy==0.1.0), at import] noise from print" in listing.stderr

    locked = dataflex("lock", "-o", "-", site=pip_site.root)
    assert locked.returncode == 0, locked.stderr
    lock = tmp_path / "dataflex.lock"
    lock.write_text(locked.stdout)
    assert "hs-noisy" in parse_lock(locked.stdout).plugins
    verified = dataflex("verify", str(lock), "--json", site=pip_site.root)
    assert json.loads(verified.stdout)["ok"] is True
    assert "noise from C stdio" in verified.stderr


# -- an entry point naming a module its distribution does not ship ------------------------------------------
@pytest.fixture(params=["another distribution", "the job's folder"])
def outside_plugin(request, pip_site, tmp_path, monkeypatch, marker) -> str:
    """``hs-outside``, whose entry point names ``hs_helper``: hostile code it does not ship; returns where it is."""
    if request.param == "another distribution":  # a plain library, no plugin: no lock covers it
        only(pip_site, "hs-outside", "hs-helper")
    else:
        only(pip_site, "hs-outside")
        shutil.rmtree(pip_site.root / "hs_helper")
        job = tmp_path / "job"
        job.mkdir()
        (job / "hs_helper.py").write_text(HOSTILE + SCORERS)
        prepend(monkeypatch, job)  # python train.py puts the script's folder first
    fresh_process(pip_site)
    return request.param


def test_lock_refuses_an_entry_point_whose_module_its_distribution_does_not_ship(
    outside_plugin, tmp_path, marker, capsys
):
    lock = tmp_path / "dataflex.lock"
    capsys.readouterr()
    assert cli_main(["lock", "-o", str(lock)]) == 2
    err = capsys.readouterr().err
    assert (
        "hs-outside==0.1.0: entry point hs_outside = hs_helper names module 'hs_helper', which hs-outside does not "
        "ship" in err
    )
    assert "ship that module in the distribution" in err
    assert not lock.exists()
    assert not marker.exists(), "the module outside the distribution was imported to list its components"


def test_a_lock_listing_such_an_entry_point_is_refused_by_verify_and_in_force(outside_plugin, tmp_path, marker, capsys):
    lock = tmp_path / "dataflex.lock"
    write_lock(installed_plugin_set(), lock)  # what an older `dataflex lock` wrote: the entry point, no file of it
    code, report = verify_json(lock, capsys)
    assert code == 1 and report["ok"] is False
    (row,) = [d for d in report["differences"] if d["difference"] == "entry point outside its distribution"]
    assert row["distribution"] == "hs-outside" and row["installed"] == "hs_outside = hs_helper"
    assert "names module 'hs_helper', which hs-outside does not ship" in row["detail"]
    assert not marker.exists(), "verify imported the code it was checking"

    with pytest.raises(PluginSetMismatch, match=r"entry point outside its distribution .*names module 'hs_helper'"):
        use_plugin_lock(lock, allow_drift=True)  # never drift: there is nothing locked to drift from
    assert "hs_helper" not in sys.modules and not marker.exists()


# -- a file planted in a locked plugin's namespace-package folder -------------------------------------------
def test_a_file_planted_in_a_locked_namespace_folder_is_reported_and_never_imported(pip_site, tmp_path, marker, capsys):
    only(pip_site, "hs-ns", "hs-other")
    lock = tmp_path / "dataflex.lock"
    assert cli_main(["lock", "-o", str(lock)]) == 0
    assert set(read_lock(lock).plugins["hs-ns"].files) == {"hs_ns/plugin/__init__.py"}
    fresh_process(pip_site)
    (pip_site.root / "hs_ns" / "planted.py").write_text(HOSTILE)
    (pip_site.root / "hs_ns" / "planted_pkg").mkdir()
    (pip_site.root / "hs_ns" / "planted_pkg" / "__init__.py").write_text(HOSTILE)

    code, report = verify_json(lock, capsys)
    assert code == 1
    (row,) = report["differences"]
    assert (row["distribution"], row["difference"]) == ("hs-ns", "content changed")
    assert row["detail"] == "added hs_ns/planted.py; added hs_ns/planted_pkg/__init__.py"

    with pytest.warns(PluginDriftWarning):
        manager = use_plugin_lock(lock, allow_drift=True)  # drift lets locked bytes differ, never adds files
    assert manager.registry().get("scorer", "hs_ns_length") is not None
    for planted in ("hs_ns.planted", "hs_ns.planted_pkg"):
        with pytest.raises(ModuleNotFoundError, match=f"No module named '{planted}' among the checked files of hs-ns"):
            importlib.import_module(planted)
    assert not marker.exists()
    assert importlib.import_module("hs_ns.other").VALUE == 2  # another distribution's file there stays importable
