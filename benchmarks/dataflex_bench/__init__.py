"""The harness behind ``nox -s bench``: ratios of medians measured side by side in one run.

Absolute times on shared machines drift by tens of percent between minutes,
so every figure here is a ratio to a baseline that does the minimal work on
the same inputs, timed in the same loop, alternating with the case itself.
"""
