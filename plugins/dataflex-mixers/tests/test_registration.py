"""The installed distribution publishes its mixers through the ``dataflex`` entry point."""

from __future__ import annotations

from dataflex_mixers import __version__

from dataflex_core import get_registry


def test_every_mixer_is_discovered_with_its_distribution():
    registry = get_registry()
    for name in ("static", "reward_gap", "dump_ucb", "tscl", "odm"):
        spec = registry.get("mixer", name)
        assert spec is not None, f"mixer {name!r} not discovered"
        assert (spec.dist, spec.version) == ("dataflex-mixers", __version__)
