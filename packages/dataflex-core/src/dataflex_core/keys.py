"""Declared keys: a mechanism's keys of the ``dataflex:`` block as one table of :class:`Key`, read by one parser.

The messages (the key, the value seen, what is allowed and the fix) are written here once, as scikit-learn writes its
parameter constraints'. What relates two keys (``n_max`` not below ``n_min``) stays with the mechanism that owns them.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from .errors import ConfigError

#: What each kind of key accepts, in words.
KINDS = {
    int: "an integer",
    float: "a finite number",
    bool: "true or false",
    str: "a non-empty string",
    list: "a non-empty list of distinct names",
    dict: "a mapping",
}


@dataclass(frozen=True)
class Key:
    """One key: the values it takes, its default and what it means (the message says it back to the user).

    :param kind: ``int``, ``float`` (a finite number, an integer too), ``bool``, ``str`` (non-empty), ``list``
        (a non-empty list of distinct non-empty strings) or ``dict`` (a mapping; with ``table``, read by it).
    :param meaning: what the value does, in a few words.
    :param default: the value when the key is absent; with ``None`` the key may be unset (``null`` too).
    :param required: absent or ``null`` is an error.
    :param low: the least value of a number (inclusive); :param high: the greatest.
    :param choices: the strings a ``str`` key may be.
    :param table: the keys of a ``dict`` key (``None``: any mapping, kept as given).
    :param example: the fix's example, e.g. ``prompt_key: index``.
    """

    kind: type
    meaning: str
    default: Any = None
    required: bool = False
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    table: Mapping[str, Key] | None = None
    example: str = ""

    @property
    def unset(self) -> bool:
        """``null`` (or no value) is a value of this key: it is unset."""
        return self.default is None and not self.required

    def allowed(self) -> str:
        """What the key accepts, in words (``an integer >= 1 or null``)."""
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        text = KINDS[self.kind]
        if self.low is not None and self.high is not None:
            text += f" from {self.low} to {self.high}"
        elif self.low is not None:
            text += f" >= {self.low}"
        elif self.high is not None:
            text += f" <= {self.high}"
        return f"{text} or null" if self.unset else text


def parse_keys(table: Mapping[str, Key], mapping: Any, where: str, *, partial: bool = False) -> dict[str, Any]:
    """The keys of ``table`` read from ``mapping`` (``None``: empty), checked, defaults filled in.

    :param where: the mapping's place in the config, for messages (``dataflex``, ``dataflex.filter``).
    :param partial: ``mapping`` holds other keys too (the ``dataflex:`` block, read in parts by the core, the host
        and the mechanism); otherwise a key outside ``table`` is an error listing the accepted ones.
    :raises ConfigError: naming the key, the value seen, what is allowed and the fix.
    """
    plain = {} if mapping is None else mapping
    if not isinstance(plain, Mapping):
        raise ConfigError(f"{where} must be a mapping of the keys {', '.join(table)}, got {mapping!r}")
    unknown = sorted(set(plain) - set(table))
    if unknown and not partial:
        close = difflib.get_close_matches(str(unknown[0]), list(table), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{where} has unknown keys {unknown}{hint}; it accepts {sorted(table)}")
    return {name: _value(key, name in plain, plain.get(name), f"{where}.{name}") for name, key in table.items()}


def _value(key: Key, given: bool, value: Any, path: str) -> Any:
    if value is None:  # absent, or written as null
        if key.required or (given and not key.unset):
            _refuse(key, repr(value) if given else "unset", path)
        if key.table is not None and key.default is None:
            return parse_keys(key.table, None, path)
        return key.default
    if key.choices:
        if value not in key.choices:
            raise ConfigError(f"{path}={value!r} is not one of {', '.join(key.choices)}; {key.meaning}")
        return value
    if not _fits(key, value):
        _refuse(key, repr(value), path)
    if key.table is not None:
        return parse_keys(key.table, value, path)
    converted = {float: float, dict: dict, list: list}.get(key.kind)
    return value if converted is None else converted(value)


def _fits(key: Key, value: Any) -> bool:
    """``value`` is of ``key``'s kind and within its range."""
    if key.kind is dict:
        return isinstance(value, Mapping)
    if key.kind is list:
        names = list(value) if isinstance(value, (list, tuple)) else []
        return bool(names) and all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names)
    if key.kind is str:
        return isinstance(value, str) and bool(value)
    if isinstance(value, bool) or key.kind is bool:
        return isinstance(value, bool) and key.kind is bool
    number = int if key.kind is int else (int, float)
    if not isinstance(value, number) or (isinstance(value, float) and not math.isfinite(value)):
        return False
    return (key.low is None or value >= key.low) and (key.high is None or value <= key.high)


def _refuse(key: Key, seen: str, path: str) -> NoReturn:
    fix = f"; e.g. {key.example}" if key.example else ""
    raise ConfigError(f"{path} must be {key.allowed()} ({key.meaning}), got {seen}{fix}")
