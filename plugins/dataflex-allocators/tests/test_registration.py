"""The installed distribution publishes its components through the ``dataflex`` entry point."""

from __future__ import annotations

from dataflex_allocators import __version__

from dataflex_core import get_registry


def test_every_component_is_discovered_with_its_distribution():
    registry = get_registry()
    for kind, name in [("scorer", "solve_rate_posterior"), ("allocator", "uniform"), ("allocator", "knapsack"),
                       ("allocator", "variance")]:  # fmt: skip
        spec = registry.get(kind, name)
        assert spec is not None, f"{kind} {name!r} not discovered"
        assert (spec.dist, spec.version) == ("dataflex-allocators", __version__)
