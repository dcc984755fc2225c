"""Entry-point discovery against distributions installed on sys.path for the test."""

import json

import pytest

import dataflex_core
from dataflex_core import (
    DuplicateComponentError,
    PluginLoadError,
    PluginLoadWarning,
    UnknownComponentError,
    build_from_config,
    get_plugin_manager,
)
from dataflex_core.cli import main as cli_main

DECORATOR_STYLE = """
    import torch
    from dataflex_core import Scorer, register_scorer

    @register_scorer("disc_length")
    class LengthScorer(Scorer):
        def score(self, batch, step_id, **ctx):
            return batch.batch["response_mask"].sum(-1).float()
"""

HOOKIMPL_STYLE = """
    import torch
    from dataflex_core import Reweighter, hookimpl, mean_one

    class Uniform(Reweighter):
        def act(self, scores, batch, **ctx):
            return mean_one(torch.ones_like(scores, dtype=torch.float32), batch)

    @hookimpl
    def dataflex_register_reweighters(register):
        register(Uniform, "disc_uniform")
"""

BROKEN = """
    raise ImportError("libfoo.so: cannot open shared object file")
"""

MISSPELLED_HOOK = """
    from dataflex_core import hookimpl

    @hookimpl
    def dataflex_register_scorer(register):
        pass
"""


def _install_good(site):
    site.add_dist("disc-decorated", "1.2.0", {"disc_decorated": DECORATOR_STYLE}, {"disc_decorated": "disc_decorated"})
    site.add_dist("disc-hooked", "0.3.1", {"disc_hooked": HOOKIMPL_STYLE}, {"disc_hooked": "disc_hooked"})


def test_both_registration_styles_are_discovered_with_their_distribution(fake_site, only_plugins):
    _install_good(fake_site)
    only_plugins("disc-decorated", "disc-hooked")
    registry = get_plugin_manager().registry()
    length = registry.get("scorer", "disc_length")
    uniform = registry.get("reweighter", "disc_uniform")
    assert (length.dist, length.version) == ("disc-decorated", "1.2.0")
    assert (uniform.dist, uniform.version) == ("disc-hooked", "0.3.1")
    pipeline = build_from_config({"scorer": "disc_length", "actuator": "disc_uniform"})
    assert pipeline.scorer_spec.label == "disc_length (disc-decorated==1.2.0)"


def test_entry_points_load_once_per_process(fake_site, only_plugins):
    _install_good(fake_site)
    only_plugins("disc-decorated", "disc-hooked")
    assert get_plugin_manager() is get_plugin_manager()


def test_a_broken_plugin_is_skipped_with_a_warning_and_the_others_still_work(fake_site, only_plugins):
    _install_good(fake_site)
    fake_site.add_dist("disc-broken", "9.9", {"disc_broken": BROKEN}, {"disc_broken": "disc_broken"})
    only_plugins("disc-decorated", "disc-hooked", "disc-broken")
    with pytest.warns(PluginLoadWarning) as caught:
        manager = get_plugin_manager()
    message = str(caught[0].message)
    assert "skipping plugin disc_broken (disc-broken==9.9)" in message
    assert "libfoo.so" in message
    assert manager.registry().get("scorer", "disc_length") is not None
    # a component that is missing because its plugin failed reports that original error
    with pytest.raises(UnknownComponentError, match="skipping plugin disc_broken .*libfoo.so") as info:
        build_from_config({"scorer": "disc_broken_scorer", "actuator": "disc_uniform"})
    assert isinstance(info.value.__cause__, ImportError)


def test_strict_mode_reraises(fake_site, only_plugins, monkeypatch):
    fake_site.add_dist("disc-broken", "9.9", {"disc_broken": BROKEN}, {"disc_broken": "disc_broken"})
    only_plugins("disc-broken")
    monkeypatch.setenv(dataflex_core.ENV_STRICT, "1")
    with pytest.raises(PluginLoadError, match="disc_broken \\(disc-broken==9.9\\)") as info:
        get_plugin_manager()
    assert isinstance(info.value.__cause__, ImportError)


def test_misspelled_hook_name_fails_that_plugin(fake_site, only_plugins):
    fake_site.add_dist("disc-typo", "1.0", {"disc_typo": MISSPELLED_HOOK}, {"disc_typo": "disc_typo"})
    only_plugins("disc-typo")
    with pytest.warns(PluginLoadWarning, match="unknown hook 'dataflex_register_scorer' \\(misspelled\\?\\)"):
        manager = get_plugin_manager()
    assert [f.plugin.dist for f in manager.failures] == ["disc-typo"]


def _install_clash(site):
    _install_good(site)
    clash = DECORATOR_STYLE.replace("LengthScorer", "OtherLength")
    site.add_dist("disc-clash", "2.0", {"disc_clash": clash}, {"disc_clash": "disc_clash"})


