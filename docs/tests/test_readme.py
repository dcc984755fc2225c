"""The README's component example runs as written and gives mean-one weights."""

import re
from pathlib import Path

import pytest
import torch

from dataflex_core import Batch, build_from_config

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_component_example_builds_and_weights_have_mean_one():
    section = README.read_text().split("## Write a component", 1)[-1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "README.md has no python example under 'Write a component'"
    exec(compile(blocks[0], "README.md", "exec"), {"__name__": "readme_example"})
    pipeline = build_from_config(
        {
            "scorer": {"name": "my_advantage_magnitude"},
            "actuator": {"name": "my_softmax", "params": {"temperature": 0.5}},
        }
    )
    mask = torch.ones(6, 5)
    mask[2] = 0  # an empty row gets weight 0 and stays out of the mean
    batch = Batch({"advantages": torch.randn(6, 5, generator=torch.Generator().manual_seed(0)), "response_mask": mask})
    weights = pipeline.actuator.act(pipeline.scorer.score(batch, 0), batch)
    assert weights[2].item() == 0.0
    assert weights[mask.any(-1)].mean().item() == pytest.approx(1.0, rel=1e-6)
