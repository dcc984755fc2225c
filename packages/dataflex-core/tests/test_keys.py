"""Declared keys (``dataflex_core.keys``): one parser gives every mechanism's messages, naming the key, the value
seen, what is allowed and the fix; every built-in mechanism declares its keys as one table."""

import pytest

from dataflex_core import ConfigError
from dataflex_core.keys import Key, parse_keys
from dataflex_core.mechanisms import mechanisms

ROUNDS = {
    "rounds": Key(int, "rounds per step", default=4, low=1),
    "mode": Key(str, "raise stops, backfill completes", default="raise", choices=("raise", "backfill")),
    "keep": Key(bool, "true: kept", default=True),
    "threshold": Key(float, "a reward that succeeds"),
    "names": Key(list, "the domains", required=True, example="names: [math, code]"),
    "budget": Key(int, "rollouts a batch", low=1, high=2**40, example="budget: null"),
}
TABLE = {"part": Key(dict, "the part's keys", table=ROUNDS, example="part: {rounds: 4}"), "key": Key(str, "a column")}


def parsed(part, **top):
    return parse_keys(TABLE, {"part": part, **top}, "dataflex", partial=True)


def test_defaults_fill_what_is_absent_and_null_unsets_an_unset_key():
    assert parsed({"names": ["a"]}) == {
        "part": {"rounds": 4, "mode": "raise", "keep": True, "threshold": None, "names": ["a"], "budget": None},
        "key": None,
    }
    assert parsed({"names": ["a"], "threshold": 1, "budget": None})["part"]["threshold"] == 1.0
    assert parse_keys({"part": Key(dict, "x", table={"n": Key(int, "n", default=2)})}, {}, "dataflex") == {
        "part": {"n": 2}
    }


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ({"rounds": 0}, r"dataflex.part.rounds must be an integer >= 1 \(rounds per step\), got 0$"),
        ({"rounds": True}, r"rounds must be an integer >= 1 .*got True"),  # a bool is no integer
        ({"rounds": None}, r"rounds must be an integer >= 1 .*got None"),  # null only where the default is
        ({"mode": "shrink"}, r"dataflex.part.mode='shrink' is not one of raise, backfill; raise stops"),
        ({"keep": "yes"}, r"dataflex.part.keep must be true or false \(true: kept\), got 'yes'"),
        ({"threshold": float("nan")}, r"threshold must be a finite number or null .*got nan"),
        ({"names": []}, r"names must be a non-empty list of distinct names \(the domains\), got \[\]; e.g. names"),
        ({"names": ["a", "a"]}, r"names must be a non-empty list of distinct names .*got \['a', 'a'\]"),
        ({"budget": 10**30}, rf"budget must be an integer from 1 to {2**40} or null .*got {10**30}; e.g. budget: n"),
        ({"rond": 2}, r"dataflex.part has unknown keys \['rond'\] \(did you mean 'rounds'\?\); it accepts \['budget'"),
        ([1], r"dataflex.part must be a mapping or null \(the part's keys\), got \[1\]; e.g. part: \{rounds: 4\}"),
    ],
)
def test_a_bad_value_names_the_key_the_value_what_is_allowed_and_the_fix(part, message):
    if isinstance(part, dict):
        part = {"names": ["a"], **part}
    with pytest.raises(ConfigError, match=message):
        parsed(part)


def test_a_required_key_left_out_says_so():
    with pytest.raises(ConfigError, match=r"dataflex.part.names must be a non-empty list .*got unset; e.g. names"):
        parsed({})


def test_the_block_may_hold_other_keys_only_when_partial():
    assert parsed({"names": ["a"]}, other=1)["key"] is None
    with pytest.raises(ConfigError, match=r"dataflex has unknown keys \['other'\]; it accepts \['key', 'part'\]"):
        parse_keys(TABLE, {"other": 1}, "dataflex")


def test_every_built_in_mechanism_declares_its_keys_as_one_table():
    for cls in mechanisms():
        if cls.__module__.startswith("dataflex_core."):
            assert all(isinstance(key, Key) for key in cls.keys.values()), cls.name
