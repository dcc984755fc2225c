"""Checks of ``pre_rollout`` scorers and samplers, the components of ``mechanism: curriculum``.

A curriculum decides which prompts are rolled out at all, so its promises
are about the draw: a sampler's probabilities are non-negative and sum to one
over the candidates, and no prompt is starved forever (every candidate keeps
at least the floor the sampler declares through ``min_probability``; a
default configuration that declares none is refused, a zero floor is what a
user asks for with a param). A ``pre_rollout`` scorer's state (what it learnt
from earlier steps through ``observe``) must survive a checkpoint, its
scores must not depend on the order of the candidates, and neither may
change what a host hands it.
"""

from __future__ import annotations

import torch

from dataflex_core.contracts import SUM_TOLERANCE, below_floor, nearly_uniform, sums_to_one, tolerance_text

from .batches import score_range_of
from .checks_common import INPUTS_UNTOUCHED, _guarded_call, changed_batch, close, max_difference, resumed
from .guarded import FieldGuard
from .probe import STEP_ID, Probe
from .prompt_batches import PromptSample
from .prompt_probe import PromptProbe


def _who(probe: Probe) -> str:
    return f"{probe.subject.kind} {probe.subject.name!r}"


def _what(probe: Probe) -> str:
    return "scores" if probe.subject.kind == "scorer" else "probabilities"


def _output(probe: PromptProbe, sample: PromptSample | None = None) -> tuple[torch.Tensor, PromptSample]:
    out, sample, _ = probe.run(sample)
    return probe.readable(out, sample), sample


# -- what a component reads and leaves ----------------------------------------------------------


def check_prompt_fields_declared(probe: PromptProbe) -> None:
    """Only the history fields and dataset columns in ``requires`` are read (``prompt_index`` is always there)."""
    declared = probe.instance()
    guard = FieldGuard(_who(probe), declared.requires, False)
    guard.allowed.add("prompt_index")
    _guarded_call(probe, guard)


def check_prompts_not_mutated(probe: PromptProbe) -> None:
    """The candidates' batch, the observed outcomes and the scores given to a sampler are left as they were."""
    sample = probe.sample()
    scores = None if probe.subject.kind == "scorer" else probe.scores(sample)
    before = sample.clone()
    scores_before = None if scores is None else scores.clone()
    probe.call(probe.component(), sample, scores)
    changes = changed_batch("candidates", before.batch, sample.batch)
    for (step, old), (_, new) in zip(before.outcomes, sample.outcomes):
        changes += changed_batch(f"outcomes of step {step}", old, new)
    if scores is not None and not torch.equal(scores, scores_before):
        changes.append("scores")
    if changes:
        raise probe.fail(f"modified its input: {'; '.join(changes)}, expected {INPUTS_UNTOUCHED}")


# -- reproducible, order-free, checkpointable -------------------------------------------------------


def check_prompts_deterministic(probe: PromptProbe) -> None:
    """Two fresh instances fed the same outcomes give the same output on the same candidates."""
    sample = probe.sample()
    first, _ = _output(probe, sample)
    second, _ = _output(probe, sample.clone())
    if not close(first, second):
        diff, where = max_difference(first, second)
        raise probe.fail(
            f"two fresh instances on identical input differ by up to {diff:.4g} at {where}, expected identical "
            f"{_what(probe)} (seed any randomness from the params and step_id)"
        )


def check_candidate_order_free(probe: PromptProbe) -> None:
    """Reordering the candidates reorders the output the same way: a prompt's score or probability is its own."""
    sample = probe.sample()
    if len(sample) < 2:
        return
    out, _ = _output(probe, sample)
    gen = torch.Generator().manual_seed(probe.case.seed + 1)
    perm = torch.randperm(len(sample), generator=gen)
    moved = sample.clone().permuted(perm)  # a sampler's scores move with their candidates
    out_moved, _ = _output(probe, moved)
    expected = out[perm.to(out.device)]
    if not close(out_moved, expected):
        diff, where = max_difference(out_moved, expected)
        raise probe.fail(
            f"{_what(probe)} of reordered candidates differ from the reordered {_what(probe)} by up to {diff:.4g} "
            f"at {where}, expected f(candidates[perm]) == f(candidates)[perm] (index state by prompt_index, "
            "draw randomness per prompt, not per row)"
        )


