"""A plugin written exactly as the user guide shows, pip-installed, found by entry point."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

SEED_SCORERS = """
from dataflex_core import register_scorer
from dataflex_core import Scorer

@register_scorer("advantage_magnitude")
class AdvantageMagnitudeScorer(Scorer):
    requires = ["advantages", "response_mask"]   # 从 batch 读的字段
    timing = "post_advantage"
    granularity = "prompt"                        # per-sample 分数 (bs,)
    needs_groups = False                          # 任意估计器可用

    def score(self, batch, step_id, **ctx):
        adv = batch.batch["advantages"]           # (bs, L)
        mask = batch.batch["response_mask"].to(adv.dtype)
        a = adv.abs() * mask
        return a.sum(-1) / mask.sum(-1).clamp(min=1.0)   # (bs,)
"""

SEED_REWEIGHTERS = """
import torch
from dataflex_core import Reweighter
from dataflex_core import register_reweighter

def _normalize_mean_one(w):
    return w / w.mean().clamp(min=1e-8)

@register_reweighter("softmax")
class SoftmaxReweighter(Reweighter):
    def __init__(self, temperature: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature

    def act(self, scores, batch, **ctx):
        s = scores.float().flatten()
        w = torch.softmax(s / self.temperature, dim=0) * s.numel()  # 均值 ~1
        return _normalize_mean_one(w)
"""

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "seed-guide-plugin"
version = "0.0.7"
dependencies = []

[project.entry-points.dataflex]
seed_guide = "seed_guide_plugin"

[tool.setuptools]
packages = ["seed_guide_plugin"]
"""

CHECK = """
import torch
from dataflex_core import Batch, build_from_config, get_registry, valid_sample_mask

config = {
    "mechanism": "reweight",
    "scorer": {"name": "advantage_magnitude"},
    "actuator": {"name": "softmax", "params": {"temperature": 1.0}},
}
pipeline = build_from_config(config)
torch.manual_seed(0)
batch = Batch({"advantages": torch.randn(16, 12) * 3, "response_mask": torch.ones(16, 12)})
weights = pipeline.actuator.act(pipeline.scorer.score(batch, step_id=0), batch)
print(pipeline.scorer_spec.label, pipeline.actuator_spec.label, float(weights.mean()), float(weights.min()))
"""


@pytest.fixture(scope="module")
def seed_site(tmp_path_factory):
    src = tmp_path_factory.mktemp("seed_src")
    (src / "pyproject.toml").write_text(PYPROJECT)
    pkg = src / "seed_guide_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import scorers, reweighters  # noqa: F401\n")
    (pkg / "scorers.py").write_text(textwrap.dedent(SEED_SCORERS))
    (pkg / "reweighters.py").write_text(textwrap.dedent(SEED_REWEIGHTERS))
    target = tmp_path_factory.mktemp("seed_site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(src)],
        check=True,
    )
    return target


def _run(site, *args):
    env = dict(os.environ, PYTHONPATH=str(site), DATAFLEX_PLUGINS="seed-guide-plugin")
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=True).stdout


def test_pip_installed_seed_plugin_is_listed_by_the_cli(seed_site):
    rows = json.loads(_run(seed_site, "-m", "dataflex_core.cli", "plugins", "--json"))
    assert rows == [
        {
            "entry_point": "seed_guide",
            "value": "seed_guide_plugin",
            "distribution": "seed-guide-plugin",
            "version": "0.0.7",
            "status": "loaded",
            "components": {"reweighter": ["softmax"], "scorer": ["advantage_magnitude"]},
        }
    ]


def test_seed_config_block_builds_and_weights_have_mean_one(seed_site):
    out = _run(seed_site, "-c", CHECK).split()
    assert out[:2] == ["advantage_magnitude", "(seed-guide-plugin==0.0.7)"]
    assert out[2:4] == ["softmax", "(seed-guide-plugin==0.0.7)"]
    assert float(out[4]) == pytest.approx(1.0, abs=1e-6)
    assert float(out[5]) > 0
