"""Build the tutorial pair from a config block, as the verl host does, and look at the weights."""

import length_zscore  # noqa: F401  (importing a module registers its components)
import numpy as np
import torch
import zscore_tilt  # noqa: F401

from dataflex_core import Batch, build_from_config

config = {
    "mechanism": "reweight",
    "scorer": {"name": "length_zscore"},
    "actuator": {"name": "zscore_tilt", "params": {"beta": -0.5}},  # favour the shorter answers
}
# a host says which of its estimators group rows by uid; GRPO does
pipeline = build_from_config(config, adv_estimator="grpo", is_group_estimator=lambda name: name == "grpo")

lengths = torch.tensor([2, 4, 6, 5, 5, 5, 3])
batch = Batch(
    {"response_mask": (torch.arange(8) < lengths[:, None]).long(), "is_padding": torch.tensor([0] * 6 + [1]).bool()},
    {"uid": np.array(["a", "a", "a", "b", "b", "b", "pad"], dtype=object)},
)
scores = pipeline.scorer.score(batch, step_id=0)
weights = pipeline.actuator.act(scores, batch)
print(pipeline.actuator.describe())
print("weights:", [round(w, 3) for w in weights.tolist()])  # padding row -> 0
print("mean over the 6 real rows:", round(weights[:6].mean().item(), 6))
