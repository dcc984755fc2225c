"""Admission selectors for the meta tests: one that keeps its promise, and ones that each break one check."""

from __future__ import annotations

import torch

from dataflex_core import Scorer, Selector, valid_mask_for


def _band(scores: torch.Tensor, batch) -> torch.Tensor:
    """Valid rows with a score inside ``(0, 1)``: whole groups when a group's rows share a score."""
    valid = valid_mask_for(scores, batch)
    return valid & (scores > 0) & (scores < 1)


class GoodBand(Selector):
    """A band on the scores: keeps or drops each group whole."""

    name = "good_admission_band"
    admits_groups = True

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        return _band(scores, batch)


class EvenLengthRows(Selector):
    """Keeps the valid rows whose response has an even number of tokens: splits groups, nothing else."""

    name = "broken_partial_groups"
    admits_groups = True

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        lengths = batch.batch["response_mask"].sum(-1)
        return valid_mask_for(scores, batch) & (lengths % 2 == 0)


class KeepsEveryRow(Selector):
    """Keeps every row, padding and empty responses included: admits a group with no valid row."""

    name = "broken_keeps_empty_groups"
    admits_groups = True

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        return torch.ones(scores.shape[0], dtype=torch.bool, device=scores.device)


class ForgetsItsBand(Selector):
    """Narrows its band after each call but checkpoints nothing: a resumed one admits other groups."""

    name = "broken_admission_state"
    admits_groups = True

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls = 0

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        self.calls += 1
        keep = valid_mask_for(scores, batch)
        return keep if self.calls == 1 else keep & (scores > 0) & (scores < 1)


class RowLengthGroupScorer(Scorer):
    """Declares itself a group scorer but scores each row by its response length: unequal within a group."""

    name = "broken_uneven_group_scorer"
    requires = ["response_mask"]
    timing = "post_reward"
    granularity = "prompt"
    needs_groups = True
    score_range = (0.0, 1.0)

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        lengths = batch.batch["response_mask"].sum(-1).float()
        return lengths / (lengths.max() + 1.0)


#: Each broken admission selector and the one check that must catch it.
BROKEN_ADMISSION = {
    EvenLengthRows: "check_admits_whole_groups",
    KeepsEveryRow: "check_no_group_without_valid_row_admitted",
    ForgetsItsBand: "check_admission_state_round_trip",
}
