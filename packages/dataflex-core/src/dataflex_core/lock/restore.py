"""The one command that puts back the locked bytes of the distributions that differ.

Each is reinstalled from where it was installed from (``direct_url.json``, PEP 610) with
``--force-reinstall`` (a changed file keeps its version) and ``--no-deps``; an editable install is named apart,
since no reinstall restores a checkout's files.
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import json
import shlex
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlparse

#: A row of :func:`.compare.compare` (``kind``, ``dist``, ``locked``): duck-typed, so this module sits below it.
Difference = Any

#: The pip invocation every restore starts with: ``--force-reinstall`` because pip leaves a satisfied pin alone
#: (changed bytes keep their version), ``--no-deps`` so torch and the rest are not reinstalled.
PIP_REINSTALL = "pip install --force-reinstall --no-deps"


def _installed(dist: str) -> importlib_metadata.Distribution | None:
    try:
        return importlib_metadata.distribution(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def install_source(dist: str, version: str) -> tuple[str, bool]:
    """``(what pip reinstalls dist from, editable)``: its checkout folder or wheel file, else ``dist==version``
    (an index); for an editable install, its folder."""
    found = _installed(dist)
    text = found.read_text("direct_url.json") if found is not None else None
    try:
        record = json.loads(text) if text else {}
    except ValueError:
        record = {}
    url = urlparse(str(record.get("url", ""))) if isinstance(record, dict) else urlparse("")
    if url.scheme != "file":
        return f"{dist}=={version}", False
    dir_info = record.get("dir_info")
    return unquote(url.path), isinstance(dir_info, dict) and bool(dir_info.get("editable"))


def _restore_version(dist: str, rows: list[Difference]) -> str:
    """The locked version: a version or missing row says it; otherwise it is still the installed one."""
    for row in rows:
        if row.kind in ("version", "missing"):
            return row.locked
    found = _installed(dist)
    return found.version if found is not None else rows[0].locked


def restore_lines(differences: Iterable[Difference]) -> list[str]:
    """The one command that restores the distributions that differ (not one the lock does not list, or whose entry
    point is outside it: a reinstall mends neither), and a line per editable install; or []."""
    by_dist: dict[str, list[Difference]] = {}
    for row in differences:
        if row.kind not in ("unexpected", "outside"):
            by_dist.setdefault(row.dist, []).append(row)
    sources = {dist: install_source(dist, _restore_version(dist, rows)) for dist, rows in sorted(by_dist.items())}
    lines = []
    reinstall = {dist: target for dist, (target, editable) in sources.items() if not editable}
    if reinstall:
        targets = " ".join(shlex.quote(t) for t in reinstall.values())
        lines.append(f"restore the locked bytes of {', '.join(reinstall)}: `{PIP_REINSTALL} {targets}`")
    for dist, (folder, editable) in sources.items():
        if editable:
            lines.append(
                f"{dist} is an editable install of {folder}: its files are the checkout's own, so restore them there "
                f"(`git -C {shlex.quote(folder)} checkout -- .`) or re-lock after review"
            )
    return lines
