"""A small campaign with known truth: two methods against a baseline, 3 seeds each.

method_a truly adds 0.8 points of accuracy and method_b truly costs 0.5;
a seed moves every arm by about 2 points (data order, initialisation) and
each run adds about 2 points of its own: the spread DataFlex-RL's campaign saw.
"""

import math

import torch

from dataflex_lab.compare import Run, compare_runs

TRUE_EFFECT = {"sync": 0.0, "method_a": 0.8, "method_b": -0.5}
SEEDS = [0, 1, 2]
gen = torch.Generator().manual_seed(7)
seed_effect = (2.0 * torch.randn(len(SEEDS), generator=gen)).tolist()

runs = []
for arm, effect in TRUE_EFFECT.items():
    for seed, shared in zip(SEEDS, seed_effect):
        own = 2.0 * torch.randn(1, generator=gen).item()
        steps = {}
        for step in range(1, 51):
            curve = 30 + 25 * (1 - math.exp(-step / 15))  # accuracy rising from 30 towards 55
            noise = torch.randn(1, generator=gen).item()  # step-to-step evaluation noise
            steps[step] = {"val/accuracy": curve + shared + own + effect + noise}
        runs.append(Run(arm, seed, steps))

report = compare_runs(runs, baseline="sync", metrics=["val/accuracy"])
print(report.markdown(), end="")
