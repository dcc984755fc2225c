"""The lock against code it never hashed: entry points outside their distribution, import hooks, planted files.

Second round of hostile cases (issue 39, items 1-4). As in ``test_lock_hostile``,
the plugins are real wheels pip installed into a throwaway site-packages (the
testing kit's ``pip_site``) and :data:`HOSTILE` code leaves a marker file when
it runs, so every case shows that the planted code ran nowhere.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.machinery
import json
import os
import sys
import types
from pathlib import Path

import pytest

import dataflex_core as plugin_module
from dataflex_core import PluginLoadError, use_plugin_lock
from dataflex_core.cli import main as cli_main
from dataflex_core.lock import PluginDriftWarning, PluginSetMismatch, installed_plugin_set, read_lock, write_lock
from dataflex_core.lock.importer import checked_modules
from dataflex_lab.testing.hostile import HOSTILE

SCORERS = """
from dataflex_core import Scorer, register_scorer

BEHAVIOUR = "locked"


@register_scorer("hs_length")
class LengthScorer(Scorer):
    def score(self, batch, step_id, **ctx):
        return batch.batch["response_mask"].sum(-1).float()
"""
PACKAGE = {"hs_good/__init__.py": "from . import scorers  # noqa: F401\n", "hs_good/scorers.py": SCORERS}


def fresh_process(pip_site) -> None:
    """What a job's new process starts from: no plugin module imported, no manager, no lock finder."""
    pip_site.forget_modules()
    plugin_module.reset_plugin_manager()


def verify_json(lock: Path, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli_main(["verify", str(lock), "--json"])
    return code, json.loads(capsys.readouterr().out)


# -- 1. an entry point naming a module its distribution does not ship ------------------------------------
@pytest.fixture(params=["another distribution", "the job's folder"])
def outside_plugin(request, pip_site, tmp_path, monkeypatch, marker) -> str:
    """``hs-good``, whose entry point names ``hs_helper``: hostile code it does not ship; returns where it is."""
    helper = HOSTILE + SCORERS
    if request.param == "another distribution":  # a plain library, no plugin: no lock covers it
        pip_site.install_files("hs-helper", "0.1.0", {"hs_helper/__init__.py": helper}, {})
    else:
        job = tmp_path / "job"
        job.mkdir()
        (job / "hs_helper.py").write_text(helper)
        monkeypatch.setattr(sys, "path", [str(job), *sys.path])  # python train.py puts the script's folder first
        importlib.invalidate_caches()
    pip_site.install_files("hs-good", "0.1.0", PACKAGE, {"hs_good": "hs_helper"})
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
        "hs-good==0.1.0: entry point hs_good = hs_helper names module 'hs_helper', which hs-good does not ship" in err
    )
    assert "ship that module in the distribution" in err
    assert not lock.exists()
    assert not marker.exists(), "the module outside the distribution was imported to list its components"


def test_a_lock_listing_such_an_entry_point_is_refused_by_verify_and_in_force(
    outside_plugin, pip_site, tmp_path, marker, capsys
):
    lock = tmp_path / "dataflex.lock"
    write_lock(installed_plugin_set(), lock)  # what an older `dataflex lock` wrote: the entry point, no file of it
    code, report = verify_json(lock, capsys)
    assert code == 1 and report["ok"] is False
    (row,) = [d for d in report["differences"] if d["difference"] == "entry point outside its distribution"]
    assert row["distribution"] == "hs-good" and row["installed"] == "hs_good = hs_helper"
    assert "names module 'hs_helper', which hs-good does not ship" in row["detail"]
    assert not marker.exists(), "verify imported the code it was checking"

    with pytest.raises(PluginSetMismatch, match=r"entry point outside its distribution .*names module 'hs_helper'"):
        use_plugin_lock(lock, allow_drift=True)  # never drift: there is nothing locked to drift from
    assert "hs_helper" not in sys.modules and not marker.exists()


# -- 2. a locked plugin that installs an import hook when it is imported -----------------------------------
FINDER_PLUGIN = """
import importlib.abc
import importlib.util
import os
import sys


class PlantedLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(open(os.environ["HS_PLANTED"]).read(), module.__dict__)


class ServesAnotherPlugin(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, PlantedLoader()) if name == "hs_good.scorers" else None


sys.meta_path.insert(0, ServesAnotherPlugin())
if os.environ.get("HS_SERVE_NOW"):
    import hs_good.scorers  # noqa: F401  served at once, inside this plugin's own import
"""


