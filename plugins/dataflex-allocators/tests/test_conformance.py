"""Every conformance check on this package's components, one pytest test each (``-k`` picks a component or check).

The allocators are certified with synthetic scores and with ``solve_rate_posterior``'s; ``nox -s conformance``
runs the same checks on the installed distribution and writes a certificate.
"""

from dataflex_allocators import KnapsackAllocator, SolveRatePosterior, UniformAllocator, VarianceAllocator

from dataflex_conformance import parametrize_with_checks


@parametrize_with_checks([SolveRatePosterior, UniformAllocator, KnapsackAllocator, VarianceAllocator])
def test_conformance(dataflex_check, dataflex_fields):
    dataflex_check(fields=dataflex_fields)
