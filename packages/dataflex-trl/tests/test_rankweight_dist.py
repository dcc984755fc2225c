"""A third party's mechanism and component kind, pip-installed into a fresh site, through TRL's step path.

``dataflex-rankweight`` (``packages/dataflex-core/tests/dists``, never shipped) declares a ``ranker`` kind and the
``rank_weight`` mechanism; nothing in core or this host names them. It is installed with ``pip install
--target`` into a directory only a subprocess sees (``PYTHONPATH``); that process builds TRL's real
``GRPOTrainer`` through DataFlex's TRL host with ``dataflex.mechanism: rank_weight`` and runs one real
``_generate_and_score_completions`` (rollouts given by a ``rollout_func``, so the rewards are known). The
weights the step hands TRL's loss are checked against the rank rule written out here.
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

pytest.importorskip("trl")

DIST = Path(__file__).resolve().parents[2] / "dataflex-core" / "tests" / "dists" / "dataflex-rankweight"
SPREAD = 0.5
GENERATIONS = 4

STEP = f"""
import json, os, warnings
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from dataflex_trl import DataFlexGRPOTrainer
from trl import GRPOConfig
from dataflex_lab.trl.toy import char_tokenizer, echo_reward, tiny_model, toy_dataset

G = {GENERATIONS}
tokenizer = char_tokenizer()

def rollout(prompts, trainer):
    # group g echoes its prompt (reward 1) in g of its G rollouts; the others answer 1-3 colons
    prompt_ids, completion_ids = [], []
    for row, prompt in enumerate(prompts):
        group, member = divmod(row, G)
        text = prompt * 4 if member < group else ":" * (1 + member % 3)
        prompt_ids.append(tokenizer(prompt)["input_ids"])
        completion_ids.append(tokenizer(text)["input_ids"])
    return {{"prompt_ids": prompt_ids, "completion_ids": completion_ids,
             "logprobs": [[0.0] * len(c) for c in completion_ids]}}

block = {{"mechanism": "rank_weight", "rank_spread": {SPREAD}, "scorer": {{"name": "advantage_magnitude"}},
         "actuator": {{"name": "score_order"}}}}
args = GRPOConfig(output_dir="out", per_device_train_batch_size=16, num_generations=G, max_completion_length=6,
                  loss_type="dapo", report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trainer = DataFlexGRPOTrainer(model=tiny_model(tokenizer, seed=0), reward_funcs=echo_reward, args=args,
                                  train_dataset=toy_dataset(16, seed=0), processing_class=tokenizer,
                                  rollout_func=rollout, dataflex=block)
trainer.model.train()
seen = {{}}
run = trainer.dataflex.run

def recording(batch, step, **kwargs):
    seen["batch"], seen["result"] = batch, run(batch, step, **kwargs)
    return seen["result"]

trainer.dataflex.run = recording
dataset = trainer.train_dataset
out = trainer._generate_and_score_completions([dict(dataset[i]) for i in range(4) for _ in range(G)])
batch = seen["batch"]
print("RESULT " + json.dumps({{
    "mounted": trainer.dataflex.describe(),
    "advantages": batch.batch["advantages"].tolist(),
    "mask": batch.batch["response_mask"].tolist(),
    "factor": seen["result"].factor.tolist(),
    "applied": out["advantages"].tolist(),
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


def test_rank_weight_from_a_fresh_site_runs_through_trls_step(tmp_path):
    site = install_into_target(DIST, tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "DATAFLEX_PLUGINS": "dataflex-rankweight,dataflex-scorers-advantage"}  # fmt: skip
    run = subprocess.run([sys.executable, "-c", STEP], capture_output=True, text=True, env=env, timeout=300,
                         cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [line] = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert "ranker score_order (dataflex-rankweight==0.1.0)" in result["mounted"]

    adv, mask = torch.tensor(result["advantages"]), torch.tensor(result["mask"]).bool()
    factor = torch.tensor(result["factor"], dtype=torch.float64)
    scores = torch.where(mask, adv.abs(), torch.zeros(())).sum(-1) / mask.sum(-1).clamp(min=1)
    raw = rank_weights(scores, mask.any(-1), SPREAD)
    expected = raw / ((raw * mask.sum(-1)).sum() / mask.sum())  # mean one per valid token (TRL dapo)
    torch.testing.assert_close(factor, expected, rtol=1e-5, atol=1e-6)
    assert factor.std() > 0.1  # the groups' advantages differ, so do the ranks
    # TRL's loss gets the weights: each row's advantage times its weight on its valid tokens
    applied = torch.tensor(result["applied"])[:, : mask.shape[1]].double()
    torch.testing.assert_close(applied, adv.double() * factor.unsqueeze(-1) * mask, rtol=1e-5, atol=1e-6)
