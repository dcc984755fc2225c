"""The command that puts back the locked bytes of the distributions that differ, from where each came.

Pinning every locked distribution (``dataflex lock --requirements``) reinstalls all of them to mend one, and
fails before they are published (no index has ``dataflex-core==0.3.0``). A distribution records where it was
installed from (``direct_url.json``, PEP 610): a folder (a checkout), a wheel file (a wheelhouse), or nothing
(an index). The restore reinstalls only the distributions that differ, each from that place, with
``--force-reinstall`` (a changed file keeps its version, so pip would call the pin satisfied) and
``--no-deps`` (torch and the rest stay as they are).
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

#: A row of :func:`.compare.compare` (``kind``, ``dist``, ``locked``): duck-typed, so this module sits below it.
Difference = Any

#: The pip invocation every restore starts with.
PIP_REINSTALL = "pip install --force-reinstall --no-deps"


@dataclass(frozen=True)
class InstallSource:
    """Where one distribution can be reinstalled from: ``kind`` is checkout, editable, wheelhouse or index."""

    dist: str
    version: str
    kind: str
    location: str = ""


def _installed(dist: str) -> importlib_metadata.Distribution | None:
    try:
        return importlib_metadata.distribution(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def install_source(dist: str, version: str) -> InstallSource:
    """Where ``dist`` (to be restored at ``version``) came from, read from its ``direct_url.json``."""
    found = _installed(dist)
    text = found.read_text("direct_url.json") if found is not None else None
    try:
        record = json.loads(text) if text else {}
    except ValueError:
        record = {}
    url = urlparse(str(record.get("url", "")))
    if url.scheme == "file":
        path = Path(unquote(url.path))
        if "dir_info" in record:
            editable = bool(record["dir_info"].get("editable"))
            return InstallSource(dist, version, "editable" if editable else "checkout", str(path))
        if path.suffix == ".whl":
            return InstallSource(dist, version, "wheelhouse", str(path.parent))
    return InstallSource(dist, version, "index")


def _restore_version(dist: str, rows: list[Difference]) -> str:
    """The locked version: a version or missing row says it; otherwise it is still the installed one."""
    for row in rows:
        if row.kind in ("version", "missing"):
            return row.locked
    found = _installed(dist)
    return found.version if found is not None else rows[0].locked


def restore_sources(differences: Iterable[Difference]) -> list[InstallSource]:
    """One source per distribution that differs (not one the lock does not list, or whose entry point is outside it:
    a reinstall mends neither)."""
    by_dist: dict[str, list[Difference]] = {}
    for row in differences:
        if row.kind not in ("unexpected", "outside"):  # reinstalling mends neither
            by_dist.setdefault(row.dist, []).append(row)
    return [install_source(dist, _restore_version(dist, rows)) for dist, rows in sorted(by_dist.items())]


def restore_commands(sources: Iterable[InstallSource]) -> list[str]:
    """The commands that restore ``sources``: one per checkout set, per wheelhouse and for the index."""
    sources = list(sources)
    commands = []
    folders = [shlex.quote(s.location) for s in sources if s.kind == "checkout"]
    if folders:
        commands.append(f"{PIP_REINSTALL} {' '.join(folders)}")
    for house in sorted({s.location for s in sources if s.kind == "wheelhouse"}):
        pins = " ".join(f"{s.dist}=={s.version}" for s in sources if s.kind == "wheelhouse" and s.location == house)
        commands.append(f"{PIP_REINSTALL} --no-index --find-links {shlex.quote(house)} {pins}")
    pins = " ".join(f"{s.dist}=={s.version}" for s in sources if s.kind == "index")
    if pins:
        commands.append(f"{PIP_REINSTALL} {pins}")
    return commands


def restore_lines(differences: Iterable[Difference]) -> list[str]:
    """What to run to restore the distributions that differ, each from where it was installed, or []."""
    sources = restore_sources(differences)
    lines = []
    commands = restore_commands(sources)
    if commands:
        names = ", ".join(s.dist for s in sources if s.kind != "editable")
        lines.append(f"restore the locked bytes of {names}: `{' && '.join(commands)}`")
    if any(s.kind == "index" for s in sources):
        lines.append(
            "  (not published to an index yet: add `--no-index --find-links WHEELHOUSE`, the folder of their wheels, "
            "or install their folders of the checkout instead)"
        )
    for source in sources:
        if source.kind == "editable":
            lines.append(
                f"{source.dist} is an editable install of {source.location}: its files are the checkout's own, so "
                f"restore them there (`git -C {shlex.quote(source.location)} checkout -- .`) or re-lock after review"
            )
    return lines
