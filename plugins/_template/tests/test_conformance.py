"""Every conformance check on this package's components, one pytest test each.

Ids read like ``response_length-check_output_shape[cpu-bs=1]``, so ``-k`` picks
one component, one check or one device. ``nox -s conformance`` runs the same
checks on the installed distribution and writes a certificate.
"""

from dataflex_example import CenteredLinearReweighter, ResponseLengthScorer

from dataflex_conformance import parametrize_with_checks


@parametrize_with_checks([ResponseLengthScorer, CenteredLinearReweighter])
def test_conformance(dataflex_check, dataflex_fields):
    dataflex_check(fields=dataflex_fields)
