"""A third party's mechanism and component kind, pip-installed into a fresh site, through verl's V1 step.

``dataflex-rankweight`` (``packages/dataflex-core/tests/dists``, never shipped) declares a ``ranker`` kind and the
``rank_weight`` mechanism in its own files; nothing in core or this host names them. It is installed with
``pip install --target`` into a directory that only a subprocess sees (``PYTHONPATH``), and that process runs
verl's real ``_compute_advantage`` on a real TransferQueue with ``dataflex.mechanism: rank_weight``. The weights
verl's loss gets are checked against the rank rule written out here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dataflex_lab.testing.plugin_sites import install_into_target

pytestmark = pytest.mark.verl
pytest.importorskip("verl")

DIST = Path(__file__).resolve().parents[2] / "dataflex-core" / "tests" / "dists" / "dataflex-rankweight"
SPREAD = 0.5

STEP = f"""
import json
import transfer_queue as tq
from verl.trainer.ppo.v1 import get_trainer_cls
from dataflex_lab.verl import sandbox

block = {{"mechanism": "rank_weight", "rank_spread": {SPREAD}, "scorer": {{"name": "advantage_magnitude"}},
         "actuator": {{"name": "score_order"}}}}
overrides = ["actor_rollout_ref.rollout.n=4", "algorithm.adv_estimator=grpo",
             "actor_rollout_ref.actor.loss_agg_mode=token-mean"]
with sandbox.local_queue():
    trainer = get_trainer_cls("dataflex_sync")(sandbox.compose_config(overrides, dataflex=block))
    trainer.global_steps = 1
    meta = sandbox.put_rollout(sandbox.synthetic_rollout(num_prompts=6, n=4, padding_rows=2))
    metrics = {{}}
    out = trainer._compute_advantage(meta, metrics)
    got = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id,
                          select_fields=["rollout_is_weights", "advantages", "response_mask"])
    print("RESULT " + json.dumps({{
        "mounted": trainer.dataflex.describe(),
        "weights": got["rollout_is_weights"].to_padded_tensor(0).tolist(),
        "advantages": got["advantages"].to_padded_tensor(0).tolist(),
        "mask": got["response_mask"].to_padded_tensor(0).tolist(),
        "padding": [t["is_padding"] for t in out.tags],
        "metrics": {{k: v for k, v in metrics.items() if k.startswith("dataflex/weight/")}},
    }}))
"""


def rank_weights(scores: torch.Tensor, rows: torch.Tensor, spread: float) -> torch.Tensor:
    """The rank rule by hand: rank among valid rows (ties at their mean rank), weight linear from 1-spread to 1+spread."""
    s = scores[rows]
    below = (s.unsqueeze(0) < s.unsqueeze(1)).sum(1).double()
    ties = (s.unsqueeze(0) == s.unsqueeze(1)).sum(1).double()
    rank = below + (ties - 1) / 2
    out = torch.zeros(len(scores), dtype=torch.float64)
    out[rows] = 1 + spread * (2 * rank / (len(s) - 1) - 1)
    return out


def test_rank_weight_from_a_fresh_site_runs_through_verls_v1_step(tmp_path):
    site = install_into_target(DIST, tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "DATAFLEX_PLUGINS": "dataflex-rankweight,dataflex-scorers-advantage"}  # fmt: skip
    run = subprocess.run([sys.executable, "-c", STEP], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [line] = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert result["mounted"].startswith("rank_weight: scorer advantage_magnitude")
    assert "ranker score_order (dataflex-rankweight==0.1.0)" in result["mounted"]

    weights, adv = torch.tensor(result["weights"]), torch.tensor(result["advantages"])
    valid = torch.tensor(result["mask"]).bool() & ~torch.tensor(result["padding"]).unsqueeze(-1)
    assert (~valid.any(-1)).sum() >= 2  # verl's padding rows are in the batch, at weight 0
    scores = torch.where(valid, adv.abs(), torch.zeros(())).sum(-1) / valid.sum(-1).clamp(min=1)
    per_row = rank_weights(scores, valid.any(-1), SPREAD).unsqueeze(-1) * valid
    expected = per_row / (per_row.sum() / valid.sum())  # mean one over valid tokens (token-mean)
    torch.testing.assert_close(weights.double(), expected, rtol=1e-5, atol=1e-6)
    assert weights[valid].std() > 0.1 and torch.all(weights[~valid] == 0)
    assert result["metrics"]["dataflex/weight/mean"] == pytest.approx(1.0, abs=1e-5)
