"""The dataflex/ metrics of one GRPO step, from the step every host runs, for two scorer/actuator pairs."""

import numpy as np
import torch

from dataflex_core import Batch
from dataflex_core.runner import mount_step
from dataflex_core.step import CANONICAL_FIELDS, FieldSupport, HostCapabilities

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
# A host that provides every canonical field and averages its loss over tokens (verl's token-mean).
host = HostCapabilities(name="this example", fields={name: FieldSupport(True) for name in CANONICAL_FIELDS})
for scorer, actuator in [("advantage_magnitude", "softmax"), ("token_entropy", "high_entropy_tokens")]:
    block = {"scorer": {"name": scorer}, "actuator": {"name": actuator}}
    step = mount_step(block, host, loss_unit="token", adv_estimator="grpo")
    metrics = step.run(batch, step=1).metrics
    print(f"# {scorer} + {actuator}")
    for name, value in sorted(metrics.items()):
        # hook_time_s: wall time, different on every run; the compute counters have their own table
        if name != "dataflex/hook_time_s" and not name.startswith("dataflex/compute/"):
            print(f"{name:<34} {value:.4g}")
