"""A checkpoint's counters and sampler state are bounded by what a run can record (issue 58 item 1, F8): the
compute totals by the steps the checkpoint ran, the mixture sampler's passes, cursors, drawn counts and proportions
field by field; each refusal names the file or the field, the value and the bound."""

from __future__ import annotations

import pytest
import torch

from dataflex_core.compute import COUNTERS, ComputeTotals, compute_counters
from dataflex_core.state_fields import StateFieldError
from dataflex_core.step import DomainMixtureSampler
from dataflex_core.step.state import (
    CHECKPOINT_STATE,
    ComponentStateError,
    encode_component_state,
    read_component_state,
    restore_component_state,
    write_component_state,
)

# -- the compute totals: bounded by the steps the run took --------------------------------------------------------


def totals_after(steps: int) -> ComputeTotals:
    """The totals of ``steps`` steps of 4 rollouts with 3 response tokens each."""
    totals = ComputeTotals()
    for _ in range(steps):
        compute_counters(torch.ones(4, 3), totals=totals)
    return totals


def saved_totals(tmp_path, steps: int, altered: dict[str, int] | None = None):
    """A checkpoint folder whose compute totals, saved at ``global_steps=steps``, are altered to ``altered``."""
    folder = tmp_path / f"global_step_{steps}"
    folder.mkdir()
    write_component_state(folder, encode_component_state({"compute": totals_after(steps)}, steps))
    payload = torch.load(folder / CHECKPOINT_STATE, weights_only=True)
    payload["components"]["compute"]["state"].update(altered or {})
    torch.save(payload, folder / CHECKPOINT_STATE)
    return folder


def test_sound_totals_resume_with_their_steps(tmp_path):
    folder = saved_totals(tmp_path, 10)
    resumed = ComputeTotals()
    restore_component_state(read_component_state(folder), {"compute": resumed}, folder)
    assert resumed.steps == 10
    assert resumed.totals["rollouts_generated"] == 40 and resumed.totals["tokens_generated"] == 120
    assert resumed.totals["generation_rounds"] == 10


@pytest.mark.parametrize(
    ("altered", "message"),
    [
        # every counter altered consistently to 10^12: the rounds are more than 10 steps run
        ({name: 10**12 for name in COUNTERS if name not in ("refills",)},
         r"state\['generation_rounds'\] is 1000000000000: it is at most steps \(10\) x 65536 .* = 655360"),
        ({"rollouts_generated": 10**12}, r"state\['rollouts_generated'\] is 1000000000000: it is at most "
         r"generation_rounds \(10\) x 16777216 \(the most rollouts a generation round makes\) = 167772160"),
        ({"tokens_generated": 10**12}, r"state\['tokens_generated'\] is 1000000000000: it is at most "
         r"rollouts_generated \(40\) x 16777216"),
        # and the steps themselves altered with them: more than the checkpoint's global_steps allow
        ({**{name: 10**12 for name in COUNTERS if name != "refills"}, "steps": 10**12},
         r"state\['steps'\] is 1000000000000: it is at most global_steps \(10\) x 1024 .* = 10240"),
        ({"steps": -1}, r"state\['steps'\] is -1: it lies between 0 and"),
    ],
)  # fmt: skip
def test_totals_no_run_of_its_steps_counts_are_refused_naming_file_field_value_and_bound(tmp_path, altered, message):
    folder = saved_totals(tmp_path, 10, altered)
    with pytest.raises(ComponentStateError, match=rf"global_step_10/{CHECKPOINT_STATE}: .*compute.*{message}"):
        restore_component_state(read_component_state(folder), {"compute": ComputeTotals()}, folder)


# -- the mixture sampler ---------------------------------------------------------------------------------------------


def mixture(proportions=(0.5, 0.5)) -> DomainMixtureSampler:
    """Six rows over domains x (rows 0, 2, 4) and y (1, 3, 5), blocks of 2."""
    return DomainMixtureSampler([0, 1, 0, 1, 0, 1], ["x", "y"], 2, torch.tensor(proportions))


def drawn(sampler: DomainMixtureSampler, count: int = 3):
    """``sampler`` after ``count`` indices of its pass (mid-block), and the iterator that drew them."""
    iterator = iter(sampler)
    for _ in range(count):
        next(iterator)
    return iterator


@pytest.fixture
def drawn_state():
    sampler = mixture()
    drawn(sampler)
    return sampler.state_dict()


def test_a_sound_mixture_state_resumes_the_same_draws():
    sampler = mixture()
    rest = drawn(sampler)
    resumed = mixture((0.9, 0.1))
    resumed.load_state_dict(sampler.state_dict())
    assert list(resumed) == list(rest)
    assert resumed.drawn.tolist() == sampler.drawn.tolist() and resumed.proportions.tolist() == [0.5, 0.5]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("perms", [torch.tensor([0, 2]), torch.tensor([1, 3, 5])],
         r"state\['perms\[0\]'\] .*: it is a permutation of the 3 rows of domain 'x'"),
        ("perms", [torch.tensor([0, 2, 1]), torch.tensor([1, 3, 5])],
         r"state\['perms\[0\]'\] .*: it is a permutation of the 3 rows of domain 'x'"),
        ("perms", [torch.tensor([0, 2, 9]), torch.tensor([1, 3, 5])], r"state\['perms\[0\]'\] .* holds row 9"),
        ("perms", [torch.tensor([0, 2, 4])], r"state\['perms'\] .*: it holds one value per domain \(2"),
        ("cursor", [7, 0], r"state\['cursor\[0\]'\] is 7: it lies between 0 and 3"),
        ("cursor", [-1, 0], r"state\['cursor\[0\]'\] is -1"),
        ("cursor", [0], r"state\['cursor'\] is \[0\]: it holds one value per domain"),
        ("drawn", [-5, 7], r"state\['drawn\[0\]'\] is -5: it lies between 0 and"),
        ("drawn", [2**70, 0], r"state\['drawn\[0\]'\] is 1180591620717411303424"),
        ("drawn", [1, 0], r"state\['drawn'\] is \[1, 0\]: a sampler draws whole blocks of 2 prompts"),
        ("drawn", [1.5, 0.5], r"state\['drawn\[0\]'\] is 1.5: it is a whole number"),
        ("proportions", [float("nan"), 1.0], r"state\['proportions'\] is \[nan, 1.0\]: they are finite"),
        ("proportions", [-0.5, 1.5], r"state\['proportions'\] is \[-0.5, 1.5\]: .*never negative"),
        ("proportions", [1.0], r"state\['proportions'\] is \[1.0\]: it holds one value per domain"),
        ("proportions", ["a", "b"], r"state\['proportions'\] is \['a', 'b'\]: they are numbers"),
    ],
)  # fmt: skip
def test_an_altered_mixture_state_is_refused_naming_the_field_and_value(drawn_state, key, value, message):
    with pytest.raises(StateFieldError, match=message):
        mixture().load_state_dict({**drawn_state, key: value})


def test_a_mixture_state_over_another_dataset_names_both_sizes(drawn_state):
    bigger = DomainMixtureSampler([0, 1] * 4, ["x", "y"], 2, torch.tensor([0.5, 0.5]))
    with pytest.raises(Exception, match=r"train dataset of 6 rows, but this run's has 8"):
        bigger.load_state_dict(drawn_state)