def test_a_name_two_distributions_register_is_unusable_and_everything_else_works(fake_site, only_plugins):
    _install_clash(fake_site)
    only_plugins("disc-decorated", "disc-hooked", "disc-clash")
    registry = get_plugin_manager().registry()
    assert registry.get("scorer", "disc_length") is None
    assert registry.get("reweighter", "disc_uniform") is not None
    message = registry.clash("scorer", "disc_length").message
    assert "scorer name 'disc_length' is registered twice" in message
    assert "disc-decorated==1.2.0" in message and "disc-clash==2.0" in message
    # naming the clashed component fails with that message; an unrelated pair still builds
    with pytest.raises(DuplicateComponentError, match="registered twice") as info:
        build_from_config({"scorer": "disc_length", "actuator": "disc_uniform"})
    assert "disc-decorated==1.2.0" in str(info.value) and "disc-clash==2.0" in str(info.value)
    pipeline = build_from_config(
        {"scorer": "disc_len2", "actuator": "disc_uniform"},
        registry=_with_scorer(registry, "disc_len2"),
    )
    assert pipeline.actuator_spec.dist == "disc-hooked"


def _with_scorer(registry, name):
    from dataflex_core import PluginInfo, Scorer

    class Other(Scorer):
        def score(self, batch, step_id, **ctx):
            return batch.batch["response_mask"].sum(-1).float()

    registry.add("scorer", name, Other, PluginInfo("local"))
    return registry


