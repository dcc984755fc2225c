"""Lock files: format, comparison rows, and enforcement of a lock at plugin load time.

The plugins here are real wheels installed by pip, once for the module, into a
throwaway virtualenv whose site-packages is the tests' whole environment (the
testing kit's :class:`~dataflex_lab.testing.plugin_sites.PipSite`), so RECORD,
INSTALLER and friends are what pip writes in production. Each test starts from
that install; a distribution a test must not see is hidden from
``importlib.metadata`` (:meth:`~dataflex_lab.testing.plugin_sites.PipSite.hide`).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import dataflex_core
import dataflex_core as plugin_module
from dataflex_core import PluginLoadError, get_plugin_manager, use_plugin_lock
from dataflex_core.cli import main as cli_main
from dataflex_core.lock import (
    CORE_DIST,
    DistRecord,
    LockFileError,
    PluginDriftWarning,
    PluginSet,
    PluginSetMismatch,
    compare,
    enforce,
    format_differences,
    lock_environment,
    parse_lock,
    read_lock,
    scan_environment,
    write_lock,
)
from dataflex_lab.testing import plugin_sites
from dataflex_lab.testing.plugin_sites import EXTRA_PLUGIN as EXTRA
from dataflex_lab.testing.plugin_sites import LENGTH_PLUGIN as GOOD
from dataflex_lab.testing.plugin_sites import TRIPWIRE_PLUGIN as TRIPWIRE

#: A plugin that fails to import without touching its files, as one whose dependency is not installed does.
MISSING_DEPENDENCY = "import lk_absent_dependency  # noqa: F401\n"
#: Every distribution the module installs: ``(dist, version, files, entry points)``.
INSTALLED = [
    (dist, version, {f"{module}/__init__.py": source}, {module: module})
    for dist, version, module, source in (
        ("lk-good", "0.1.0", "lk_good", GOOD),
        ("lk-extra", "0.5.0", "lk_extra", EXTRA),
        ("lk-tripwire", "0.1.0", "lk_tripwire", TRIPWIRE),
        ("lk-broken", "0.1.0", "lk_broken", MISSING_DEPENDENCY),
    )
]
OTHERS = ("lk-extra", "lk-tripwire", "lk-broken")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """One throwaway site for the module: every plugin its tests use, installed by one pip run."""
    with pytest.MonkeyPatch.context() as mp:
        with plugin_sites.pip_site(tmp_path_factory.mktemp("lock"), mp, alone=True) as site:
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


@pytest.fixture
def locked(pip_site, tmp_path):
    """``lk-good 0.1.0`` the one plugin installed, and the environment locked into ``dataflex.lock``."""
    pip_site.hide(*OTHERS)
    path = tmp_path / "dataflex.lock"
    assert cli_main(["lock", "-o", str(path)]) == 0
    # a job runs in a process of its own, not in the one that wrote the lock
    pip_site.forget_modules()
    plugin_module.reset_plugin_manager()
    return path


def _verify(path: Path, capsys, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli_main(["verify", str(path), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def _rows(report: dict, dist: str) -> list[tuple[str, str, str]]:
    return [(d["difference"], d["locked"], d["installed"]) for d in report["differences"] if d["distribution"] == dist]


# -- lock then verify ----------------------------------------------------------------
def test_lock_records_version_entry_points_components_and_file_hashes(locked):
    plugin_set = read_lock(locked)
    record = plugin_set.plugins["lk-good"]
    assert record.version == "0.1.0"
    assert dict(record.entry_points) == {"lk_good": "lk_good"}
    assert dict(record.components) == {"scorer": ("lk_length",)}
    assert not record.editable
    # the hash covers the installed code by its bytes, and nothing pip or the interpreter adds
    assert set(record.files) == {"lk_good/__init__.py"}
    assert record.files["lk_good/__init__.py"] == hashlib.sha256(GOOD.encode()).hexdigest()
    assert plugin_set.core_version == dataflex_core.__version__


def test_lock_then_verify_passes_and_relocking_gives_the_identical_file(locked, tmp_path, capsys):
    code, report = _verify(locked, capsys)
    assert (code, report["ok"], report["differences"]) == (0, True, [])
    again = tmp_path / "again.lock"
    assert cli_main(["lock", "-o", str(again)]) == 0
    assert again.read_text() == locked.read_text()


def test_compiled_bytecode_does_not_change_the_hash(locked, pip_site, capsys):
    get_plugin_manager().registry()  # imports lk_good, which may write __pycache__
    import compileall
    import importlib.util

    compileall.compile_dir(str(pip_site.root), quiet=1)
    assert Path(importlib.util.cache_from_source(str(pip_site.file("lk_good")))).is_file()  # where Python reads it
    code, report = _verify(locked, capsys)
    assert code == 0, report


def test_an_extra_installed_plugin_fails_verify_as_unexpected(locked, pip_site, capsys):
    pip_site.show("lk-extra")
    code, report = _verify(locked, capsys)
    assert code == 1
    assert _rows(report, "lk-extra") == [("unexpected", "-", "0.5.0")]
    assert _rows(report, "lk-good") == []


def test_an_edited_installed_file_fails_verify_naming_the_file(locked, pip_site, capsys):
    target = pip_site.file("lk_good")
    target.write_text(target.read_text() + "\nprint('patched')\n")
    code, report = _verify(locked, capsys)
    assert code == 1
    (row,) = [d for d in report["differences"] if d["distribution"] == "lk-good"]
    assert row["difference"] == "content changed"
    assert row["detail"] == "modified lk_good/__init__.py"


def test_a_deleted_installed_file_is_a_content_change(locked, pip_site, capsys):
    pip_site.file("lk_good").unlink()
    code, report = _verify(locked, capsys)
    assert code == 1
    details = {d["difference"]: d["detail"] for d in report["differences"] if d["distribution"] == "lk-good"}
    assert details["content changed"] == "removed lk_good/__init__.py"


def test_an_uninstalled_plugin_is_missing(locked, pip_site, capsys):
    pip_site.hide("lk-good")  # what importlib.metadata sees once pip uninstalled it
    code, report = _verify(locked, capsys)
    assert code == 1
    assert _rows(report, "lk-good") == [("missing", "0.1.0", "-")]


def test_an_upgrade_is_a_version_row_allow_drift_accepts_and_verify_prints_a_table(locked, pip_site, capsys):
    pip_site.install("lk-good", "0.2.0", "lk_good", GOOD + "\n# 0.2.0\n")  # pip really upgrades
    code, report = _verify(locked, capsys)
    assert code == 1
    assert [row[0] for row in _rows(report, "lk-good")] == ["version changed", "content changed"]
    assert _rows(report, "lk-good")[0] == ("version changed", "0.1.0", "0.2.0")
    code, report = _verify(locked, capsys, "--allow-drift")
    assert code == 0 and report["ok"]
    assert {d["difference"] for d in report["differences"]} == {"version changed", "content changed"}
    pip_site.show("lk-extra")
    code, _ = _verify(locked, capsys, "--allow-drift")
    assert code == 1
    capsys.readouterr()
    assert cli_main(["verify", str(locked)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["difference", "distribution", "locked", "installed", "detail"]
    assert any(line.split()[:4] == ["unexpected", "lk-extra", "-", "0.5.0"] for line in lines)
    assert any(line.split()[:5] == ["version", "changed", "lk-good", "0.1.0", "0.2.0"] for line in lines)


def test_verify_reads_the_lock_path_from_the_environment_variable(locked, monkeypatch, capsys):
    monkeypatch.setenv(dataflex_core.ENV_PLUGINS_LOCK, str(locked))
    assert cli_main(["verify"]) == 0
    assert str(locked) in capsys.readouterr().out


def test_verify_of_a_missing_lock_says_how_to_create_it(tmp_path, capsys):
    assert cli_main(["verify", str(tmp_path / "nope.lock")]) == 2
    assert "dataflex lock -o" in capsys.readouterr().err


def test_requirements_pin_core_and_every_plugin(locked, tmp_path, capsys):
    capsys.readouterr()
    assert cli_main(["lock", "--requirements"]) == 0
    pins = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert f"{CORE_DIST}=={dataflex_core.__version__}" in pins
    assert "lk-good==0.1.0" in pins
    # from the reviewed lock rather than from whatever is installed now
    assert cli_main(["lock", "--requirements", "--from", str(locked), "-o", str(tmp_path / "pins.txt")]) == 0
    from_lock = (tmp_path / "pins.txt").read_text().splitlines()
    assert "lk-good==0.1.0" in from_lock
    assert (
        len([line for line in from_lock if "==" in line and not line.startswith("#")])
        == len(read_lock(locked).plugins) + 1
    )


def test_a_plugin_that_fails_to_import_cannot_be_locked(pip_site, tmp_path, capsys):
    pip_site.hide("lk-extra", "lk-broken")
    assert cli_main(["lock", "-o", str(tmp_path / "x.lock")]) == 2
    err = capsys.readouterr().err
    assert "lk-tripwire==0.1.0" in err and "RuntimeError" in err
    assert not (tmp_path / "x.lock").exists()


def test_a_checkpoint_of_a_run_with_a_broken_plugin_resumes_and_a_newly_broken_one_is_named(pip_site, tmp_path):
    # the checkpoint record is written in the lock format from the run's scan, broken plugin included
    pip_site.hide("lk-extra", "lk-tripwire")
    recorded_run = scan_environment()
    assert "ModuleNotFoundError" in recorded_run.plugins["lk-broken"].load_error
    write_lock(recorded_run, tmp_path / "record.lock")
    recorded = read_lock(tmp_path / "record.lock")
    assert recorded.plugins["lk-broken"].load_error == recorded_run.plugins["lk-broken"].load_error
    pip_site.forget_modules()
    plugin_module.reset_plugin_manager()
    # the resume fails the same way: nothing differs from the run that wrote the checkpoint
    assert compare(recorded, scan_environment()) == []
    # a plugin that imported when the checkpoint was written and fails now is still a difference
    healthy = PluginSet(
        core_version=recorded.core_version,
        plugins={**recorded.plugins, "lk-broken": replace(recorded.plugins["lk-broken"], load_error=None)},
    )
    pip_site.forget_modules()
    plugin_module.reset_plugin_manager()
    rows = compare(healthy, scan_environment())
    assert [(r.kind, r.dist) for r in rows] == [("load_failed", "lk-broken")]
    assert "lk_absent_dependency" in rows[0].detail


# -- enforcement: an unlisted plugin is never imported ----------------------------------
def test_a_locked_process_never_imports_an_unlisted_plugin(locked, pip_site, monkeypatch, capsys):
    pip_site.show("lk-tripwire")
    marker = pip_site.root / "lk_tripwire" / "IMPORTED"
    monkeypatch.setenv(dataflex_core.ENV_PLUGINS_LOCK, str(locked))
    plugin_module.reset_plugin_manager()
    manager = get_plugin_manager()
    assert manager.registry().get("scorer", "lk_length") is not None
    assert "lk_tripwire" not in sys.modules and not marker.exists()
    assert not manager.failures
    # verify reports it, still without importing it
    code, report = _verify(locked, capsys)
    assert code == 1 and _rows(report, "lk-tripwire") == [("unexpected", "-", "0.1.0")]
    assert not marker.exists()
    # the tripwire works: without the lock the plugin is imported
    monkeypatch.delenv(dataflex_core.ENV_PLUGINS_LOCK)
    plugin_module.reset_plugin_manager()
    with pytest.warns(dataflex_core.PluginLoadWarning, match="lk_tripwire"):
        get_plugin_manager()
    assert marker.exists()


def test_use_plugin_lock_restricts_the_process_wide_manager(locked, pip_site):
    pip_site.show("lk-extra")
    manager = use_plugin_lock(locked)
    assert manager is get_plugin_manager()
    assert manager.only_dists is not None and "lk-good" in manager.only_dists
    registry = manager.registry()
    assert registry.get("scorer", "lk_length") is not None
    assert registry.get("scorer", "lk_extra") is None and "lk_extra" not in sys.modules


def test_use_plugin_lock_refuses_after_an_unlisted_plugin_was_imported(locked, pip_site):
    pip_site.show("lk-extra")
    get_plugin_manager()  # no lock yet: imports everything, lk_extra included
    with pytest.raises(PluginLoadError, match=r"lk-extra.*DATAFLEX_PLUGINS_LOCK"):
        use_plugin_lock(locked)


def test_a_lock_env_var_naming_a_missing_file_fails_closed(monkeypatch, tmp_path, pip_site):
    monkeypatch.setenv(dataflex_core.ENV_PLUGINS_LOCK, str(tmp_path / "absent.lock"))
    with pytest.raises(LockFileError, match="does not exist"):
        get_plugin_manager()


# -- the file format and the comparison, without installs --------------------------------
def _record(name="p", version="1.0", files=None, components=None, eps=None):
    return DistRecord(
        name=name,
        version=version,
        entry_points=eps if eps is not None else {name: name},
        components=components if components is not None else {"scorer": ("s",)},
        files=files if files is not None else {f"{name}/__init__.py": "aa"},
    )


def test_toml_round_trips_awkward_strings():
    odd = 'we"ird\\name\twith\nnewline\x01é'
    plugin_set = PluginSet(
        core_version="0.1.0",
        plugins={"p": _record(files={odd: "ab", "p/x.py": "cd"}, eps={"ep": "mod:obj"}, components={"mixer": ("m",)})},
    )
    text = plugin_set.to_toml()
    assert parse_lock(text) == plugin_set
    assert text == parse_lock(text).to_toml()


def test_lock_text_is_sorted_so_it_diffs_cleanly():
    a = PluginSet("0.1.0", {"b": _record("b"), "a": _record("a")})
    b = PluginSet("0.1.0", {"a": _record("a"), "b": _record("b")})
    assert a.to_toml() == b.to_toml()
    assert a.to_toml().index("[plugins.a]") < a.to_toml().index("[plugins.b]")


def test_a_hand_edited_hash_or_format_is_rejected_with_the_fix(tmp_path):
    text = PluginSet("0.1.0", {"p": _record()}).to_toml()
    with pytest.raises(LockFileError, match=r"content_hash.*regenerate"):
        parse_lock(text.replace('"aa"', '"bb"'))
    with pytest.raises(LockFileError, match=r"lock_version=2"):
        parse_lock(text.replace("lock_version = 1", "lock_version = 2"))
    with pytest.raises(LockFileError, match=r"version must be a version \(PEP 440"):
        parse_lock(text.replace('version = "1.0"', "version = 1"))
    with pytest.raises(LockFileError, match="not valid TOML"):
        parse_lock("[[[")
    path = tmp_path / "l.lock"
    write_lock(PluginSet("0.1.0", {"p": _record()}), path)
    assert read_lock(path).plugins["p"].version == "1.0"


def test_compare_gives_one_row_per_kind_of_difference():
    expected = PluginSet("0.1.0", {"gone": _record("gone"), "p": _record("p")})
    actual = PluginSet(
        "0.2.0",
        {
            "new": _record("new"),
            "p": _record(
                "p", version="2.0", files={"p/__init__.py": "zz"}, eps={"p": "p2"}, components={"scorer": ("t",)}
            ),
        },
    )
    rows = [(d.label, d.dist) for d in compare(expected, actual)]
    assert rows == [
        ("version changed", CORE_DIST),
        ("missing", "gone"),
        ("unexpected", "new"),
        ("version changed", "p"),
        ("content changed", "p"),
        ("entry points changed", "p"),
        ("components changed", "p"),
    ]
    table = format_differences(compare(expected, actual))
    assert "modified p/__init__.py" in table and "p=p2" in table


def test_the_verify_table_escapes_control_characters_so_a_file_name_forges_no_row():
    from dataflex_core.lock.compare import Difference

    forged = Difference("content", "p", "1.0", "1.0", "modified p/x.py\n  missing  evil  1.0  -  planted\x1b[8m")
    lines = format_differences([forged]).splitlines()
    assert len(lines) == 2 and "\x1b" not in lines[1] and lines[1].endswith("planted\\x1b[8m")
    assert "x.py\\n  missing" in lines[1]  # the name is shown, escaped, in its own cell


def test_enforce_raises_on_any_refused_difference_and_warns_on_accepted_drift():
    expected = PluginSet("0.1.0", {"p": _record("p")})
    drifted = PluginSet("0.1.0", {"p": _record("p", version="1.1", files={"p/__init__.py": "bb"})})
    with pytest.raises(PluginSetMismatch) as info:
        enforce(expected, drifted, expected_from="prod.lock")
    assert {d.kind for d in info.value.differences} == {"version", "content"}
    assert "prod.lock" in str(info.value)
    with pytest.warns(PluginDriftWarning, match="version changed"):
        accepted = enforce(expected, drifted, allow_drift=True)
    assert len(accepted) == 2
    extra = PluginSet("0.1.0", {"p": _record("p"), "q": _record("q")})
    with pytest.raises(PluginSetMismatch, match="unexpected"):
        enforce(expected, extra, allow_drift=True)
    assert enforce(expected, expected) == []


def test_scan_without_imports_lists_no_components(locked, pip_site):
    pip_site.forget_modules()  # `dataflex lock` imported it
    plugin_set = scan_environment(load=())
    assert plugin_set.plugins["lk-good"].components is None
    assert "lk_good" not in sys.modules
    assert compare(read_lock(locked), plugin_set) == []
    assert lock_environment().plugins["lk-good"].components == {"scorer": ("lk_length",)}


def test_an_editable_install_is_hashed_from_its_source_tree(pip_site, tmp_path, monkeypatch, capsys):
    pip_site.hide("lk-good", *OTHERS)
    # the layout setuptools' editable install leaves: a dist-info naming the project, code in the source tree
    src = tmp_path / "project" / "src"
    (src / "lk_edit" / "sub").mkdir(parents=True)
    (src / "lk_edit" / "__init__.py").write_text(GOOD.replace("lk_length", "lk_edit_length"))
    (src / "lk_edit" / "sub" / "data.json").write_text("{}")
    info = pip_site.root / "lk_edit-0.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lk-edit\nVersion: 0.3.0\n")
    (info / "entry_points.txt").write_text("[dataflex]\nlk_edit = lk_edit\n")
    (info / "direct_url.json").write_text(json.dumps({"dir_info": {"editable": True}, "url": src.parent.as_uri()}))
    (info / "RECORD").write_text("__editable__.lk_edit-0.3.0.pth,,\nlk_edit-0.3.0.dist-info/RECORD,,\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(src)])
    pip_site.modules.add("lk_edit")
    path = tmp_path / "dataflex.lock"
    assert cli_main(["lock", "-o", str(path)]) == 0
    record = read_lock(path).plugins["lk-edit"]
    assert record.editable and dict(record.components) == {"scorer": ("lk_edit_length",)}
    assert set(record.files) == {"lk_edit/__init__.py", "lk_edit/sub/data.json"}  # no __pycache__
    (src / "lk_edit" / "sub" / "data.json").write_text('{"changed": true}')
    code, report = _verify(path, capsys)
    assert code == 1
    assert [d["detail"] for d in report["differences"]] == ["modified lk_edit/sub/data.json"]


# -- issue 15: locks in production -------------------------------------------------------
def test_an_unexpected_plugin_gets_the_uninstall_hint_not_the_restore_hint(locked, pip_site, capsys):
    pip_site.show("lk-extra")
    capsys.readouterr()
    assert cli_main(["verify", str(locked)]) == 1
    err = capsys.readouterr().err
    assert "pip uninstall -y lk-extra" in err and "--force-reinstall" not in err


def test_under_a_lock_an_installed_unlocked_plugin_is_named_as_such(locked, pip_site, monkeypatch):
    pip_site.show("lk-extra")
    monkeypatch.setenv(dataflex_core.ENV_PLUGINS_LOCK, str(locked))
    plugin_module.reset_plugin_manager()
    with pytest.raises(dataflex_core.UnknownComponentError) as info:
        dataflex_core.build_from_config({"scorer": "lk_extra", "actuator": "whatever"})
    message = str(info.value)
    assert "'lk_extra' is not in the locked plugin set" in message
    assert "installed but not in the plugin lock" in message and "lk-extra==0.5.0" in message
    assert f"dataflex lock -o {locked}" in message and "pip install" not in message
    assert "lk_extra" not in sys.modules


def test_under_a_lock_a_modified_locked_plugin_is_refused_before_it_is_imported(locked, pip_site, monkeypatch):
    target = pip_site.file("lk_good")
    target.write_text(TRIPWIRE)  # importing it now leaves a marker
    marker = pip_site.root / "lk_good" / "IMPORTED"
    monkeypatch.setenv(dataflex_core.ENV_PLUGINS_LOCK, str(locked))
    plugin_module.reset_plugin_manager()
    with pytest.raises(PluginSetMismatch) as info:
        get_plugin_manager()
    assert "content changed" in str(info.value) and "modified lk_good/__init__.py" in str(info.value)
    assert "no plugin was imported" in str(info.value) and "--force-reinstall" in str(info.value)
    assert not marker.exists()
    # the same through the function hosts call with a lock from their own config
    plugin_module.reset_plugin_manager()
    with pytest.raises(PluginSetMismatch):
        use_plugin_lock(locked)
    assert not marker.exists()
    # and `dataflex verify` reports it from its hashes without importing it
    assert cli_main(["verify", str(locked)]) == 1
    assert not marker.exists()
    # `dataflex plugins` (and anything else that loads plugins under the lock) refuses the same way
    plugin_module.reset_plugin_manager()
    assert cli_main(["plugins"]) == 1
    assert not marker.exists()


def test_allow_drift_lets_a_host_run_a_drifted_locked_plugin_with_a_warning(locked, pip_site):
    target = pip_site.file("lk_good")
    target.write_text(target.read_text() + "\n# local fix\n")
    with pytest.warns(PluginDriftWarning, match="content changed"):
        manager = use_plugin_lock(locked, allow_drift=True)
    assert manager.registry().get("scorer", "lk_length") is not None


def test_one_name_for_the_lock_file_everywhere(pip_site, tmp_path, monkeypatch, capsys):
    from dataflex_core.cli import build_parser
    from dataflex_core.lock import DEFAULT_LOCK_FILE

    pip_site.hide(*OTHERS)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["lock"]) == 0
    assert (tmp_path / DEFAULT_LOCK_FILE).exists()
    assert cli_main(["verify"]) == 0
    helps = build_parser().format_help() + "".join(
        a.format_help() for a in build_parser()._subparsers._group_actions[0].choices.values()
    )
    assert DEFAULT_LOCK_FILE in helps and "dataflex.lock " not in helps
    capsys.readouterr()
    assert cli_main(["verify", "missing-" + DEFAULT_LOCK_FILE]) == 2
    assert f"dataflex lock -o missing-{DEFAULT_LOCK_FILE}" in capsys.readouterr().err


def test_the_lock_builds_on_discovery_and_discovery_never_reaches_the_lock():
    """No import cycle: discovery imports nothing from ``dataflex_core.lock`` (the process's manager, held to a
    lock, is the lock's), and each module imports on its own in a fresh process."""
    import ast

    from dataflex_core import discovery

    tree = ast.parse(Path(discovery.__file__).read_text(encoding="utf-8"))
    imported = [(n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m.split(".")[0] == "lock"], imported
    for module in ("dataflex_core.discovery", "dataflex_core.lock", "dataflex_core.lock.pinning", "dataflex_core.cli"):
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
