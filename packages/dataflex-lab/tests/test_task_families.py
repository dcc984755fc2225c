"""The task families: the structure as parameters, the binary rule, the held-out split, --task-params checked."""

from __future__ import annotations

import argparse

import pytest

from dataflex_lab import demo_report, task_families
from dataflex_lab.task_families import FAMILIES, SOLVED_ANSWER, UNSOLVABLE_ANSWER, TaskParamsError, structure_from


def test_the_rule_is_binary_and_hand_checked_cases_score_as_written():
    repeat, count = FAMILIES["repeat"], FAMILIES["count"]
    # repeat: the prompt's last letter, d times (d is the digit before it)
    assert repeat.reward("cc", "cc") == 1.0 and repeat.reward("ccc", "cc") == 1.0  # the head is what counts
    assert repeat.reward("cb", "cc") == 0.0 and repeat.reward("c", "cc") == 0.0 and repeat.reward("", "c") == 0.0
    # count: the number of a's, as a digit
    assert count.reward("2", "2") == 1.0 and count.reward("3", "2") == 0.0 and count.reward("a", "2") == 0.0
    for family in FAMILIES.values():
        assert family.reward("anything", SOLVED_ANSWER) == 1.0 and family.reward("", SOLVED_ANSWER) == 1.0
        assert family.reward("anything", UNSOLVABLE_ANSWER) == 0.0


def test_prompts_read_as_documented():
    import random

    text, answer = FAMILIES["repeat"].learnable(3, random.Random(0))
    assert text[-2] == "3" and answer == text[-1] * 3 and set(text[:2]) <= set("xyz")
    text, answer = FAMILIES["count"].learnable(5, random.Random(0))
    assert len(text) == 5 and set(text) <= {"a", "b"} and answer == str(text.count("a"))


@pytest.mark.parametrize("name", ["repeat", "count"])
def test_the_structure_is_what_the_params_say(name):
    family = FAMILIES[name]
    lo = family.default_difficulty[0]
    structure = structure_from(
        {"solved_fraction": 0.25, "unsolvable_fraction": 0.5, "train_prompts": 40, "held_out_prompts": 10,
         "difficulty": [lo, lo + 3]},
        family,
    )  # fmt: skip
    splits = family.build(structure, seed=3)
    kinds = [p.kind for p in splits.train]
    assert len(kinds) == 40 and kinds.count("solved") == 10 and kinds.count("unsolvable") == 20
    assert kinds.count("learnable") == 10
    assert all(p.answer == SOLVED_ANSWER for p in splits.train if p.kind == "solved")
    assert all(p.answer == UNSOLVABLE_ANSWER for p in splits.train if p.kind == "unsolvable")
    learnable = [p for p in splits.train if p.kind == "learnable"]
    assert all(lo <= p.difficulty <= lo + 3 for p in learnable + list(splits.held_out))
    # the held-out split: learnable prompts only, distinct texts, none of them trained on
    held = [p.text for p in splits.held_out]
    assert len(held) == 10 == len(set(held)) and {p.kind for p in splits.held_out} == {"learnable"}
    assert not set(held) & {p.text for p in splits.train}
    # every text is written in the family's alphabet (a character tokenizer can be built from it)
    marks = task_families.SOLVED_MARK + task_families.UNSOLVABLE_MARK
    assert all(set(p.text) <= set(family.alphabet + marks) for p in splits.train + splits.held_out)
    assert all(set(p.answer) <= set(family.alphabet) for p in learnable)
    # seeded: the same seed gives the same prompts, another seed others
    assert family.build(structure, seed=3) == splits and family.build(structure, seed=4).train != splits.train


