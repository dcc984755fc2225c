"""Where a run's rollouts went, prompt by prompt: ``dataflex ledger show``.

Everything here is a whole-column tensor operation over the ledger (no loop over prompts). Definitions:

- a prompt's *group size* is its rollouts per visit (``rollouts / times_sampled``);
- its *zero-variance rollouts* are those of its visits whose group had one reward for every response
  (``uniform_reward_steps`` x its group size: exact when every visit drew the same group size): generated, but
  without GRPO signal, whether the run trained on them (among ``dataflex/compute/rollouts_wasted``, which also
  counts a rollout whose reward is its group's mean) or filtered them out;
- *by the posterior* a prompt is *always solved* (*never solved*) when its next group of that size is more likely
  than not to succeed (fail) on every rollout under its Beta posterior ``Beta(a, b)``:
  ``E[p^G] = B(a + G, b) / B(a, b) >= 1/2`` (``E[(1 - p)^G] = B(a, b + G) / B(a, b) >= 1/2``);
- *by the last streak* it is always (never) solved when its latest visits had no reward variance and its last
  success rate was 1 (0);
- its *solve rate* is ``successes / rollouts`` (successes counted as the run counted them).

Summed over the prompts, generated, trained, filtered rollouts and generated tokens are the run's
``dataflex/compute/*_total`` counters (responses without a token, which the ledger leaves out, aside).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dataflex_core.ledger import PromptLedger
from dataflex_core.text_table import format_table

#: The buckets of a prompt's solve rate, in order.
BUCKETS = ("never solved", "between", "always solved")
#: Edges of the solve-rate histogram between its two end bins (rate exactly 0, exactly 1).
HISTOGRAM_EDGES = tuple(i / 10 for i in range(11))
#: Prompts listed as the costliest without signal.
TOP = 10


@dataclass(frozen=True)
class PromptFacts:
    """Per-prompt derived columns (float64 / bool tensors, one entry per prompt)."""

    seen: torch.Tensor
    group_size: torch.Tensor
    zero_variance: torch.Tensor
    solve_rate: torch.Tensor
    by_posterior: torch.Tensor  # int: index into BUCKETS
    by_streak: torch.Tensor


def prompt_facts(ledger: PromptLedger) -> PromptFacts:
    """The derived columns every view of a ledger reads (see the module's definitions)."""
    seen = ledger.times_sampled > 0
    visits = ledger.times_sampled.to(torch.float64).clamp(min=1)
    rollouts = ledger.rollouts.to(torch.float64)
    group = rollouts / visits
    zero_variance = ledger.uniform_reward_steps.to(torch.float64) * group
    solve_rate = ledger.successes / rollouts.clamp(min=1)
    alpha, beta = ledger.solve_rate_posterior()
    size = group.clamp(min=1)
    log_norm = torch.lgamma(alpha + beta) - torch.lgamma(alpha + beta + size)
    all_succeed = torch.exp(torch.lgamma(alpha + size) - torch.lgamma(alpha) + log_norm)
    all_fail = torch.exp(torch.lgamma(beta + size) - torch.lgamma(beta) + log_norm)
    by_posterior = torch.full_like(ledger.rollouts, 1)
    by_posterior[(all_fail >= 0.5) & (all_fail >= all_succeed)] = 0
    by_posterior[(all_succeed >= 0.5) & (all_succeed > all_fail)] = 2
    uniform_now = ledger.uniform_reward_streak > 0
    by_streak = torch.full_like(ledger.rollouts, 1)
    by_streak[uniform_now & (ledger.last_success_rate <= 1e-9)] = 0
    by_streak[uniform_now & (ledger.last_success_rate >= 1 - 1e-9)] = 2
    return PromptFacts(seen, group, zero_variance, solve_rate, by_posterior, by_streak)


def _bucket_rows(facts: PromptFacts, rollouts: torch.Tensor, buckets: torch.Tensor) -> dict[str, dict[str, Any]]:
    """Prompts, rollouts and zero-variance rollouts of each bucket, over the seen prompts."""
    out = {}
    for index, name in enumerate(BUCKETS):
        inside = facts.seen & (buckets == index)
        spent = int(rollouts[inside].sum())
        wasted = float(facts.zero_variance[inside].sum())
        out[name] = {
            "prompts": int(inside.sum()),
            "rollouts": spent,
            "zero_variance_rollouts": round(wasted),
            "zero_variance_share": wasted / spent if spent else 0.0,
        }
    return out


def solve_rate_histogram(ledger: PromptLedger, facts: PromptFacts | None = None) -> list[dict[str, Any]]:
    """The seen prompts by solve rate: a bin for exactly 0, ten bins of 0.1 between, a bin for exactly 1; each
    with its prompts, rollouts and zero-variance rollouts."""
    facts = facts or prompt_facts(ledger)
    rate = facts.solve_rate[facts.seen]
    rollouts = ledger.rollouts[facts.seen].to(torch.float64)
    wasted = facts.zero_variance[facts.seen]
    exact_zero, exact_one = rate <= 0, rate >= 1
    inner = torch.bucketize(rate, torch.tensor(HISTOGRAM_EDGES[1:-1], dtype=torch.float64), right=True) + 1
    bins = torch.where(exact_zero, 0, torch.where(exact_one, len(HISTOGRAM_EDGES), inner))
    count = len(HISTOGRAM_EDGES) + 1
    labels = ["0"] + [f"{lo:.1f}-{hi:.1f}" for lo, hi in zip(HISTOGRAM_EDGES[:-1], HISTOGRAM_EDGES[1:])] + ["1"]
    prompts = torch.bincount(bins, minlength=count)
    spent = torch.bincount(bins, weights=rollouts, minlength=count)
    lost = torch.bincount(bins, weights=wasted, minlength=count)
    return [
        {"solve_rate": labels[i], "prompts": int(prompts[i]), "rollouts": int(spent[i]),
         "zero_variance_rollouts": round(float(lost[i]))}
        for i in range(count)
    ]  # fmt: skip


def summarize(ledger: PromptLedger, top: int = TOP) -> dict[str, Any]:
    """``dataflex ledger show``'s report as plain data (what ``--json`` prints)."""
    facts = prompt_facts(ledger)
    rollouts = ledger.rollouts
    seen = int(facts.seen.sum())
    totals = {
        "rollouts_generated": int(rollouts.sum()),
        "rollouts_trained": int(ledger.rollouts_trained.sum()),
        "rollouts_filtered": int(ledger.rollouts_filtered.sum()),
        "tokens_generated": int(ledger.tokens_generated.sum()),
        "zero_variance_rollouts": round(float(facts.zero_variance.sum())),
    }
    group_sizes = facts.group_size[facts.seen]
    costly = torch.topk(facts.zero_variance, min(top, len(ledger))) if len(ledger) else None
    listed = []
    if costly is not None:
        for value, row in zip(costly.values.tolist(), costly.indices.tolist()):
            if value <= 0:
                break
            listed.append({
                "id": _plain(ledger.ids.values[row]),
                "row": row,
                "rollouts": int(rollouts[row]),
                "zero_variance_rollouts": round(value),
                "times_sampled": int(ledger.times_sampled[row]),
                "solve_rate": float(facts.solve_rate[row]),
            })  # fmt: skip
    return {
        "prompt_key": ledger.ids.key,
        "prompts": len(ledger),
        "seen": seen,
        "never_seen": len(ledger) - seen,
        "last_step": ledger.last_step,
        "success_threshold": ledger.success_threshold,
        "group_size": float(group_sizes.median()) if seen else None,
        "totals": totals,
        "by_posterior": _bucket_rows(facts, rollouts, facts.by_posterior),
        "by_last_streak": _bucket_rows(facts, rollouts, facts.by_streak),
        "solve_rate_histogram": solve_rate_histogram(ledger, facts),
        "costliest_without_signal": listed,
    }


def format_summary(report: dict[str, Any], source: str) -> str:
    """The report as the terminal shows it."""
    totals = report["totals"]
    generated = totals["rollouts_generated"]
    lines = [
        f"ledger {source}: {report['prompts']} prompts keyed by {report['prompt_key']!r}, last step "
        f"{report['last_step']}",
        f"seen {report['seen']} ({_share(report['seen'], report['prompts'])}), never seen {report['never_seen']}; "
        f"group size (median rollouts per visit) {_number(report['group_size'])}",
        "",
        format_table(
            [("rollouts", "count", "share of generated")]
            + [
                (name, totals[key], _share(totals[key], generated))
                for name, key in (
                    ("generated", "rollouts_generated"),
                    ("trained", "rollouts_trained"),
                    ("filtered", "rollouts_filtered"),
                    ("zero variance", "zero_variance_rollouts"),
                )
            ]
            + [("tokens generated", totals["tokens_generated"], "")],
            rule=True,
        ),  # fmt: skip
    ]
    for title, key in (("by the posterior", "by_posterior"), ("by the last streak", "by_last_streak")):
        rows = [(f"solve rate ({title})", "prompts", "rollouts", "zero variance", "wasted share")]
        for name, bucket in report[key].items():
            rows.append((name, bucket["prompts"], bucket["rollouts"], bucket["zero_variance_rollouts"],
                         f"{100 * bucket['zero_variance_share']:.1f}%"))  # fmt: skip
        lines += ["", format_table(rows, rule=True)]
    rows = [("solve rate", "prompts", "rollouts", "zero variance")]
    rows += [(b["solve_rate"], b["prompts"], b["rollouts"], b["zero_variance_rollouts"])
             for b in report["solve_rate_histogram"]]  # fmt: skip
    lines += ["", format_table(rows, rule=True)]
    costly = report["costliest_without_signal"]
    if costly:
        rows = [("id", "rollouts", "zero variance", "times sampled", "solve rate")]
        rows += [(repr(c["id"]), c["rollouts"], c["zero_variance_rollouts"], c["times_sampled"],
                  f"{c['solve_rate']:.2f}") for c in costly]  # fmt: skip
        lines += ["", "the prompts that cost most without signal:", format_table(rows, rule=True)]
    return "\n".join(lines) + "\n"


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
