"""A batch that refuses to hand out fields the component did not declare.

Hosts fetch only the fields a component lists in ``requires`` (plus
``response_mask``, ``is_padding`` and ``uid`` as
:data:`dataflex_core.contracts.GROUPS_RULE` says), so a
component that reads anything else works in a test and breaks, or silently
changes behaviour, in production. The guarded batch holds only the allowed
fields and records every attempt to read another one, even when the
component catches the ``KeyError`` and falls back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from dataflex_core import Batch
from dataflex_core.contracts import GROUPS_RULE

_MISSING = object()


class UndeclaredFieldError(KeyError):
    """A component read a batch field it did not declare."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class FieldGuard:
    """What a component may read, and the record of what it tried to read beyond that."""

    def __init__(self, who: str, requires: Iterable[str], needs_groups: bool, *, guard_uid: bool = True) -> None:
        self.who = who
        self.requires = list(requires)
        self.needs_groups = needs_groups
        self.guard_uid = guard_uid
        self.allowed = {"response_mask", "is_padding", *self.requires}
        if needs_groups or not guard_uid:
            self.allowed.add("uid")
        self.violations: list[str] = []

    def error(self, where: str, key: Any) -> UndeclaredFieldError:
        if key == "uid":
            message = (
                f"{self.who} read {where}['uid'] with needs_groups=False, expected no read of it: {GROUPS_RULE}; "
                "set needs_groups = True"
            )
        else:
            message = (
                f"{self.who} read {where}[{key!r}], which is not in requires={self.requires!r}, expected reads of "
                f"declared fields only (plus response_mask, is_padding); add {key!r} to requires"
            )
        self.violations.append(message)
        return UndeclaredFieldError(message)


class GuardedFields(dict):
    """A ``dict`` of the allowed fields that raises :class:`UndeclaredFieldError` for any other key."""

    def __init__(self, values: dict, guard: FieldGuard, where: str) -> None:
        super().__init__({k: v for k, v in values.items() if k in guard.allowed})
        self._guard = guard
        self._where = where

    def __getitem__(self, key: Any) -> Any:
        if key not in self._guard.allowed:
            raise self._guard.error(self._where, key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        if key not in self._guard.allowed:
            raise self._guard.error(self._where, key)
        return super().get(key, default)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        if key not in self._guard.allowed:
            raise self._guard.error(self._where, key)
        return super().pop(key) if default is _MISSING else super().pop(key, default)


class GuardedBatch(Batch):
    """:class:`dataflex_core.Batch` whose ``.batch`` and ``.non_tensor_batch`` are guarded."""

    def __init__(self, batch: Batch, guard: FieldGuard) -> None:
        super().__init__({}, {}, batch.meta_info)
        self.guard = guard
        self.batch = GuardedFields(batch.batch, guard, "batch.batch")
        self.non_tensor_batch = GuardedFields(batch.non_tensor_batch, guard, "batch.non_tensor_batch")

    def select_rows(self, rows: torch.Tensor) -> GuardedBatch:
        plain = Batch(dict(self.batch), dict(self.non_tensor_batch), self.meta_info).select_rows(rows)
        return GuardedBatch(plain, self.guard)
