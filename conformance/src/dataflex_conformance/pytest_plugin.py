"""pytest plugin (entry point ``pytest11``): the ``dataflex_fields`` fixture.

Override ``dataflex_fields`` in your ``conftest.py`` to supply synthesisers
for batch fields your components require and the suite cannot synthesise::

    @pytest.fixture
    def dataflex_fields():
        return {"my_field": lambda ctx: ctx.randn(ctx.bs, ctx.length)}
"""

from __future__ import annotations

import pytest


@pytest.fixture
def dataflex_fields() -> dict:
    """Synthesisers ``{field: fn(ctx)}`` for custom batch fields; none by default."""
    return {}
