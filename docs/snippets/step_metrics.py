"""The weight metrics the verl host logs for one GRPO step, for two scorer/actuator pairs."""

import numpy as np
import torch

from dataflex_core import Batch, build_from_config
from dataflex_verl.metrics import weight_metrics
from dataflex_verl.weights import finalize, loss_unit

gen = torch.Generator().manual_seed(0)
prompts, n, L = 32, 8, 64
bs = prompts * n
lengths = torch.randint(1, L + 1, (bs, 1), generator=gen)
lengths[::37] = 0  # a few empty responses, as truncated generations give
mask = (torch.arange(L) < lengths).long()
solve_p = torch.rand(prompts, 1, generator=gen).expand(prompts, n).reshape(bs)
reward = torch.bernoulli(solve_p, generator=gen)  # 0/1 outcome per rollout
grouped = reward.view(prompts, n)
advantage = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).reshape(bs, 1)
batch = Batch(
    {
        "advantages": advantage * mask,
        "response_mask": mask,
        "entropy": torch.rand(bs, L, generator=gen).pow(3) * 2 * mask,  # most tokens confident, a few forking
    },
    {"uid": np.repeat(np.array([f"p{i}" for i in range(prompts)], dtype=object), n)},
)
valid = mask.bool()
unit = loss_unit("token-mean")
for scorer, actuator in [("advantage_magnitude", "softmax"), ("token_entropy", "high_entropy_tokens")]:
    pipeline = build_from_config({"scorer": {"name": scorer}, "actuator": {"name": actuator}}, adv_estimator="grpo")
    raw = pipeline.actuator.act(pipeline.scorer.score(batch, 0), batch, step_id=0, loss_agg_mode="token-mean")
    written, factor = finalize(raw, valid, unit)
    print(f"# {scorer} + {actuator}")
    for name, value in sorted(weight_metrics(factor, valid, unit).items()):
        print(f"{name:<34} {value:.4g}")
