"""Sessions of the DataFlex monorepo.

Each session installs the packages it needs from this working tree into its
own virtualenv. torch is pinned to a CPU build through ``DATAFLEX_TORCH``
(default ``torch==2.13.0``) because an open ``torch`` requirement can pull a
multi-GB CUDA build; the packages' own requirements stay open.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
#: The torch requirement sessions install first (set e.g. DATAFLEX_TORCH="torch==2.13.0+cpu").
TORCH = os.environ.get("DATAFLEX_TORCH", "torch==2.13.0")
#: verl and TransferQueue versions the host is tested against (see VERL_FACTS / docs).
VERL_STACK = ["verl==0.9.1", "transferqueue==0.1.11", "tensordict==0.10.0", "cachetools", "fastapi", "uvicorn"]

CORE = ROOT / "packages" / "dataflex-core"
HOST = ROOT / "packages" / "dataflex-verl"
CONFORMANCE = ROOT / "conformance"

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = False


def plugin_dirs() -> list[Path]:
    """Every shipped plugin package (``plugins/*`` with a pyproject, the template excluded)."""
    return sorted(p for p in (ROOT / "plugins").glob("*") if (p / "pyproject.toml").exists() and p.name != "_template")


def install_torch(session: nox.Session) -> None:
    session.install(TORCH)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_absolute() else str(path)


def monorepo_dists(with_host: bool = True) -> list[Path]:
    """Core, conformance, every plugin and (optionally) the verl host, as present in the tree."""
    dists = [CORE, *plugin_dirs()]
    if (CONFORMANCE / "pyproject.toml").exists():
        dists.append(CONFORMANCE)
    if with_host and (HOST / "pyproject.toml").exists():
        dists.append(HOST)
    return dists


@nox.session
def tests(session: nox.Session) -> None:
    """Every package's tests, with the real verl stack installed for the host's tests."""
    install_torch(session)
    dists = monorepo_dists()
    extra = VERL_STACK if HOST in dists else []
    session.install(*extra, *(rel(d) for d in dists), "pytest>=8", "omegaconf", "hydra-core")
    test_dirs = [rel(d / "tests") for d in dists if (d / "tests").is_dir()]
    session.run("pytest", *test_dirs, *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Performance ratios (components, host, discovery): ``nox -s bench -- [--quick] [--json PATH]``."""
    install_torch(session)
    dists = monorepo_dists()
    extra = VERL_STACK if HOST in dists else []
    session.install(*extra, *(rel(d) for d in dists))
    session.run("python", "benchmarks/run.py", *session.posargs)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: DataFlex inside verl's real ``_compute_advantage`` on a local Ray (``-- --help``)."""
    install_torch(session)
    session.install(*VERL_STACK, "hydra-core", *(rel(d) for d in [CORE, *plugin_dirs(), HOST]))
    session.run("dataflex-verl", "demo", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", "--diff", ".")


#: The documentation toolchain, pinned so the site builds the same everywhere.
DOCS_STACK = [
    "mkdocs==1.6.1",
    "mkdocs-material==9.8.2",
    "mkdocstrings==1.0.8",
    "mkdocstrings-python==2.0.11",
    "mkdocs-autorefs==1.4.5",
    "griffelib==2.4.1",
    "mkdocs-static-i18n==1.3.1",
    "pymdown-extensions==13.1.2",
    "ruff==0.17.6",  # mkdocstrings formats the signatures with it
]


@nox.session
def docs(session: nox.Session) -> None:
    """Build the site (English and Chinese) with ``mkdocs build --strict`` into ``site/``.

    The component catalog is rendered from the plugins installed here, so core,
    conformance and every plugin are installed; the verl host's API pages are
    read from its source without importing verl. ``nox -s docs -- serve``
    serves the site instead of building it.
    """
    install_torch(session)
    # "./" keeps pip from reading a top-level folder such as conformance/ as a project name.
    session.install(*DOCS_STACK, *(f"./{rel(d)}" for d in monorepo_dists(with_host=False)))
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs)
