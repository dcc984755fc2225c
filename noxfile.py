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
import tomllib

ROOT = Path(__file__).parent
#: The torch requirement sessions install first (set e.g. DATAFLEX_TORCH="torch==2.13.0+cpu").
TORCH = os.environ.get("DATAFLEX_TORCH", "torch==2.13.0")
#: verl and TransferQueue versions the host is tested against (see VERL_FACTS / docs).
VERL_STACK = ["verl==0.9.1", "transferqueue==0.1.11", "tensordict==0.10.0", "cachetools", "fastapi", "uvicorn"]

#: The TRL version the TRL host is tested against (dataflex-trl pins trl>=1.16,<1.17).
TRL_STACK = ["trl==1.16.0"]

# Where PYTHONDONTWRITEBYTECODE forbids bytecode beside the sources, every process a session starts (pytest's workers,
# the ~9 of each real verl run) compiled torch, transformers and verl from source: 21-24 CPU-s a process against 8-10
# from bytecode. The sessions' processes keep it in one folder under .nox instead, still nothing beside the sources.
if os.environ.get("PYTHONDONTWRITEBYTECODE"):
    os.environ["PYTHONDONTWRITEBYTECODE"] = ""
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(ROOT / ".nox" / "pycache"))

CORE = ROOT / "packages" / "dataflex-core"
HOST = ROOT / "packages" / "dataflex-verl"
TRL_HOST = ROOT / "packages" / "dataflex-trl"
#: What is not production: ``dataflex compare``, the demos, verl's CPU harness and the testing kit every test uses.
LAB = ROOT / "packages" / "dataflex-lab"
CONFORMANCE = ROOT / "conformance"
#: The copy-me host (a toy training loop of its own); its tests are the host kit's shared tests.
HOST_TEMPLATE = ROOT / "hosts" / "_template"

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = False
#: Virtualenvs made and filled by uv where it is installed (a fresh verl environment in about a minute instead of
#: four, from one cache every session and run shares); virtualenv and pip otherwise (``pip install uv`` to opt in).
nox.options.default_venv_backend = "uv|virtualenv"