def check_state_round_trip(probe: PromptProbe) -> None:
    """``state_dict`` after observing, saved and read back as a resume reads it (``weights_only=True``) into a
    fresh instance, gives the same scores: a resumed run continues where it stopped."""
    sample = probe.sample()
    trained = probe.component()
    probe.observe(trained, sample)
    resumed_scorer = resumed(probe, trained)
    before = probe.readable(trained.score(sample.batch, STEP_ID), sample)
    after = probe.readable(resumed_scorer.score(sample.batch, STEP_ID), sample)
    if not close(before, after):
        diff, where = max_difference(before, after)
        raise probe.fail(
            f"scores after restoring state_dict() differ by up to {diff:.4g} at {where} from the instance that "
            "observed the outcomes, expected a resumed scorer to score as before (save every statistic)"
        )


def check_prompt_scores_in_declared_range(probe: PromptProbe) -> None:
    """A scorer declaring ``score_range`` keeps every candidate's score inside it (samplers pair on it)."""
    lo, hi = score_range_of(probe.subject.cls)
    out, _ = _output(probe)
    probe.finite(out, "check_output_finite", "score")
    values = out.double()
    outside = (values < lo) | (values > hi)
    if outside.any():
        first = int(outside.nonzero()[0])
        raise probe.fail(
            f"{int(outside.sum())} of {len(values)} scores lie outside score_range=({lo:g}, {hi:g}) (e.g. "
            f"{values[first].item():.6g} at {first}), expected every score inside the declared range"
        )


# -- samplers -----------------------------------------------------------------------------------------


def _probabilities(probe: PromptProbe) -> tuple[torch.Tensor, PromptSample]:
    p, sample = _output(probe)
    return probe.finite(p, "check_output_finite", "probability"), sample


def check_probabilities_nonnegative(probe: PromptProbe) -> None:
    """No candidate has a negative probability."""
    p, _ = _probabilities(probe)
    if (p < 0).any():
        raise probe.fail(
            f"probabilities min={p.min().item():.4g} at {int((p < 0).nonzero()[0])}, expected every probability >= 0"
        )


def check_probabilities_sum_to_one(probe: PromptProbe) -> None:
    """The probabilities over the candidates sum to one."""
    p, _ = _probabilities(probe)
    if not sums_to_one(p):
        total = p.double().sum().item()
        raise probe.fail(
            f"probabilities sum={total:.6g} over {len(p)} candidates, expected 1 ± {tolerance_text(SUM_TOLERANCE)}"
        )


def check_no_prompt_starved(probe: PromptProbe) -> None:
    """Every candidate keeps at least ``min_probability(n)``, and a default configuration promises a positive floor.

    A floor of 0 (prompts may starve) is accepted only when the params certified were chosen (a user asked
    for it); with default params it fails.
    """
    p, sample = _probabilities(probe)
    n = len(sample)
    floor = float(probe.instance().min_probability(n))
    if floor <= 0 and not probe.subject.params:
        raise probe.fail(
            f"min_probability({n}) = {floor:g} with default params, expected a positive floor: a curriculum must "
            "not starve a prompt forever unless asked (mix in a uniform share and declare it in min_probability)"
        )
    starved = below_floor(p, floor)
    if starved.any():
        first = int(starved.nonzero()[0])
        raise probe.fail(
            f"{int(starved.sum())} of {n} candidates get less than the declared min_probability({n}) = {floor:.4g} "
            f"(e.g. {p[first].item():.4g} at {first}), expected every candidate at or above the floor"
        )


def check_constant_scores_uniform_probabilities(probe: PromptProbe) -> None:
    """Equal scores give every candidate the same probability."""
    p, _ = _probabilities(probe)
    low, high = p.min().item(), p.max().item()
    if not nearly_uniform(p, SUM_TOLERANCE):
        raise probe.fail(f"probabilities range [{low:.4g}, {high:.4g}] for equal scores, expected a uniform draw")


def check_sampler_rejects_out_of_range(probe: PromptProbe) -> None:
    """A sampler declaring ``score_range`` raises ``ValueError`` for a score outside it."""
    lo, hi = score_range_of(probe.subject.cls)
    sample = probe.sample()
    scores = probe.scores(sample).clone()
    bad = hi + 1.0 if hi < float("inf") else lo - 1.0
    scores[0] = bad
    try:
        out = probe.component().act(scores, sample.batch, step_id=STEP_ID)
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001
        raise probe.fail(
            f"a score of {bad:g} outside score_range=({lo:g}, {hi:g}) raised {type(exc).__name__}: {exc}, expected "
            "a ValueError naming the range"
        ) from exc
    raise probe.fail(
        f"act() returned {type(out).__name__} for a score of {bad:g} outside score_range=({lo:g}, {hi:g}), expected "
        "a ValueError naming the range"
    )