def test_the_difficulty_knob_moves_the_chance_of_a_random_answer():
    """The band's easy end is easier: a response of random letters solves d = 1 far more often than d = 3."""
    import random

    family, rng = FAMILIES["repeat"], random.Random(0)
    rates = {}
    for d in (1, 3):
        hits = 0
        for _ in range(4000):
            text, answer = family.learnable(d, rng)
            hits += family.reward("".join(rng.choice(family.letters) for _ in range(d)), answer) == 1.0
        rates[d] = hits / 4000
    assert rates[1] == pytest.approx(1 / 8, abs=0.02) and rates[3] < 0.01


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ('{"solved_fraction": 0.6, "unsolvable_fraction": 0.5}', "leave no learnable prompts"),
        ('{"solved_fraction": 1.5}', "solved_fraction must be a number in \\[0, 1\\], got 1.5"),
        ('{"difficulty": [3, 1]}', "difficulty must be \\[lo, hi\\]"),
        ('{"difficulty": [0, 12]}', "not a range within \\[1, 9\\]"),
        ('{"train_prompt": 10}', "unknown key\\(s\\) \\['train_prompt'\\]"),
        ('{"train_prompts": 0}', "train_prompts must be a positive integer"),
        ('{"constants": "secret"}', "constants must be one of \\['marked', 'hidden'\\]"),
        ('{"difficulty_shares": [1, 2]}', "needs one non-negative share per level of \\[1, 3\\] \\(3 numbers"),
        ('{"difficulty_shares": "skewed"}', "difficulty_shares must be 'balanced', null or a list"),
        ('{"budget": 2}', "budget 2 is shorter than the band's longest answer \\(3 characters"),
        ('{"unsolvable": "budget", "budget": 9, "difficulty": [1, 9]}', "no level up to 9 has one"),
        ('{"held_out": "tags", "held_out_tags": 9}', "must leave tags on both sides"),
        ("[1, 2]", "must be a JSON object"),
        ("{bad", "not valid JSON"),
    ],
)
def test_bad_task_params_name_the_value_and_the_fix(params, message):
    with pytest.raises(TaskParamsError, match=message):
        structure_from(params, FAMILIES["repeat"])


def test_a_range_with_too_few_prompts_to_hold_out_is_refused():
    family = FAMILIES["count"]
    with pytest.raises(TaskParamsError, match="too few distinct prompts"):
        family.build(structure_from({"difficulty": [1, 2], "held_out_prompts": 10}, family), seed=0)


def test_the_demos_take_task_and_task_params():
    parser = argparse.ArgumentParser()
    demo_report.add_demo_arguments(parser, workdir="out")
    args = parser.parse_args(["--task", "count", "--task-params", '{"difficulty": [2, 4]}'])
    options = demo_report.DemoOptions(**demo_report.demo_options(args))
    assert options.task_family is FAMILIES["count"] and options.task_params == {"difficulty": [2, 4]}
    assert options.validation_interval == 5  # a family evaluates on its held-out split by default
    with pytest.raises(ValueError, match="needs --task with a task family"):
        demo_report.demo_options(parser.parse_args(["--task", "echo", "--task-params", "{}"]))
    with pytest.raises(ValueError, match="difficulty"):
        demo_report.demo_options(parser.parse_args(["--task", "repeat", "--task-params", '{"difficulty": [5, 1]}']))
    assert demo_report.DemoOptions(task="mixed").task_family is None


@pytest.mark.parametrize("name", ["band", "longtail"])
@pytest.mark.parametrize("seed", [0, 7])
def test_the_structured_families_give_the_stated_shares_levels_and_split(name, seed):
    """Counted on the generated prompts: the kinds' shares, the learnable band's split over its levels, the
    held-out split balanced over the levels and written with tags no train prompt has, every prompt in one form."""
    import re

    from dataflex_lab.task_families import split_counts

    family = FAMILIES[name]
    structure = structure_from(None, family)
    splits = family.build(structure, seed=seed)
    train, held = splits.train, splits.held_out
    n = structure.train_prompts
    kinds = [p.kind for p in train]
    assert len(train) == n and len({p.text for p in train}) == n  # no text twice, with two answers
    assert kinds.count("solved") == round(n * structure.solved_fraction)
    assert kinds.count("unsolvable") == round(n * structure.unsolvable_fraction)
    learnable = [p for p in train if p.kind == "learnable"]
    per_level = [sum(1 for p in learnable if p.difficulty == d) for d in structure.levels()]
    assert per_level == split_counts(len(learnable), structure.shares())
    assert [sum(1 for p in held if p.difficulty == d) for d in structure.levels()] == [8] * 5  # balanced
    # one form for every prompt: <tag><d><letter>; only the answer the rule checks tells the kinds apart
    form = re.compile(r"^[wxyz]{2}[1-9][abcd]$")
    assert all(form.match(p.text) for p in train + held)
    budget = family.response_length(structure)
    assert budget == 5
    for p in train:
        if p.kind == "solved":
            assert p.answer == SOLVED_ANSWER and p.difficulty in structure.levels()
        elif p.kind == "unsolvable":  # a real answer, longer than any response may be: no response solves it
            assert p.answer == p.text[-1] * int(p.text[-2]) and len(p.answer) > budget
            assert family.reward(p.answer[:budget], p.answer) == 0.0
        else:
            assert family.reward(p.answer, p.answer) == 1.0 and len(p.answer) <= budget
    # held out: learnable only, tags of their own, never a train text
    assert {p.kind for p in held} == {"learnable"} and not {p.text for p in held} & {p.text for p in train}
    held_tags, train_tags = {p.text[:2] for p in held}, {p.text[:2] for p in train}
    assert not held_tags & train_tags and len(held_tags) <= structure.held_out_tags
    assert family.build(structure, seed=seed) == splits  # seeded