#: pip's settings that uv reads under another name: uv does not read pip's configuration files, and an install that
#: silently ignored the index, find-links or constraints a machine sets for pip would resolve something else.
PIP_TO_UV = {
    "index-url": ("UV_DEFAULT_INDEX", " "),
    "extra-index-url": ("UV_INDEX", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
}


#: pip's precedence among where a setting comes from: a site file over a user file over a global one, an
#: environment variable over every file.
SCOPE_RANK = {"global": 1, "user": 2, "site": 3, ":env:": 4}


def pip_settings_for_uv(listing: str) -> dict[str, str]:
    """The ``UV_*`` variables that give uv the settings ``pip config list`` printed (``listing``).

    pip's own precedence holds (an environment variable over a file); several values of one setting keep pip's
    order. With any index or find-links setting, uv compares versions across all of them as pip does
    (``UV_INDEX_STRATEGY=unsafe-best-match``) instead of stopping at the first index that has the name.
    """
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        scope, _, name = key.strip().rpartition(".")
        value = value.strip().strip("'\"")
        if name in PIP_TO_UV and value:
            rank = SCOPE_RANK.get(scope, 0)
            if rank >= found.get(name, (-1, ""))[0]:
                found[name] = (rank, value)
    env = {}
    for name, (_, value) in found.items():
        variable, separator = PIP_TO_UV[name]
        env[variable] = separator.join(value.split())
    if env.keys() & {"UV_DEFAULT_INDEX", "UV_INDEX", "UV_FIND_LINKS"}:
        env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return env


def use_pip_settings_in_uv() -> None:
    """Export :func:`pip_settings_for_uv` of this machine's pip into the environment the sessions inherit; a ``UV_*``
    variable already set wins."""
    import shutil
    import subprocess
    import sys

    if shutil.which("uv") is None:
        return
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    for variable, value in pip_settings_for_uv(listing).items():
        os.environ.setdefault(variable, value)


use_pip_settings_in_uv()


def plugin_dirs() -> list[Path]:
    """Every shipped plugin package (``plugins/*`` with a pyproject, the template excluded)."""
    return sorted(p for p in (ROOT / "plugins").glob("*") if (p / "pyproject.toml").exists() and p.name != "_template")


def host_dirs(root: Path = ROOT) -> list[Path]:
    """Every host package: a folder under ``packages/`` or ``hosts/`` whose pyproject has a ``[tool.dataflex.host]``
    table (a host made from ``hosts/_template`` keeps it), so the tests session finds a new host unedited."""
    found = sorted((root / "packages").glob("*/pyproject.toml")) + sorted((root / "hosts").glob("*/pyproject.toml"))
    tables = {p.parent: tomllib.loads(p.read_text(encoding="utf-8")).get("tool", {}).get("dataflex", {}) for p in found}
    return [path for path, table in tables.items() if "host" in table]


def host_env(path: Path) -> str:
    """The test environment a host's tests run in: its ``[tool.dataflex.host] env`` (one of ``TEST_ENVS``)."""
    table = tomllib.loads((path / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["dataflex"]["host"]
    env = table.get("env", "verl")
    if env not in TEST_ENVS:
        raise ValueError(
            f"{path / 'pyproject.toml'}: [tool.dataflex.host] env = {env!r}; expected one of {', '.join(TEST_ENVS)} "
            "(the environment whose framework the host's tests need; 'verl' for a framework of its own, as the "
            "template)"
        )
    return env


def install_torch(session: nox.Session) -> None:
    session.install(TORCH)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_absolute() else str(path)


def monorepo_dists(with_host: bool = True) -> list[Path]:
    """Core, conformance, every plugin, the lab and (optionally) the verl and TRL hosts, as present in the tree."""
    dists = [CORE, *plugin_dirs()]
    if (CONFORMANCE / "pyproject.toml").exists():
        dists.append(CONFORMANCE)
    if with_host:
        dists += [host for host in (HOST, TRL_HOST, LAB) if (host / "pyproject.toml").exists()]
    return dists


def host_stacks(dists: list[Path]) -> list[str]:
    """The pinned frameworks the hosts among ``dists`` are tested against."""
    return (VERL_STACK if HOST in dists else []) + (TRL_STACK if TRL_HOST in dists else [])


#: The hosts' test environments. verl 0.9.1's FSDP engine imports trl's PPO value-head model whenever trl is
#: installed, and trl >= 1.13 no longer has it, so verl's fit loop cannot run beside trl 1.16: each host is
#: tested in its own virtualenv (users install them apart too, see docs/host-trl.md).
TEST_ENVS = ("verl", "trl")
#: verl's own fit loop runs in a pytest process of its own: it starts Ray with logical GPUs and a
#: TransferQueue per run, while the host's other tests share one queue started by the driver. The lab's
#: training-demo test runs there too (each arm is a ``main_ppo`` process with its own Ray).
FIT_TESTS = [HOST / "tests" / "fit", LAB / "tests" / "fit"]
#: The lab's tests of its TRL parts (they need TRL, so they run in the ``trl`` environment).
LAB_TRL_TESTS = LAB / "tests" / "trl"
#: The docs' tests (tutorial snippets, the catalog, drift between pages and code) run in a pytest process of their
#: own: they read every component registered in the process, and a worker of the parallel run holds the test
#: components that other test files registered in code.
DOCS_TESTS = ROOT / "docs" / "tests"
#: Tests of this file's sessions (they run a session with nox, so the ``verl`` environment installs nox).
SESSION_TESTS = ROOT / "tests" / "sessions"


#: The verl environment's tests other than the fit loop and the docs, a file per worker on every core (at most four:
#: each worker that meets a verl test starts a local Ray of its own). The fit loop stays in one process: its runs
#: hold logical GPUs on one Ray. Most tests are short and many wait on a subprocess, so two workers on two cores take
#: about half the time of one (19:27 -> 8:38 in CI on this 2-core machine).
PARALLEL = ["--numprocesses", "auto", "--maxprocesses", "4", "--dist", "loadfile"]


def run_tests(session: nox.Session, env: str, full: bool) -> None:
    """Install ``env``'s stack and DataFlex from this checkout, then run its tests; ``full=False`` leaves out the tests
    marked ``full`` (each another real run of a seam the default set already runs) and the session tests (``build``
    runs those)."""
    install_torch(session)
    hosts = {host: host_env(host) for host in host_dirs()}
    mine = [host for host, where in hosts.items() if where == env]
    # pip itself: the lock, pinning and wheelhouse tests install real plugins with it (uv's virtualenvs have none)
    tools = ["pytest>=8", "pytest-xdist", "omegaconf", "hydra-core", "pip"]
    if env == "verl":  # every host tested here, none of another environment's
        dists = [d for d in monorepo_dists() if hosts.get(d, env) == env]
        dists += [host for host in mine if host not in dists]
        session.install(*host_stacks(dists), "matplotlib", "pandas", "pyarrow", "nox>=2024.4", *tools)
    else:
        # the cross-host test builds verl's host step on the same batch, without verl's FSDP engine
        dists = monorepo_dists()
        dists += [host for host in mine if host not in dists]
        session.install(*host_stacks(dists), *tools)
    session.install(*(f"./{rel(d)}" for d in dists))
    if env == "verl" and TRL_HOST.is_dir():
        # for the docs tests only (the CLI reference renders its --help, which imports no TRL); trl stays absent
        session.install("--no-deps", f"./{rel(TRL_HOST)}")
    selection = [] if full else ["-m", "not full"]
    if env != "verl":
        # this environment's hosts, the test that runs one pair through both hosts (it skips where TRL is absent)
        # and the lab's TRL parts
        trl_tests = [*(host / "tests" for host in mine), HOST / "tests" / "test_cross_host.py", LAB_TRL_TESTS]
        # one process: its longest tests already run two processes each (accelerate), so workers would only contend
        session.run("pytest", *(rel(p) for p in trl_tests if p.exists()), *selection, *session.posargs)
        return
    test_dirs = [rel(d / "tests") for d in dists if (d / "tests").is_dir()]
    # The benchmark harness's own logic runs here too; this file's sessions too in tests-full (they run nox inside
    # nox: packaging, run by ``build`` on every change).
    extra = [ROOT / "benchmarks" / "tests", *([SESSION_TESTS] if full else [])]
    test_dirs += [rel(p) for p in extra if p.is_dir()]
    ignored = [f"--ignore={rel(p)}" for p in [*FIT_TESTS, LAB_TRL_TESTS]]
    session.run("pytest", *test_dirs, *ignored, *PARALLEL, *selection, *session.posargs)
    if DOCS_TESTS.is_dir():
        session.run("pytest", rel(DOCS_TESTS), *selection, *session.posargs)
    fit_dirs = [rel(p) for p in FIT_TESTS if p.is_dir()]
    if fit_dirs:
        session.run("pytest", *fit_dirs, *selection, *session.posargs)


@nox.session
@nox.parametrize("env", TEST_ENVS)
def tests(session: nox.Session, env: str) -> None:
    """Every package's tests with one real run per seam of verl's fit loop: ``tests(env='verl')`` (verl 0.9.1) and
    ``tests(env='trl')`` (TRL 1.16, its real trainer on one and two processes). What CI runs on every change."""
    run_tests(session, env, full=False)


@nox.session(name="tests-full")
@nox.parametrize("env", TEST_ENVS)
def tests_full(session: nox.Session, env: str) -> None:
    """Every test there is: ``tests`` plus the other fit-loop variants (the legacy line of each V1 assertion,
    colocate_async, one_step_off, ``pilot.draw``, the lab's two-arm demo through ``main_ppo``) and the session tests.
    A change touching a host runs this before it is called done."""
    run_tests(session, env, full=True)


#: The benchmark cases each test environment runs (``trl`` needs TRL, ``fit`` needs verl without it).
BENCH_CASES = {"verl": "discovery,components,memory,host,fit,fit-legacy,fit-pilot,scale", "trl": "trl"}


def _env_suffixed(args: list[str], env: str) -> list[str]:
    """``--json PATH`` -> ``--json PATH`` with ``-<env>`` before the suffix, so both environments keep their file."""
    out = list(args)
    for i, arg in enumerate(out[:-1]):
        if arg == "--json":
            path = Path(out[i + 1])
            out[i + 1] = str(path.with_name(f"{path.stem}-{env}{path.suffix}"))
    return out


@nox.session
@nox.parametrize("env", TEST_ENVS)
def bench(session: nox.Session, env: str) -> None:
    """What users feel of DataFlex, as ratios to a baseline: ``nox -s bench -- [--quick] [--json PATH]``.

    ``bench(env='verl')`` runs the discovery, components, memory, host, verl fit-loop and scale cases,
    ``bench(env='trl')`` TRL's step (the two frameworks cannot share a virtualenv, see ``TEST_ENVS``);
    with ``--json PATH`` each writes ``PATH`` suffixed ``-verl`` / ``-trl`` (``benchmarks/README.md``).
    """
    install_torch(session)
    dists = [d for d in monorepo_dists() if (d != TRL_HOST if env == "verl" else d != HOST)]
    session.install(*host_stacks(dists), *(["pandas", "pyarrow"] if env == "verl" else []))
    session.install(*(f"./{rel(d)}" for d in dists))
    session.run("python", "benchmarks/run.py", "--cases", BENCH_CASES[env], *_env_suffixed(session.posargs, env))


def take_plugins(args: list[str]) -> tuple[list[Path], list[str]]:
    """``--with PATH`` (repeatable; ``--with=PATH`` too) taken out of a session's arguments: the folders of plugin
    packages to install beside the shipped ones (relative to this checkout), and the arguments left for the command.

    Raises ``ValueError`` naming the value when it is not a package's folder.
    """
    paths, rest, args = [], [], list(args)
    while args:
        arg = args.pop(0)
        if arg != "--with" and not arg.startswith("--with="):
            rest.append(arg)
            continue
        value = arg.partition("=")[2] if "=" in arg else (args.pop(0) if args else "")
        if not value or value.startswith("-"):
            raise ValueError(f"--with needs a plugin package's folder, got {value!r}: --with ../dataflex-my-plugin")
        path = (ROOT / Path(value).expanduser()).resolve()
        if not (path / "pyproject.toml").is_file():
            raise ValueError(
                f"--with {value!r}: {path} has no pyproject.toml; give the folder of a plugin package "
                "(the one docs/snippets/new_plugin.sh made), relative to this checkout or absolute"
            )
        paths.append(path)
    return paths, rest


def install_plugins_with(session: nox.Session) -> list[str]:
    """Install the ``--with PATH`` plugins into the session's virtualenv; returns the other arguments.

    They are installed on every run, ``-R`` included: ``-R`` skips ``session.install``, and the plugin is the
    code its author is changing between runs.
    """
    try:
        paths, args = take_plugins(session.posargs)
    except ValueError as exc:
        session.error(str(exc))
    if paths:
        pip = ["uv", "pip"] if session.venv_backend == "uv" else ["python", "-m", "pip"]
        session.run(*pip, "install", "--quiet", *(str(p) for p in paths), external=True)
    return args


def installs_nothing(session: nox.Session) -> bool:
    """Whether nox skips this session's installs: ``-R`` (``--no-install``) on a virtualenv it reused."""
    runner = session._runner  # nox has no public flag; session.install reads these same two
    venv = runner.venv
    return bool(runner.global_config.no_install and venv is not None and getattr(venv, "_reused", False))


def announce_install(session: nox.Session, what: str, minutes: int) -> None:
    """Say what the silent install is doing, and how long it takes (``minutes`` with pip; about one with uv), before
    it starts; under ``-R``, that the session reuses its virtualenv and installs nothing (the ``--with`` plugins
    still are)."""
    where = os.path.relpath(session.virtualenv.location, ROOT)
    minutes = 1 if session.venv_backend == "uv" else minutes
    if installs_nothing(session):
        session.log(
            f"reusing {where} (nox -R: nothing installed; run `nox -s {session.name}` without -R after changing a "
            "pyproject or pulling)"
        )
        return
    session.log(
        f"installing {what} into {where} (about {minutes} min, quiet; "
        f"`nox -R -s {session.name}` reuses it while this checkout is unchanged)"
    )


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: verl's own GRPO fit loop on the CPU, ``sync`` against ``dataflex_sync`` (``-- --help``).

    ``-- --with PATH`` installs your own plugin package too (docs/tutorials/plugin-package.md, Step 5).
    """
    announce_install(session, "a CPU torch, verl 0.9.1, TransferQueue and DataFlex from this checkout", 3)
    install_torch(session)
    # the demo is dataflex-lab's, with its verl extra (hydra, pandas, pyarrow: the harness's dataset)
    session.install(*VERL_STACK, *(rel(d) for d in [CORE, *plugin_dirs(), HOST]), f"{rel(LAB)}[verl]")
    args = install_plugins_with(session)
    session.run("dataflex-verl", "demo", *args)


@nox.session(name="demo-trl")
def demo_trl(session: nox.Session) -> None:
    """DataFlex inside TRL's GRPOTrainer: a real GRPO run on the CPU, baseline against DataFlex (``-- --help``).

    ``-- --with PATH`` installs your own plugin package too.
    """
    announce_install(session, "a CPU torch, TRL 1.16 and DataFlex from this checkout", 2)
    install_torch(session)
    session.install(*TRL_STACK, *(rel(d) for d in [CORE, *plugin_dirs(), TRL_HOST]), f"{rel(LAB)}[trl]")
    args = install_plugins_with(session)
    session.run("dataflex-trl", "demo", *args)


@nox.session(name="dataflex")
def dataflex_cli(session: nox.Session) -> None:
    """The ``dataflex`` command with every shipped plugin and the lab: ``nox -s dataflex -- plugins``,
    ``nox -s dataflex -- compare out.json``; ``-- --with PATH`` adds your own plugin package."""
    announce_install(session, "a CPU torch, dataflex-core, dataflex-lab and the shipped plugins", 1)
    install_torch(session)
    session.install(*(rel(d) for d in [CORE, *plugin_dirs(), LAB]))
    args = install_plugins_with(session)
    session.run("dataflex", *args)


@nox.session
def evidence(session: nox.Session) -> None:
    """Every recipe against uniform on every task family, paired seeds, at equal rollouts: one table (CPU).

    ``nox -s evidence -- [--quick] [--families F,F] [--methods M,M] [--seeds K|A-B] [--steps N] [--jobs N]``;
    finished runs are kept in ``dataflex_evidence/runs`` and skipped next time (slices add up, a stopped campaign
    resumes); the table, plots and each family's runs go to ``dataflex_evidence/`` (docs/evidence.md has the results
    and the machine). ``--quick`` is CI's smoke test, not evidence.
    """
    announce_install(session, "a CPU torch, TRL 1.16 and DataFlex from this checkout", 2)
    install_torch(session)
    session.install(*TRL_STACK, *(rel(d) for d in [CORE, *plugin_dirs(), TRL_HOST]), f"{rel(LAB)}[trl]")
    session.run("dataflex-trl", "evidence", *session.posargs)


@nox.session(name="evidence_verl")
def evidence_verl(session: nox.Session) -> None:
    """The evidence campaign's verl rows (``allocate`` against verl's plain trainer), in a venv of their own: verl's
    fit loop cannot run beside trl. Same options and workdir as ``nox -s evidence``, whose table takes these runs."""
    announce_install(session, "a CPU torch, verl 0.9.1, TransferQueue and DataFlex from this checkout", 3)
    install_torch(session)
    session.install(*VERL_STACK, *(rel(d) for d in [CORE, *plugin_dirs(), HOST]), f"{rel(LAB)}[verl]")
    session.run("python", "-m", "dataflex_lab.trl.evidence", *session.posargs)


#: Where ``nox -s conformance`` writes one report per plugin and ``summary.json``.
CONFORMANCE_REPORTS = ROOT / "reports" / "conformance"


def _dist_name(plugin: Path) -> str:
    import tomllib

    return tomllib.loads((plugin / "pyproject.toml").read_text())["project"]["name"]


def _shared_torch(session: nox.Session) -> Path:
    """``TORCH`` installed once into a plain directory that every plugin's venv sees through a ``.pth``.

    Installing torch into each fresh venv costs 30-60 s apiece; the plugin,
    core and conformance (and their other requirements) are still installed
    per venv, so an undeclared dependency fails as it would for a user.
    """
    target = ROOT / ".nox" / "_conformance_torch"
    marker = target / ".dataflex-torch"
    if not (marker.exists() and marker.read_text() == TORCH):
        session.run("python", "-m", "pip", "install", "--quiet", "--upgrade", "--target", str(target), TORCH)
        marker.write_text(TORCH)
    return target


@nox.session(venv_backend="virtualenv")  # pip builds the wheelhouse and installs into each plugin's own venv
def conformance(session: nox.Session) -> None:
    """Certify each plugin in its own fresh venv: ``nox -s conformance -- [DIST|FOLDER ...] [CLI options]``.

    ``FOLDER`` is a plugin package outside ``plugins/`` (absolute or relative to this checkout).

    Each venv holds only that plugin, ``dataflex-core`` and ``dataflex-conformance``
    (torch comes from one shared directory). Reports go to
    ``reports/conformance/<dist>.json`` with ``summary.json`` beside them. Other
    arguments (``--device cuda``, ``--xfail CHECK=REASON``) go to ``dataflex-conformance``.
    """
    import json
    import shutil
    import time

    plugins = {_dist_name(p): p for p in plugin_dirs()}
    template = ROOT / "plugins" / "_template"
    if (template / "pyproject.toml").exists():
        plugins[_dist_name(template)] = template
    wanted, cli_args, args = [], [], list(session.posargs)
    while args:
        arg = args.pop(0)
        if arg in ("--device", "--xfail", "--params", "--fields") and args:
            cli_args += [arg, args.pop(0)]
        elif arg.startswith("-"):
            cli_args.append(arg)
        elif arg in plugins:
            wanted.append(arg)
        elif (ROOT / arg / "pyproject.toml").is_file():
            folder = (ROOT / arg).resolve()
            plugins[_dist_name(folder)] = folder
            wanted.append(_dist_name(folder))
        else:
            session.error(
                f"unknown plugin {arg!r}; plugins here: {', '.join(sorted(plugins))}. For a plugin package "
                f"outside plugins/, pass its folder (`nox -s conformance -- ../dataflex-my-plugin`), or run its own "
                f"noxfile with DataFlex from this checkout: `cd ../dataflex-my-plugin && DATAFLEX_FROM={ROOT} "
                "nox -s conformance`"
            )
    selected = {d: plugins[d] for d in (wanted or sorted(plugins))}
    torch_dir = _shared_torch(session)
    # Build core and conformance once; each venv then builds only its plugin.
    wheelhouse = Path(session.create_tmp()) / "wheelhouse"
    shutil.rmtree(wheelhouse, ignore_errors=True)
    session.run(
        "python",
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "-w",
        str(wheelhouse),
        f"./{rel(CORE)}",
        f"./{rel(CONFORMANCE)}",
    )
    wheels = [str(w) for w in sorted(wheelhouse.glob("*.whl"))]
    CONFORMANCE_REPORTS.mkdir(parents=True, exist_ok=True)
    venvs = ROOT / ".nox" / "_conformance_venvs"
    rows = []
    for dist, path in selected.items():
        started = time.monotonic()
        venv = venvs / dist
        shutil.rmtree(venv, ignore_errors=True)
        session.run("python", "-m", "venv", "--without-pip", str(venv), silent=True)
        python = str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))
        purelib = session.run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True, external=True
        ).strip()
        Path(purelib, "_dataflex_shared_torch.pth").write_text(str(torch_dir) + "\n")
        # The session's pip installs into the plugin's venv, which then holds no pip of its own.
        package = f"./{rel(path)}" if path.is_relative_to(ROOT) else str(path)
        session.run("python", "-m", "pip", "--python", python, "install", "--quiet", *wheels, package)
        installed = time.monotonic()
        report = CONFORMANCE_REPORTS / f"{dist}.json"
        report.unlink(missing_ok=True)
        certify = [python, "-m", "dataflex_conformance.cli", dist, "--report", str(report), *cli_args]
        session.run(*certify, external=True, success_codes=[0, 1])
        data = json.loads(report.read_text()) if report.exists() else {"ok": False, "components": []}
        rows.append(
            {
                "dist": dist,
                "version": next((p["version"] for p in data.get("packages", []) if p["name"] == dist), None),
                "ok": data["ok"],
                "devices": data.get("devices", []),
                "components": {c["id"]: c["certified_devices"] for c in data["components"]},
                "summary": data.get("summary", {}),
                "report": rel(report),
                "seconds": {
                    "venv_and_install": round(installed - started, 1),
                    "certify": round(time.monotonic() - installed, 1),
                },
            }
        )
    (CONFORMANCE_REPORTS / "summary.json").write_text(json.dumps({"torch": TORCH, "plugins": rows}, indent=2) + "\n")
    for row in rows:
        certified = sum(1 for devices in row["components"].values() if devices)
        session.log(
            f"{'CERTIFIED' if row['ok'] else 'FAILED   '} {row['dist']}=={row['version']}: "
            f"{certified}/{len(row['components'])} components on {', '.join(row['devices']) or 'no device'} "
            f"({row['seconds']['venv_and_install']}s venv+install, {row['seconds']['certify']}s certify) -> {row['report']}"
        )
    failed = [row["dist"] for row in rows if not row["ok"]]
    if failed:
        session.error(f"not certified: {', '.join(failed)} (see {rel(CONFORMANCE_REPORTS)})")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", "--diff", ".")


#: Where ``nox -s build`` writes the sdist and the wheel of every distribution.
DIST_DIR = ROOT / "dist"


def release_dists() -> list[Path]:
    """Every distribution that is released: ``packages/*``, the shipped plugins and conformance."""
    packages = sorted(p for p in (ROOT / "packages").glob("*") if (p / "pyproject.toml").exists())
    return [*packages, *plugin_dirs(), CONFORMANCE]


@nox.session
def build(session: nox.Session) -> None:
    """An sdist and a wheel of every distribution into ``dist/``, then check and install them.

    ``twine check --strict`` checks the metadata; ``tests/release`` checks the
    pyproject files and installs the wheels into a fresh virtualenv with
    ``--no-index --find-links dist/``. ``nox -s build -- DIST ...`` builds only
    those (into a clean ``dist/`` too). Each distribution's release tag is
    ``<dist>-v<version>`` (see RELEASING.md).
    """
    import shutil

    names = {nox.project.load_toml(d / "pyproject.toml")["project"]["name"]: d for d in release_dists()}
    unknown = [a for a in session.posargs if a not in names]
    if unknown:
        session.error(f"unknown distribution(s) {unknown}; distributions here: {', '.join(sorted(names))}")
    selected = {n: names[n] for n in (session.posargs or names)}
    session.install("build>=1.2", "twine>=6.1", "packaging>=24", "pytest>=8", "nox>=2024.4", "pip")
    # each isolated build environment made by uv where nox has it (seconds instead of a pip install per build)
    installer = ["--installer", "uv"] if session.venv_backend == "uv" else []
    shutil.rmtree(DIST_DIR, ignore_errors=True)
    for path in selected.values():
        # Isolated builds: each uses exactly its own build-system.requires, as pip and a release do.
        session.run("python", "-m", "build", *installer, "--outdir", str(DIST_DIR), f"./{rel(path)}", silent=True)
    built = sorted(DIST_DIR.iterdir())
    session.run("twine", "check", "--strict", *(str(p) for p in built))
    if session.posargs:
        session.log("built a subset: skipping the fresh-virtualenv install test (it needs every distribution)")
        session.run(
            "pytest", "-p", "no:cacheprovider", "tests/release/test_metadata.py", "tests/release/test_core_floors.py"
        )
    else:
        # The wheels' third-party requirements (torch first, as a CPU build), resolved from the index into this
        # session; the install test links exactly those into its fresh virtualenv. The host's verl stack is not
        # needed: the test installs the host's wheel without requirements.
        install_torch(session)
        plain = [n for n in selected if n != "dataflex-verl"]
        session.install("--find-links", str(DIST_DIR), *plain)
        # and the packaging tests that run nox inside nox (this file's sessions, a plugin given with --with)
        session.run(
            "pytest", "-p", "no:cacheprovider", "tests/release", rel(SESSION_TESTS),
            env={"DATAFLEX_WHEELHOUSE": str(DIST_DIR)},
        )  # fmt: skip
    for name in selected:
        wheel = next(p.name for p in built if p.suffix == ".whl" and p.name.startswith(f"{name.replace('-', '_')}-"))
        session.log(f"{wheel}: release tag {name}-v{wheel.split('-')[1]}")


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """CUDA certificates and the host step on GPU tensors (``benchmarks/gpu_check.py``).

    The script makes its own virtualenv (``.nox/gpu-check``) with a CUDA torch, so this session runs it with
    the interpreter nox runs on. ``nox -s gpu -- --dry-run`` on a CPU; ``-- --torch current`` to use this
    interpreter's CUDA torch; reports in ``reports/gpu/``.
    """
    import sys

    session.run(sys.executable, "benchmarks/gpu_check.py", *session.posargs, external=True)


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
    "jieba==0.42.1",  # Chinese word segmentation for the search index (mkdocs-material's search plugin)
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
    if HOST.is_dir():  # for its --help only: the host's CLI module imports no verl
        session.install("--no-deps", f"./{rel(HOST)}")
    if TRL_HOST.is_dir():  # for its --help only: importing dataflex_trl.cli imports no TRL
        session.install("--no-deps", f"./{rel(TRL_HOST)}")
    if LAB.is_dir():  # for the commands it adds to the hosts' --help (building their parsers imports no model library)
        session.install("--no-deps", f"./{rel(LAB)}")
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs)