def test_cli_lists_every_plugin_with_a_clash_and_exits_non_zero(fake_site, only_plugins, capsys):
    _install_clash(fake_site)
    only_plugins("disc-decorated", "disc-hooked", "disc-clash")
    assert cli_main(["plugins"]) == 1
    captured = capsys.readouterr()
    assert "disc-hooked" in captured.out and "reweighter: disc_uniform" in captured.out
    assert "clash: scorer 'disc_length'" in captured.out
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "registered twice" in errors[0]
    assert cli_main(["plugins", "--json"]) == 1
    rows = {row["distribution"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["disc-clash"]["status"] == rows["disc-decorated"]["status"] == "clash"
    assert rows["disc-hooked"]["status"] == "loaded"


REGISTER_RAISES = """
    from dataflex_core import hookimpl

    @hookimpl
    def dataflex_register_scorers(register):
        raise RuntimeError("registry of disc_bad exploded")
"""


def test_a_plugin_whose_registration_hook_raises_is_skipped_not_fatal(fake_site, only_plugins, capsys):
    _install_good(fake_site)
    fake_site.add_dist("disc-bad", "0.1", {"disc_bad": REGISTER_RAISES}, {"disc_bad": "disc_bad"})
    only_plugins("disc-decorated", "disc-hooked", "disc-bad")
    manager = get_plugin_manager()
    assert manager.registry().get("scorer", "disc_length") is not None
    assert [f.plugin.dist for f in manager.all_failures] == ["disc-bad"]
    assert "registry of disc_bad exploded" in manager.all_failures[0].message
    assert cli_main(["plugins"]) == 1
    assert "disc_bad exploded" in capsys.readouterr().err


def test_the_registry_is_rebuilt_when_one_plugin_is_swapped_for_another(fake_site, only_plugins):
    _install_good(fake_site)
    only_plugins("disc-decorated", "disc-hooked")
    manager = get_plugin_manager()
    assert manager.registry().get("scorer", "disc_length") is not None
    from dataflex_core import hookimpl

    class Swap:
        @hookimpl
        def dataflex_register_scorers(self, register):
            from dataflex_core import Scorer

            class Swapped(Scorer):
                def score(self, batch, step_id, **ctx):
                    return batch.batch["response_mask"].sum(-1).float()

            register(Swapped, "disc_swapped")

    # same number of plugins and decorated classes before and after: a count-keyed cache stays stale
    manager.unregister(name="disc-decorated:disc_decorated[decorated]")
    manager.register(Swap(), name="swap")
    registry = manager.registry()
    assert registry.get("scorer", "disc_length") is None
    assert registry.get("scorer", "disc_swapped") is not None


def test_cli_with_strict_mode_prints_one_line_per_failure_and_the_traceback_only_with_v(
    fake_site, only_plugins, monkeypatch, capsys
):
    _install_good(fake_site)
    fake_site.add_dist("disc-broken", "9.9", {"disc_broken": BROKEN}, {"disc_broken": "disc_broken"})
    only_plugins("disc-decorated", "disc-hooked", "disc-broken")
    monkeypatch.setenv(dataflex_core.ENV_STRICT, "1")
    assert cli_main(["plugins"]) == 1
    captured = capsys.readouterr()
    assert "disc-decorated" in captured.out
    assert "Traceback" not in captured.err
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: skipping plugin disc_broken (disc-broken==9.9): ImportError: libfoo.so: cannot open shared object file"
    ]
    dataflex_core.reset_plugin_manager()
    assert cli_main(["plugins", "-v"]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_cli_with_a_lock_path_that_does_not_exist_prints_one_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(dataflex_core.ENV_PLUGINS_LOCK, str(tmp_path / "absent.lock"))
    dataflex_core.reset_plugin_manager()
    try:
        assert cli_main(["plugins"]) == 2
    finally:
        dataflex_core.reset_plugin_manager()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "absent.lock' does not exist; create it with `dataflex lock -o" in err[0]


def test_block_allow_and_disable_controls(fake_site, only_plugins, monkeypatch):
    _install_good(fake_site)
    only_plugins("disc-decorated", "disc-hooked")
    monkeypatch.setenv(dataflex_core.ENV_BLOCK_PLUGINS, "disc-hooked")
    registry = get_plugin_manager().registry()
    assert registry.get("scorer", "disc_length") is not None
    assert registry.get("reweighter", "disc_uniform") is None

    monkeypatch.delenv(dataflex_core.ENV_BLOCK_PLUGINS)
    monkeypatch.setenv(dataflex_core.ENV_ALLOW_PLUGINS, "disc_hooked")  # entry-point name works too
    dataflex_core.reset_plugin_manager()
    registry = get_plugin_manager().registry()
    assert registry.get("scorer", "disc_length") is None
    assert registry.get("reweighter", "disc_uniform") is not None

    monkeypatch.setenv(dataflex_core.ENV_DISABLE_AUTOLOAD, "1")
    dataflex_core.reset_plugin_manager()
    assert get_plugin_manager().plugin_infos == {}


def test_cli_lists_plugins_as_json_and_table(fake_site, only_plugins, capsys):
    _install_good(fake_site)
    fake_site.add_dist("disc-broken", "9.9", {"disc_broken": BROKEN}, {"disc_broken": "disc_broken"})
    only_plugins("disc-decorated", "disc-hooked", "disc-broken")
    assert cli_main(["plugins", "--json"]) == 1  # a plugin failed
    rows = {row["distribution"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["disc-decorated"]["components"] == {"scorer": ["disc_length"]}
    assert rows["disc-decorated"]["version"] == "1.2.0"
    assert rows["disc-hooked"]["components"] == {"reweighter": ["disc_uniform"]}
    assert rows["disc-broken"]["status"] == "failed" and "libfoo.so" in rows["disc-broken"]["error"]
    assert cli_main(["plugins"]) == 1
    table = capsys.readouterr().out
    assert "disc-decorated" in table and "scorer: disc_length" in table


def test_two_distributions_may_reuse_an_entry_point_name(fake_site, only_plugins):
    fake_site.add_dist("disc-one", "1.0", {"disc_one": DECORATOR_STYLE}, {"shared_name": "disc_one"})
    other = HOOKIMPL_STYLE.replace("disc_uniform", "disc_uniform_two")
    fake_site.add_dist("disc-two", "2.0", {"disc_two": other}, {"shared_name": "disc_two"})
    only_plugins("disc-one", "disc-two")
    registry = get_plugin_manager().registry()
    assert registry.get("scorer", "disc_length").dist == "disc-one"
    assert registry.get("reweighter", "disc_uniform_two").dist == "disc-two"


ONE_HOOK = """
    import torch
    from dataflex_core import Scorer, Selector, hookimpl

    class Ones(Scorer):
        name = "disc_ones"

        def score(self, batch, step_id, **ctx):
            return torch.ones(len(batch))

    class KeepAll(Selector):
        def act(self, scores, batch, **ctx):
            return torch.arange(len(scores))

    @hookimpl
    def dataflex_register_components(register):
        register(Ones)
        register(KeepAll, "disc_keep_all")
"""

ONE_HOOK_NOT_A_COMPONENT = """
    from dataflex_core import hookimpl

    class Plain:
        name = "disc_plain"

    @hookimpl
    def dataflex_register_components(register):
        register(Plain)
"""


def test_one_registration_hook_reads_each_component_kind_from_its_base_class(fake_site, only_plugins):
    fake_site.add_dist("disc-onehook", "0.2", {"disc_onehook": ONE_HOOK}, {"disc_onehook": "disc_onehook"})
    only_plugins("disc-onehook")
    registry = get_plugin_manager().registry()
    assert registry.get("scorer", "disc_ones").dist == "disc-onehook"
    assert registry.get("selector", "disc_keep_all").dist == "disc-onehook"
    assert registry.find_kind("disc_ones") == ["scorer"]


def test_one_registration_hook_refuses_a_class_with_no_component_base(fake_site, only_plugins):
    fake_site.add_dist("disc-plain", "0.1", {"disc_plain": ONE_HOOK_NOT_A_COMPONENT}, {"disc_plain": "disc_plain"})
    only_plugins("disc-plain")
    manager = get_plugin_manager()
    manager.registry()
    [failure] = manager.all_failures
    assert failure.plugin.dist == "disc-plain"
    assert "subclasses no component base" in failure.message
    assert "dataflex_core.Scorer" in failure.message