def test_the_longtail_band_leans_to_its_hard_end_and_most_prompts_are_too_hard():
    family = FAMILIES["longtail"]
    splits = family.build(structure_from(None, family), seed=0)
    described = task_families.describe(splits)
    assert described["train_prompts"] == {"solved": 5, "unsolvable": 58, "learnable": 33}
    levels = described["learnable_per_level"]
    assert [levels[str(d)] for d in range(1, 6)] == [3, 5, 7, 8, 10]
    assert described["unsolvable"] == "budget" and described["held_out"] == "tags"


def test_today_families_draw_the_same_prompts_as_before():
    """repeat and count keep their prompts (the earlier campaigns' and the demos' runs stay reproducible)."""
    splits = FAMILIES["repeat"].build(structure_from(None, FAMILIES["repeat"]), seed=0)
    assert [(p.text, p.answer) for p in splits.train[:3]] == [("-7ga", "<none>"), ("xx3f", "fff"), ("-89h", "<none>")]
    assert [p.text for p in splits.held_out[:3]] == ["zy2e", "zy3b", "zz2c"]
    count = FAMILIES["count"].build(structure_from(None, FAMILIES["count"]), seed=0)
    assert [p.text for p in count.held_out[:3]] == ["baaaa", "baba", "bbaba"]


@pytest.mark.parametrize(("name", "params"), [("band", {}), ("longtail", {}), ("repeat", {"held_out": "tags"})])
def test_the_fixed_held_out_set_is_every_held_out_tag_letter_and_level_once_for_every_seed(name, params):
    """``held_out_prompts: "all"``: counted, each (tag, letter, level) of the held-out tags exactly once, the same
    prompts for every seed, none of them (nor their tags) trained on."""
    family = FAMILIES[name]
    structure = structure_from({**params, "held_out_prompts": "all"}, family)
    first, second = family.build(structure, 0), family.build(structure, 1)
    levels = structure.levels()
    cells = [(p.text[: family.tag_length], p.text[-1], p.difficulty) for p in first.held_out]
    assert len(cells) == len(set(cells)) == structure.held_out_tags * len(family.letters) * len(levels)
    tags = {tag for tag, _, _ in cells}
    assert len(tags) == structure.held_out_tags
    assert set(cells) == {(t, letter, d) for t in tags for letter in family.letters for d in levels}
    for p in first.held_out:  # each prompt is the skill at its level: the letter, level times
        assert p.answer == p.text[-1] * p.difficulty and p.kind == "learnable"
    assert [p.text for p in first.held_out] == [p.text for p in second.held_out]
    for splits in (first, second):
        assert not {p.text[: family.tag_length] for p in splits.train} & tags
        assert not {p.text for p in splits.train} & {p.text for p in splits.held_out}


def test_the_fixed_held_out_set_needs_tags_it_can_list():
    with pytest.raises(TaskParamsError, match="needs 'held_out': 'tags'"):
        structure_from({"held_out_prompts": "all"}, FAMILIES["count"])
    with pytest.raises(TaskParamsError, match="needs 'held_out': 'tags'"):
        structure_from({"held_out_prompts": "all"}, FAMILIES["repeat"])  # its default holds out texts
    with pytest.raises(TaskParamsError, match="a positive integer or 'all', got 'most'"):
        structure_from({"held_out_prompts": "most"}, FAMILIES["band"])
