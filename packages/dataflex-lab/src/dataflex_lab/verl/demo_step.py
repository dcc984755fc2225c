"""``dataflex-verl demo-step``: watch DataFlex act inside one call of verl's `_compute_advantage`, on a laptop.

Starts a local Ray + TransferQueue, puts one synthetic GRPO batch into the
queue per scorer/reweighter pair, runs verl's real ``_compute_advantage``
through the ``dataflex_sync`` trainer, and prints the weight statistics and
verl's real policy loss with and without the weights.
"""

from __future__ import annotations

import sys
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, TextIO

from dataflex_verl import __version__ as host_version

from . import sandbox


@dataclass(frozen=True)
class Pair:
    scorer: str
    actuator: str
    scorer_params: dict[str, Any] = field(default_factory=dict)
    actuator_params: dict[str, Any] = field(default_factory=dict)
    #: Distribution that ships each component, for the "not installed" hint.
    dists: tuple[str, str] = ("", "")

    @property
    def label(self) -> str:
        def part(name: str, params: dict[str, Any]) -> str:
            inner = ",".join(f"{k}={v}" for k, v in params.items())
            return f"{name}({inner})" if inner else name

        return f"{part(self.scorer, self.scorer_params)} -> {part(self.actuator, self.actuator_params)}"

    def block(self) -> dict[str, Any]:
        return {
            "mechanism": "reweight",
            "scorer": {"name": self.scorer, "params": dict(self.scorer_params)},
            "actuator": {"name": self.actuator, "params": dict(self.actuator_params)},
        }


#: The pairs the demo runs, from the shipped plugin packages.
PAIRS = (
    Pair("advantage_magnitude", "softmax", {}, {"temperature": 1.0},
         ("dataflex-scorers-advantage", "dataflex-reweighters-sample")),
    Pair("advantage_magnitude", "per_advantage", {}, {},
         ("dataflex-scorers-advantage", "dataflex-reweighters-sample")),
    Pair("group_solve_rate", "difficulty_band", {}, {},
         ("dataflex-scorers-reward", "dataflex-reweighters-sample")),
    Pair("token_prob", "advantage_reweight", {}, {"alpha": 0.3},
         ("dataflex-scorers-policy", "dataflex-reweighters-token")),
)  # fmt: skip


def _missing(pair: Pair) -> str | None:
    from dataflex_core import get_registry

    registry = get_registry()
    for kind, name, dist in (("scorer", pair.scorer, pair.dists[0]), ("reweighter", pair.actuator, pair.dists[1])):
        if registry.get(kind, name) is None:
            return f"{kind} {name!r} is not installed (pip install {dist or '<its package>'})"
    return None


def _ones_like_responses(meta: Any) -> Any:
    import torch
    import transfer_queue as tq

    mask = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["response_mask"])
    return torch.ones_like(mask["response_mask"].to_padded_tensor(0), dtype=torch.float32)


def run_demo(
    *,
    num_prompts: int = 16,
    n: int = 8,
    max_response_len: int = 64,
    loss_agg_mode: str = "token-mean",
    seed: int = 0,
    pairs: tuple[Pair, ...] = PAIRS,
    out: TextIO = sys.stdout,
    start_queue: bool = True,
) -> list[dict[str, Any]]:
    """Run every installed pair on the same synthetic batch; print and return one row per pair.

    :param start_queue: start (and close) a local Ray + TransferQueue; ``False`` uses the running ones.
    """
    import verl  # noqa: F401 - importing verl registers the dataflex trainers (entry point)
    from verl.trainer.ppo.v1 import get_trainer_cls

    def say(message: str) -> None:
        print(message, file=out, flush=True)

    say(f"dataflex-verl {host_version} demo: verl {verl.__version__}, GRPO, {num_prompts} prompts x {n} responses, "
        f"responses up to {max_response_len} tokens, loss_agg_mode={loss_agg_mode}")  # fmt: skip
    overrides = [
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.rollout.n={n}",
        f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode}",
    ]
    rows: list[dict[str, Any]] = []
    queue = sandbox.local_queue(progress=lambda message: say(f"  {message}")) if start_queue else nullcontext()
    with warnings.catch_warnings(), queue:
        # verl warns about missing GPU engines and the disabled critic; not what the demo is about
        warnings.simplefilter("ignore", UserWarning)
        for pair in pairs:
            missing = _missing(pair)
            if missing:
                say(f"\n{pair.label}\n  skipped: {missing}")
                continue
            config = sandbox.compose_config(overrides, dataflex=pair.block())
            trainer = get_trainer_cls("dataflex_sync")(config)
            trainer.global_steps = 1
            rollout = sandbox.synthetic_rollout(num_prompts, n, max_response_len=max_response_len, seed=seed)
            meta = sandbox.put_rollout(rollout)
            metrics: dict[str, float] = {}
            start = time.perf_counter()
            written = trainer._compute_advantage(meta, metrics)
            elapsed = time.perf_counter() - start
            weighted = sandbox.actor_loss(written, config).item()
            unweighted = sandbox.actor_loss(written, config, weights=_ones_like_responses(written)).item()
            sandbox.clear(written)
            row = {"pair": pair.label, "loss_weighted": weighted, "loss_unweighted": unweighted,
                   "compute_advantage_s": elapsed, **metrics}  # fmt: skip
            rows.append(row)
            say(f"\n{pair.label}")
            unit = "sequence" if row["dataflex/weight/unit_is_sequence"] else "token"
            say(f"  weights: mean per {unit} (the loss's unit) {row['dataflex/weight/mean']:.4f}; over valid tokens "
                f"mean {row['dataflex/weight/token_mean']:.4f}  std {row['dataflex/weight/std']:.4f}  "
                f"min {row['dataflex/weight/min']:.4f}  max {row['dataflex/weight/max']:.4f}")  # fmt: skip
            say(f"  effective sample size {row['dataflex/ess']:.1f} of {int(row['dataflex/valid_samples'])} "
                f"({row['dataflex/ess_fraction']:.0%}), zero-weight samples {row['dataflex/zero_weight_fraction']:.0%}")  # fmt: skip
            say(f"  verl ppo_loss: without weights {unweighted:+.6f}   with dataflex weights {weighted:+.6f}")
            say(
                f"  _compute_advantage {elapsed * 1000:.0f} ms (dataflex hook {row['dataflex/hook_time_s'] * 1000:.0f} ms)"
            )
    if not rows:
        say("\nno pair could run: install the plugin packages named above")
    return rows