@pytest.fixture
def finder_lock(pip_site, tmp_path, monkeypatch, marker) -> Path:
    """``hs-finder`` (imported first: its name sorts first) and ``hs-good``, both locked; ``hs-finder`` puts a
    finder in front of ``sys.meta_path`` that serves ``hs_good.scorers`` from a file nobody hashed."""
    planted = tmp_path / "planted_scorers.py"
    planted.write_text(HOSTILE + SCORERS.replace('"locked"', '"hostile"'))
    monkeypatch.setenv("HS_PLANTED", str(planted))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the finder goes when the test ends
    pip_site.install("hs-finder", "0.1.0", "hs_finder", FINDER_PLUGIN)
    pip_site.install_files("hs-good", "0.1.0", PACKAGE, {"hs_good": "hs_good"})
    lock = tmp_path / "dataflex.lock"
    saved = list(sys.meta_path)
    assert cli_main(["lock", "-o", str(lock)]) == 0
    sys.meta_path[:] = saved
    fresh_process(pip_site)
    return lock


def test_a_hook_a_locked_plugin_installs_at_import_never_serves_the_next_plugins_modules(finder_lock, marker):
    manager = use_plugin_lock(finder_lock)
    scorer = manager.registry().get("scorer", "hs_length")
    assert scorer is not None and sys.modules[scorer.cls.__module__].BEHAVIOUR == "locked"
    assert not marker.exists(), "the hook served hs_good.scorers from the planted file"
    assert sys.meta_path[0] is plugin_module.lock.CHECKED_IMPORTER


def test_a_locked_module_served_by_another_finder_during_an_import_is_refused(finder_lock, monkeypatch, capsys):
    monkeypatch.setenv("HS_SERVE_NOW", "1")
    with pytest.raises(PluginLoadError, match=(
        r"importing hs_finder \(hs-finder==0\.1\.0\) put locked modules into sys\.modules that did not come from "
        r"their checked files: hs_good\.scorers \(hs-good\) from an unknown location"
    )):  # fmt: skip
        use_plugin_lock(finder_lock)
    fresh_process_after_refusal(monkeypatch)
    capsys.readouterr()
    assert cli_main(["lock", "-o", "-"]) == 2  # nor can it be locked: its components came from unhashed code
    assert "hs-finder==0.1.0: hs_finder: PluginLoadError: importing hs_finder" in capsys.readouterr().err


def fresh_process_after_refusal(monkeypatch) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in {"hs_finder", "hs_good"}]:
        monkeypatch.delitem(sys.modules, name)
    plugin_module.reset_plugin_manager()


# -- 3. start-up code: forged sys.modules entries, a replaced builtins.__import__ ----------------------------
@pytest.fixture
def good_lock(pip_site, tmp_path) -> Path:
    pip_site.install_files("hs-good", "0.1.0", PACKAGE, {"hs_good": "hs_good"})
    lock = tmp_path / "dataflex.lock"
    assert cli_main(["lock", "-o", str(lock)]) == 0
    fresh_process(pip_site)
    return lock


def test_a_module_pre_seeded_with_a_forged_checked_file_record_is_refused(good_lock, monkeypatch):
    # what a .pth file can do before any lock is read: the record the lock would compare, computed from the files
    (record,) = installed_plugin_set(only=["hs-good"]).plugins.values()
    checked, _ = checked_modules(record)
    for name, code in (("hs_good.scorers", SCORERS.replace('"locked"', '"hostile"')), ("hs_good", "")):
        forged = types.ModuleType(name)
        loader = types.SimpleNamespace(checked=checked[name])
        forged.__spec__ = importlib.machinery.ModuleSpec(name, loader, origin=checked[name].path)
        forged.__file__ = checked[name].path
        exec(code, forged.__dict__)
        monkeypatch.setitem(sys.modules, name, forged)
    sys.modules["hs_good"].scorers = sys.modules["hs_good.scorers"]
    with pytest.raises(PluginLoadError, match=(
        r"imported before the lock was in force, so the code that ran was never checked: .*"
        r"hs_good\.scorers \(hs-good\) from .*hs_good/scorers\.py"
    )):  # fmt: skip
        use_plugin_lock(good_lock)


def test_a_replaced_builtins_import_is_refused(good_lock, monkeypatch, marker):
    original = builtins.__import__

    def hostile_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "hs_good" or fromlist == ("scorers",):
            Path(os.environ["HS_MARKER"]).write_text("a replaced __import__ ran")
        return original(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", hostile_import)
    with pytest.raises(PluginLoadError, match=r"builtins\.__import__ was replaced \(it is <function .*hostile_import"):
        use_plugin_lock(good_lock)
    assert not marker.exists(), "a plugin was imported through the replaced __import__"


# -- 4. a file planted in a locked plugin's namespace-package folder -----------------------------------------
NS_SCORERS = SCORERS.replace("hs_length", "hs_ns_length")


def test_a_file_planted_in_a_locked_namespace_folder_is_reported_and_never_imported(pip_site, tmp_path, marker, capsys):
    pip_site.install_files("hs-ns", "0.1.0", {"hs_ns/plugin/__init__.py": NS_SCORERS}, {"hs_ns": "hs_ns.plugin"})
    pip_site.install_files("hs-other", "0.1.0", {"hs_ns/other.py": "VALUE = 2\n"}, {})  # a portion, not a plugin
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
