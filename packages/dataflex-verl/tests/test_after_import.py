"""The post-import hook dataflex-verl's plugin entry and the CPU harness share (``dataflex_verl.after_import``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dataflex_verl import after_import


@pytest.fixture
def hook(tmp_path, monkeypatch):
    """A private wait list and meta path (verl's own waiting modules stay untouched), and two importable modules."""
    monkeypatch.setattr(after_import, "_waiting", {})
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    while after_import._FINDER in sys.meta_path:
        sys.meta_path.remove(after_import._FINDER)
    for name, body in (("dataflex_waited_a", "VALUE = 1\n"), ("dataflex_waited_b", "VALUE = 10\n")):
        (tmp_path / f"{name}.py").write_text(body)
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield after_import
    for name in ("dataflex_waited_a", "dataflex_waited_b"):
        sys.modules.pop(name, None)


def test_actions_run_after_their_modules_body_and_the_finder_leaves_when_nothing_waits(hook):
    seen = []
    hook.when_imported("dataflex_waited_a", lambda module: seen.append(("a", module.VALUE)))
    hook.when_imported("dataflex_waited_a", lambda module: seen.append(("a2", module.VALUE + 1)))
    hook.when_imported("dataflex_waited_b", lambda module: seen.append(("b", module.VALUE)))
    assert seen == [] and sys.meta_path[0] is hook._FINDER
    assert hook.waiting() == ["dataflex_waited_a", "dataflex_waited_b"]

    import dataflex_waited_a  # noqa: F401

    assert seen == [("a", 1), ("a2", 2)]  # in the order asked, each seeing the module's finished body
    assert hook.waiting() == ["dataflex_waited_b"] and hook._FINDER in sys.meta_path  # b still waits

    import dataflex_waited_b  # noqa: F401

    assert seen[2:] == [("b", 10)] and hook.waiting() == [] and hook._FINDER not in sys.meta_path


def test_an_action_for_a_module_already_imported_runs_at_once_without_a_finder(hook):
    import dataflex_waited_a  # noqa: F401

    seen = []
    hook.when_imported("dataflex_waited_a", lambda module: seen.append(module.VALUE))
    assert seen == [1] and hook.waiting() == [] and hook._FINDER not in sys.meta_path


def test_a_module_nothing_waits_for_is_loaded_by_its_own_loader(hook):
    hook.when_imported("dataflex_waited_b", lambda module: None)
    import dataflex_waited_a

    assert type(dataflex_waited_a.__spec__.loader).__name__ != "_ThenLoader" and hook.waiting() == ["dataflex_waited_b"]


def test_the_plugin_entry_waits_through_this_hook():
    """In a fresh process without verl imported: every verl module the plugin entry patches waits here, behind
    one finder (this module's), and none other of dataflex-verl's."""
    code = (
        "import sys\n"
        "from dataflex_verl import after_import, plugin_entry\n"
        "assert 'verl' not in sys.modules, sorted(m for m in sys.modules if m.startswith('verl'))\n"
        "assert after_import.waiting() == list(plugin_entry.AFTER_IMPORT), after_import.waiting()\n"
        "ours = [type(f).__module__ for f in sys.meta_path if type(f).__module__.startswith('dataflex_verl')]\n"
        "assert ours == ['dataflex_verl.after_import'], ours\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
