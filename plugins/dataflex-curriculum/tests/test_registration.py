"""The installed distribution publishes its components through the ``dataflex`` entry point."""

from __future__ import annotations

from dataflex_curriculum import __version__

from dataflex_core import get_registry


def test_every_component_is_discovered_with_its_distribution():
    registry = get_registry()
    for kind, name in [("scorer", "solve_rate_ema"), ("scorer", "mopps"), ("sampler", "learnability"),
                       ("sampler", "temperature")]:  # fmt: skip
        spec = registry.get(kind, name)
        assert spec is not None, f"{kind} {name!r} not discovered"
        assert (spec.dist, spec.version) == ("dataflex-curriculum", __version__)
        assert spec.cls.timing == "pre_rollout" if kind == "scorer" else spec.cls.accepts_granularity == ("prompt",)
