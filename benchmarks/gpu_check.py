"""The CUDA check, prepared to run in one go on a GPU machine from a fresh checkout (issue 18).

    python benchmarks/gpu_check.py                      # CUDA torch from the package index, DataFlex from this checkout
    python benchmarks/gpu_check.py --torch current      # the CUDA torch this interpreter has (machines without an index)
    python benchmarks/gpu_check.py --wheelhouse dist --offline   # DataFlex from `nox -s build`'s wheels, no index at all
    python benchmarks/gpu_check.py --dry-run            # on a CPU: every phase on CPU tensors, nothing installed (CI)

Phases, each timed and recorded: ``environment`` (Python, torch, ``nvidia-smi``, the commit); ``venv`` (under
``.nox/gpu-check``, torch from the index or, with ``--torch current``, this interpreter's through a ``.pth``);
``install`` (core, conformance, every plugin and the template, from this checkout or ``--wheelhouse``);
``certify`` (``dataflex-conformance DIST --device cuda`` for each, certificates under ``reports/gpu/conformance/``);
``host`` (the host step, ``session.run``, on GPU tensors against the CPU: ``dataflex_bench/host_device.py``).
``reports/gpu/summary.json`` and ``summary.md`` hold the outcome; the exit status is 0 only when every phase
passed. ``--budget-s`` (default 450) stops starting phases so the whole check fits in 8 minutes.

``--dry-run`` is what CI runs so this script cannot rot: the same phases with ``--device cpu``, the host step
compared with itself, nothing installed (the virtualenv sees this interpreter's packages).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
CORE = ROOT / "packages" / "dataflex-core"
CONFORMANCE = ROOT / "conformance"
#: Phase statuses: ``pass``, ``fail``, ``skip`` (cannot or need not run here, with the reason).
PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass
class Phase:
    name: str
    status: str
    seconds: float = 0.0
    detail: str = ""
    data: dict = field(default_factory=dict)


def plugins() -> dict[str, Path]:
    """Every plugin distribution of the checkout, the template included: name -> folder."""
    found = {}
    for pyproject in sorted((ROOT / "plugins").glob("*/pyproject.toml")):
        found[tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"]] = pyproject.parent
    return found


def run(
    args: Sequence[str], *, timeout: float, env: dict | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    """A command with its output captured (and echoed), never raising on a non-zero exit."""
    print(f"$ {' '.join(map(str, args))}", flush=True)
    try:
        proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return subprocess.CompletedProcess(args, 124, out, f"timed out after {timeout:.0f} s")
    sys.stdout.write(proc.stdout[-3000:])
    sys.stderr.write(proc.stderr[-3000:])
    return proc


def tail(proc: subprocess.CompletedProcess, lines: int = 5) -> str:
    return " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-lines:])


class Check:
    """One run of the check: its options, its virtualenv and the phases done so far."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.out = Path(options.out).resolve()
        self.venv = Path(options.venv).resolve()
        self.device = "cpu" if options.dry_run else "cuda"
        self.started = time.monotonic()
        self.phases: list[Phase] = []

    # -- plumbing ------------------------------------------------------------------------
    @property
    def python(self) -> Path:
        return self.venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")

    def left(self) -> float:
        return self.options.budget_s - (time.monotonic() - self.started)

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = str(BENCHMARKS)  # dataflex_bench, for the host phase
        return env

    def phase(self, name: str, fn) -> Phase:
        if self.left() <= 0:
            result = Phase(name, SKIP, detail=f"not started: the run reached --budget-s {self.options.budget_s:.0f}")
        else:
            print(f"\n== {name} ({self.left():.0f} s of the budget left)", flush=True)
            start = time.monotonic()
            try:
                result = fn()
            except Exception as exc:  # noqa: BLE001 - record it and go on with the other phases
                result = Phase(name, FAIL, detail=f"{type(exc).__name__}: {exc}")
            result.seconds = round(time.monotonic() - start, 1)
        print(f"== {name}: {result.status} ({result.seconds} s) {result.detail}", flush=True)
        self.phases.append(result)
        return result

    def torch_info(self) -> dict:
        code = (
            "import json, torch; c = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
            "'cuda': torch.version.cuda, 'cuda_available': c, 'devices': [torch.cuda.get_device_name(i) "
            "for i in range(torch.cuda.device_count())] if c else []}))"
        )
        proc = run([self.python, "-c", code], timeout=120, env=self.env())
        if proc.returncode:
            raise RuntimeError(f"torch does not import in {self.venv}: {tail(proc)}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    # -- phases --------------------------------------------------------------------------
    def environment(self) -> Phase:
        data = {"python": sys.version.split()[0], "platform": platform.platform(), "dry_run": self.options.dry_run}
        smi = shutil.which("nvidia-smi")
        if smi:
            proc = run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], timeout=60)
            data["nvidia_smi"] = proc.stdout.strip().splitlines()
        git = run(["git", "rev-parse", "HEAD"], timeout=30) if (ROOT / ".git").exists() else None
        data["commit"] = git.stdout.strip() if git is not None and git.returncode == 0 else None
        if not smi and not self.options.dry_run:
            return Phase(
                "environment", FAIL, detail="no nvidia-smi: this is not a CUDA machine (use --dry-run)", data=data
            )
        return Phase("environment", PASS, detail=", ".join(data.get("nvidia_smi", [])) or "no GPU (dry run)", data=data)

    def make_venv(self) -> Phase:
        shutil.rmtree(self.venv, ignore_errors=True)
        proc = run([sys.executable, "-m", "venv", "--without-pip", self.venv], timeout=300)
        if proc.returncode:
            return Phase("venv", FAIL, detail=tail(proc))
        purelib = run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], timeout=60)
        site = Path(purelib.stdout.strip())
        source = self.options.torch
        if self.options.dry_run or source == "current":
            # This interpreter's packages (its torch above all) seen through a .pth, below the venv's own;
            # addsitedir also runs their own .pth files (editable installs, namespace packages).
            here = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
            lines = [f"import site; site.addsitedir({path!r})" for path in here]
            (site / "_gpu_check_current.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
            how = f"torch of {sys.executable} (through a .pth)"
        else:
            proc = run([sys.executable, "-m", "pip", "--python", self.python, "install", source], timeout=self.left())
            if proc.returncode:
                return Phase("venv", FAIL, detail=f"pip install {source}: {tail(proc)}")
            how = f"pip install {source}"
        info = self.torch_info()
        if not self.options.dry_run and not info["cuda_available"]:
            return Phase("venv", FAIL, detail=f"{how}: torch {info['torch']} sees no CUDA device", data=info)
        return Phase(
            "venv", PASS, detail=f"{how}: torch {info['torch']} (CUDA {info['cuda']}) {info['devices']}", data=info
        )

    def install(self) -> Phase:
        if self.options.dry_run:
            return Phase("install", SKIP, detail="dry run: the packages of this interpreter are used as installed")
        template = ROOT / "plugins" / "_template"
        released = {name: path for name, path in plugins().items() if path != template}
        names = ["dataflex-core", "dataflex-conformance", *released]
        pip = [sys.executable, "-m", "pip", "--python", self.python, "install"]
        if self.options.offline:
            pip += ["--no-index", "--no-build-isolation"]
        if self.options.wheelhouse:
            # `nox -s build` writes every released distribution; the template is not released, so it is
            # built from its folder.
            sources = ["--find-links", Path(self.options.wheelhouse).resolve(), *names, template]
        else:
            sources = [CORE, CONFORMANCE, *released.values(), template]
        # First with requirements (torch is already there), then the DataFlex distributions again without
        # them, so the venv holds this checkout's copies even where the environment seen through the .pth
        # has DataFlex installed.
        for extra in ([], ["--no-deps", "--force-reinstall"]):
            proc = run([*pip, *extra, *sources], timeout=max(self.left(), 1))
            if proc.returncode:
                return Phase("install", FAIL, detail=tail(proc))
        modules = ["dataflex_core", "dataflex_conformance", *(name.replace("-", "_") for name in released)]
        modules.append("dataflex_example")
        code = f"import importlib, json; print(json.dumps({{m: importlib.import_module(m).__file__ for m in {modules!r}}}))"
        proc = run([self.python, "-c", code], timeout=120, env=self.env())
        if proc.returncode:
            return Phase("install", FAIL, detail=f"installed packages do not import: {tail(proc)}")
        files = json.loads(proc.stdout.strip().splitlines()[-1])
        outside = sorted(m for m, f in files.items() if not Path(f).resolve().is_relative_to(self.venv))
        if outside:
            return Phase("install", FAIL, detail=f"imported from outside {self.venv}: {outside}", data=files)
        where = self.options.wheelhouse or "this checkout"
        return Phase(
            "install", PASS, detail=f"{len(modules)} distributions from {where} (the template from its folder)"
        )

    def installed(self) -> set[str]:
        code = "import json, importlib.metadata as m; print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))"
        proc = run([self.python, "-c", code], timeout=120, env=self.env())
        return set(json.loads(proc.stdout.strip().splitlines()[-1])) if proc.returncode == 0 else set()

    def certify(self) -> Phase:
        wanted = self.options.plugins or list(plugins())
        present = self.installed()
        reports = self.out / "conformance"
        reports.mkdir(parents=True, exist_ok=True)
        rows, failed = [], []
        for dist in wanted:
            if dist not in present:
                if self.options.dry_run and not self.options.plugins:
                    rows.append({"dist": dist, "status": SKIP, "detail": "not installed here (a real run installs it)"})
                    continue
                rows.append({"dist": dist, "status": FAIL, "detail": "not installed"})
                failed.append(dist)
                continue
            report = reports / f"{dist}.json"
            report.unlink(missing_ok=True)
            start = time.monotonic()
            cmd = [self.python, "-m", "dataflex_conformance.cli", dist, "--device", self.device, "--report", report]
            proc = run(cmd, timeout=max(self.left(), 1), env=self.env())
            data = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
            ok = proc.returncode == 0 and data.get("ok") is True
            components = {c["id"]: c["certified_devices"] for c in data.get("components", [])}
            rows.append(
                {
                    "dist": dist,
                    "status": PASS if ok else FAIL,
                    "devices": data.get("devices", []),
                    "components": components,
                    "summary": data.get("summary", {}),
                    "seconds": round(time.monotonic() - start, 1),
                    "report": str(report.relative_to(self.out.parent)) if report.exists() else None,
                    "detail": "" if ok else tail(proc),
                }
            )
            if not ok:
                failed.append(dist)
        done = [r for r in rows if r["status"] == PASS]
        detail = f"{len(done)}/{len(wanted)} certified on {self.device}"
        if failed:
            detail += f"; not certified: {', '.join(failed)}"
        return Phase("certify", FAIL if failed else PASS, detail=detail, data={"plugins": rows})

    def host(self) -> Phase:
        path = self.out / "host_device.json"
        path.unlink(missing_ok=True)
        cmd = [self.python, "-m", "dataflex_bench.host_device", "--device", self.device, "--json", path]
        if self.options.dry_run:
            cmd += ["--prompts", "32", "--length", "128", "--reps", "1"]
        proc = run(cmd, timeout=max(self.left(), 1), env=self.env())
        if not path.exists():
            return Phase("host", FAIL, detail=f"no result written: {tail(proc)}")
        data = json.loads(path.read_text(encoding="utf-8"))
        bad = [r["config"] for r in data["rows"] if not r["ok"]]
        detail = (
            f"{len(data['rows']) - len(bad)}/{len(data['rows'])} configurations agree with the CPU on {self.device}"
        )
        return Phase("host", FAIL if bad or proc.returncode else PASS, detail=detail, data=data)

    # -- the whole run -------------------------------------------------------------------
    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        failed = None
        for name, fn in (("environment", self.environment), ("venv", self.make_venv)):
            if failed is None and self.phase(name, fn).status == FAIL:
                failed = name
            elif failed is not None:
                self.phases.append(Phase(name, SKIP, detail=f"not started: the {failed} phase failed"))
        if failed is not None:
            for name in ("install", "certify", "host"):
                self.phases.append(Phase(name, SKIP, detail=f"not started: the {failed} phase failed"))
        else:
            install = self.phase("install", self.install)
            for name, fn in (("certify", self.certify), ("host", self.host)):
                if install.status == FAIL:
                    self.phases.append(Phase(name, SKIP, detail="not started: the install phase failed"))
                else:
                    self.phase(name, fn)
        ok = all(p.status != FAIL for p in self.phases) and not any(
            p.status == SKIP and p.name in ("certify", "host") for p in self.phases
        )
        self.write_summary(ok)
        return 0 if ok else 1

    def write_summary(self, ok: bool) -> None:
        summary = {
            "ok": ok,
            "dry_run": self.options.dry_run,
            "device": self.device,
            "seconds": round(time.monotonic() - self.started, 1),
            "phases": [asdict(p) for p in self.phases],
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
        markdown = summary_markdown(summary)
        (self.out / "summary.md").write_text(markdown, encoding="utf-8")
        print("\n" + markdown)


def summary_markdown(summary: dict) -> str:
    """The outcome as Markdown: the phases, the certificates and the host step."""
    phases = {p["name"]: p for p in summary["phases"]}
    env = phases.get("environment", {}).get("data", {})
    torch_info = phases.get("venv", {}).get("data", {})
    lines = [
        f"# GPU check: {'PASS' if summary['ok'] else 'FAIL'}{' (dry run on the CPU)' if summary['dry_run'] else ''}",
        "",
        f"{summary['seconds']} s; commit {env.get('commit') or '?'}; Python {env.get('python', '?')}; "
        f"torch {torch_info.get('torch', '?')} (CUDA {torch_info.get('cuda')}); "
        f"GPUs: {', '.join(env.get('nvidia_smi', [])) or 'none'}",
        "",
        "| phase | status | seconds | detail |",
        "|---|---|---|---|",
    ]
    lines += [f"| {p['name']} | {p['status']} | {p['seconds']} | {p['detail']} |" for p in summary["phases"]]
    certify = phases.get("certify", {}).get("data", {}).get("plugins", [])
    if certify:
        lines += ["", "| plugin | status | certified components (devices) | seconds |", "|---|---|---|---|"]
        for row in certify:
            comps = ", ".join(f"{c} ({'/'.join(d) or '-'})" for c, d in row.get("components", {}).items())
            lines.append(
                f"| {row['dist']} | {row['status']} | {comps or row.get('detail', '')} | {row.get('seconds', '')} |"
            )
    host = phases.get("host", {}).get("data", {}).get("rows", [])
    if host:
        lines += ["", "| host step | loss unit | composed | agrees | cpu ms | device ms |", "|---|---|---|---|---|---|"]
        for r in host:
            lines.append(
                f"| {r['config']} | {r['loss_unit']} | {r['composed']} | {'yes' if r['ok'] else 'NO: ' + '; '.join(r['problems'])} "
                f"| {r['cpu_ms']} | {r['device_ms']} |"
            )
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python benchmarks/gpu_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="run every phase on the CPU, install nothing (CI)")
    parser.add_argument(
        "--torch",
        default="torch",
        metavar="REQ|current",
        help="the torch requirement to install from the index (default: torch, a CUDA build on Linux), "
        "or 'current' for this interpreter's torch",
    )
    parser.add_argument("--wheelhouse", metavar="DIR", help="install DataFlex from these wheels (nox -s build)")
    parser.add_argument("--offline", action="store_true", help="pip --no-index --no-build-isolation for DataFlex")
    parser.add_argument("--plugins", nargs="+", metavar="DIST", help="certify only these (default: every plugin)")
    parser.add_argument("--out", default=str(ROOT / "reports" / "gpu"), help="where reports go (default: reports/gpu)")
    parser.add_argument("--venv", default=str(ROOT / ".nox" / "gpu-check"), help="the virtualenv to create")
    parser.add_argument("--budget-s", type=float, default=450.0, help="start no phase after this many seconds")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return Check(build_parser().parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
