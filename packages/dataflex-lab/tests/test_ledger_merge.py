"""``dataflex ledger merge``: two halves of a run merge into the ledger of the whole; the prior counted once."""

from __future__ import annotations

import pytest
import torch

from dataflex_core.cli import main
from dataflex_core.ledger import SOLVE_RATE_PRIOR
from dataflex_core.ledger_file import COLUMNS
from dataflex_lab.ledger import LedgerError, load_ledger, merge_two
from dataflex_lab.ledger.merge import ADDED, LATEST
from dataflex_lab.testing.ledgers import recorded, step_batches


def test_every_counter_has_a_merge_rule():
    assert set(ADDED) | set(LATEST) | {"uniform_reward_streak"} == set(COLUMNS)


@pytest.mark.parametrize("split", [1, 5, 9])
def test_the_merge_of_two_halves_is_the_ledger_of_the_whole(tmp_path, capsys, split):
    batches = step_batches(10, seed=split)
    whole = recorded(batches)
    recorded(batches[:split]).export(tmp_path / "first.parquet")
    recorded(batches[split:], first_step=split + 1).export(tmp_path / "second.parquet")
    out = tmp_path / "merged.parquet"
    assert main(["ledger", "merge", str(tmp_path / "first.parquet"), str(tmp_path / "second.parquet"),
                 "-o", str(out)]) == 0  # fmt: skip
    assert "2 ledgers of 40 prompts merged" in capsys.readouterr().err
    merged = load_ledger(out)
    assert merged.last_step == whole.last_step == 10
    for name in COLUMNS:
        assert torch.equal(getattr(merged, name), getattr(whole, name)), name
    for ours, theirs in zip(merged.solve_rate_posterior(), whole.solve_rate_posterior()):
        assert torch.equal(ours, theirs)


def test_the_posteriors_combine_their_evidence_not_their_priors():
    batches = step_batches(6, seed=3)
    first, second = recorded(batches[:3]), recorded(batches[3:], first_step=4)
    merged = merge_two(first, second)
    (a1, b1), (a2, b2), (a, b) = (
        first.solve_rate_posterior(),
        second.solve_rate_posterior(),
        merged.solve_rate_posterior(),
    )
    assert torch.equal(a, a1 + a2 - SOLVE_RATE_PRIOR[0]) and torch.equal(b, b1 + b2 - SOLVE_RATE_PRIOR[1])


def test_ledgers_of_different_datasets_or_rules_are_not_merged():
    batches = step_batches(2)
    with pytest.raises(LedgerError, match="keys its prompts by 'index' and B by 'uid'"):
        merge_two(recorded(batches), recorded(batches, key="uid"))
    other = recorded(batches)
    other.success_threshold = 0.5
    with pytest.raises(LedgerError, match="success_threshold"):
        merge_two(recorded(batches), other)
