"""The harness behind ``nox -s bench``: what a user of DataFlex feels, as ratios measured side by side in one run.

Absolute times on shared machines drift by tens of percent between minutes, so every figure is a ratio to a
baseline that does the least work on the same inputs, alternating with the case itself (:mod:`.timing`).
"""
