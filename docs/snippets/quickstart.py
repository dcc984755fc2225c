"""Build the pipeline of the config block and run it on a small GRPO-shaped batch."""

import numpy as np
import torch

from dataflex_core import Batch, build_from_config

torch.manual_seed(0)
bs, L = 8, 16
lengths = torch.randint(4, L + 1, (bs, 1))
response_mask = (torch.arange(L) < lengths).long()  # ragged responses, right-padded
batch = Batch(
    {"advantages": torch.randn(bs, 1) * response_mask, "response_mask": response_mask},
    {"uid": np.repeat(np.array(["prompt-0", "prompt-1"], dtype=object), 4)},  # 2 groups of 4
)

pipeline = build_from_config(
    {
        "mechanism": "reweight",
        "scorer": {"name": "advantage_magnitude", "params": {}},
        "actuator": {"name": "softmax", "params": {"temperature": 1.0}},
        "warmup_step": 0,
    },
    adv_estimator="grpo",
)
scores = pipeline.scorer.score(batch, step_id=0)  # (bs,)
weights = pipeline.actuator.act(scores, batch)  # (bs,), mean one over valid samples
print(pipeline.scorer.describe(), "->", pipeline.actuator.describe())
print("weights:", [round(w, 3) for w in weights.tolist()])
print("mean:", round(weights.mean().item(), 6))
