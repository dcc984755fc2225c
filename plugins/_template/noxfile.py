"""Sessions of this plugin package: ``nox -s tests`` and ``nox -s conformance``.

Each session's virtualenv holds only this package (with the requirements its
pyproject declares), ``dataflex-core`` and ``dataflex-conformance``, so a
dependency you forgot to declare fails here instead of on a user's machine.

Where DataFlex comes from is ``DATAFLEX_FROM``:

- ``index`` (the default): pip's configured index (PyPI, or ``PIP_INDEX_URL``);
- a DataFlex checkout, e.g. ``DATAFLEX_FROM=../dataflex``: its
  ``packages/dataflex-core`` and ``conformance`` folders;
- a wheelhouse, e.g. ``DATAFLEX_FROM=../dataflex/dist``: a folder of wheels
  that ``nox -s build`` in a DataFlex checkout wrote.

torch is installed first from ``DATAFLEX_TORCH`` (default ``torch==2.13.0``):
pin the build you certify against, CPU or CUDA.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import nox

HERE = Path(__file__).resolve().parent
DIST = nox.project.load_toml(HERE / "pyproject.toml")["project"]["name"]
TORCH = os.environ.get("DATAFLEX_TORCH", "torch==2.13.0")

nox.options.sessions = ["tests", "conformance"]


def dataflex_requirements(session: nox.Session) -> list[str]:
    """pip arguments that install ``dataflex-core`` and ``dataflex-conformance`` from ``DATAFLEX_FROM``."""
    spec = os.environ.get("DATAFLEX_FROM", "index")
    if spec == "index":
        # Ask the index first (two small downloads) rather than after minutes of installing torch.
        probe = subprocess.run(
            [
                Path(session.bin) / "python",
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "--dest",
                session.create_tmp(),
                "dataflex-core",
                "dataflex-conformance",
            ],
            capture_output=True,
            text=True,
        )
        if probe.returncode:
            last = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
            session.error(
                "dataflex-core and dataflex-conformance are not on your package index (not published yet, or a "
                f"private index that is not configured; pip: {last}). Set DATAFLEX_FROM to a DataFlex checkout "
                "(DATAFLEX_FROM=../dataflex) or to a wheelhouse built there by `nox -s build` (DATAFLEX_FROM=../dataflex/dist)"
            )
        return ["dataflex-core", "dataflex-conformance"]
    path = Path(spec).expanduser().resolve()
    if (path / "packages" / "dataflex-core" / "pyproject.toml").is_file():
        return [str(path / "packages" / "dataflex-core"), str(path / "conformance")]
    if path.is_dir() and any(path.glob("dataflex_core-*.whl")):
        return ["--find-links", str(path), "dataflex-core", "dataflex-conformance"]
    session.error(
        f"DATAFLEX_FROM={spec!r} is not 'index', a DataFlex checkout (a folder with packages/dataflex-core) "
        "or a folder of wheels (dataflex_core-*.whl, written by `nox -s build` in a checkout)"
    )


def install(session: nox.Session, *extra: str) -> None:
    dataflex = dataflex_requirements(session)  # a bad DATAFLEX_FROM stops here, before torch is installed
    session.install(TORCH)
    session.install(*dataflex, ".", *extra)


@nox.session
def tests(session: nox.Session) -> None:
    """The package's own tests, and every conformance check as a pytest test (tests/test_conformance.py)."""
    install(session, "pytest>=8")
    session.run("pytest", "tests", *session.posargs)


@nox.session
def conformance(session: nox.Session) -> None:
    """Certify the installed package: ``nox -s conformance -- [--device cuda] [--xfail CHECK=REASON]``.

    Exits 0 only when every check passes; the JSON certificate goes to
    ``reports/conformance.json``.
    """
    install(session)
    session.run("dataflex-conformance", DIST, "--report", "reports/conformance.json", *session.posargs)
