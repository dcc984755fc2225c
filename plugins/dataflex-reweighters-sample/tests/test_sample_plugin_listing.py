"""The installed distribution's components are discovered with its version."""

import importlib.metadata

from dataflex_reweighters_sample import __version__

from dataflex_core import get_plugin_manager, reset_plugin_manager

DIST = "dataflex-reweighters-sample"
NAMES = ("softmax", "per_advantage", "difficulty_band", "grpo_lead", "focal", "positive_downweight")


def test_installed_components_are_listed_with_the_package_version():
    assert importlib.metadata.version(DIST) == __version__
    reset_plugin_manager()  # discover afresh from the installed entry points, whatever ran before
    registry = get_plugin_manager().registry()
    for name in NAMES:
        spec = registry.get("reweighter", name)
        assert spec is not None, f"{name} not discovered through the 'dataflex' entry point"
        assert (spec.dist, spec.version) == (DIST, __version__)
    rows = [r for r in get_plugin_manager().describe_plugins() if r["distribution"] == DIST]
    assert [r["status"] for r in rows] == ["loaded"]
    assert sorted(rows[0]["components"]["reweighter"]) == sorted(NAMES)
