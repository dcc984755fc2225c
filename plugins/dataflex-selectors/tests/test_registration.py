"""The installed distribution publishes its selectors through the ``dataflex`` entry point."""

from __future__ import annotations

from dataflex_selectors import __version__

from dataflex_core import get_registry


def test_every_selector_is_discovered_with_its_distribution():
    registry = get_registry()
    for name in ("threshold_band", "topk_fraction", "gfpo", "max_variance"):
        spec = registry.get("selector", name)
        assert spec is not None, f"selector {name!r} not discovered"
        assert spec.dist == "dataflex-selectors"
        assert spec.version == __version__
