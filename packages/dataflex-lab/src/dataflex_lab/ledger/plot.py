"""``dataflex ledger plot``: a ledger's solve rates with the waste per bucket, and its rollouts per prompt.

Two panels: the seen prompts' rollouts by solve rate (:func:`~.summary.solve_rate_histogram`), the zero-variance
share of each bin hatched; and how many prompts got how many rollouts. Given two ledgers (a run before and after,
or two runs) each panel shows both side by side. Drawn with matplotlib's Agg canvas (no display needed).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from dataflex_core.ledger import PromptLedger

from .reading import LedgerError
from .summary import solve_rate_histogram

#: matplotlib, for a message when it is missing.
INSTALL_PLOT = "pip install matplotlib"


def plot_ledgers(ledgers: Sequence[tuple[str, PromptLedger]], path: str | os.PathLike[str]) -> None:
    """Write the figure of one or two ``(label, ledger)`` to ``path`` (format from its suffix: .png, .pdf, .svg)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise LedgerError(f"dataflex ledger plot needs matplotlib, which is not installed: {INSTALL_PLOT}") from None
    if not 1 <= len(ledgers) <= 2:
        raise LedgerError(f"dataflex ledger plot draws one ledger or two (before, after), got {len(ledgers)}")
    figure = Figure(figsize=(11, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    rates, spread = figure.subplots(1, 2)
    width = 0.8 / len(ledgers)
    colors = [f"C{k}" for k in range(len(ledgers))]
    for k, (label, ledger) in enumerate(ledgers):
        bins = solve_rate_histogram(ledger)
        x = np.arange(len(bins)) + (k - (len(ledgers) - 1) / 2) * width
        spent = np.array([b["rollouts"] for b in bins], dtype=float)
        wasted = np.array([b["zero_variance_rollouts"] for b in bins], dtype=float)
        rates.bar(x, spent - wasted, width, color=colors[k], label=f"{label}: with signal")
        rates.bar(x, wasted, width, bottom=spent - wasted, color=colors[k], alpha=0.4, hatch="//",
                  label=f"{label}: zero variance")  # fmt: skip
        rates.set_xticks(np.arange(len(bins)), [b["solve_rate"] for b in bins], rotation=45, ha="right")
    per_prompt = [ledger.rollouts[ledger.times_sampled > 0].numpy() for _, ledger in ledgers]
    most = max((int(r.max()) for r in per_prompt if len(r)), default=1)
    edges = np.arange(0.5, most + 1.5) if most <= 40 else np.linspace(0, most, 31)
    spread.hist(per_prompt, bins=edges, color=colors, label=[label for label, _ in ledgers])
    rates.set_xlabel("solve rate (successes / rollouts)")
    rates.set_ylabel("rollouts")
    rates.set_title("rollouts by solve rate; hatched: groups without reward variance")
    rates.legend(fontsize="small")
    spread.set_xlabel("rollouts of a prompt")
    spread.set_ylabel("prompts (seen)")
    spread.set_title("rollouts per prompt")
    spread.legend(fontsize="small")
    figure.savefig(os.fspath(path), dpi=100)
