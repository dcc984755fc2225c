"""The plugin-package tutorial, run as a reader would: copy the template, install, list, certify, test."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
PAGE = "tutorials/plugin-package.md"
DIST = "dataflex-length-tutorial"


def text_blocks(page: str) -> list[str]:
    return re.findall(r"```text\n(.*?)\n```", (DOCS / page).read_text(encoding="utf-8"), re.S)


def certificate(output: str) -> list[list[str]]:
    """The component rows and the CERTIFIED line of a conformance summary, split into words (counts included:
    the page shows what the command prints today, so a suite that grew is a page to update)."""
    lines = [line.split() for line in output.splitlines()]
    rows = [cells for cells in lines if len(cells) == 9 and cells[0] != "component" and not cells[0].startswith("-")]
    return rows + [cells for cells in lines if cells[:1] == ["CERTIFIED:"]]


@pytest.fixture(scope="module")
def tutorial_package(tmp_path_factory):
    """Step 1 and 3 of the tutorial: the package made by its script, pip-installed into a private site."""
    work = tmp_path_factory.mktemp("plugin_tutorial")
    dest = work / DIST
    # As the page says: run from the checkout with the default DATAFLEX=. and a relative DEST.
    env = {k: v for k, v in os.environ.items() if k != "DATAFLEX"}
    env["DEST"] = os.path.relpath(dest, ROOT)
    subprocess.run(["bash", "-c", step_1_command(PAGE)], env=env, cwd=ROOT, check=True)
    site = work / "site"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(dest)]
    # Build with this environment's setuptools when it can (fast, offline); else let pip isolate the build.
    if importlib.util.find_spec("setuptools") is None or subprocess.run([*install, "--no-build-isolation"]).returncode:
        subprocess.run(install, check=True)
    run_env = dict(os.environ, PYTHONPATH=str(site), DATAFLEX_PLUGINS=DIST, DATAFLEX_CONFORMANCE_DEVICE="cpu")
    return dest, run_env


def step_1_command(page: str) -> str:
    """The command Step 1 of ``page`` opens with (the scripts it runs follow it, folded)."""
    step = re.search(r"^## (?:Step 1|第 1 步).*?\n(.*?)^## ", (DOCS / page).read_text(encoding="utf-8"), re.M | re.S)
    assert step, f"{page} has no Step 1"
    command = re.search(r"\A[^`]*?```bash\n(.*?)```", step.group(1), re.S)
    assert command, f"{page}: Step 1 does not open with the command to run"
    return command.group(1).strip()


@pytest.mark.parametrize("page", [PAGE, PAGE.replace(".md", ".zh.md")])
def test_step_1_opens_with_one_command_and_folds_the_scripts(page):
    assert step_1_command(page) == "bash docs/snippets/new_plugin.sh && bash docs/snippets/tutorial_components.sh"
    text = (DOCS / page).read_text(encoding="utf-8")
    for script in ("new_plugin.sh", "tutorial_components.sh"):
        assert f'??? example "docs/snippets/{script}"\n\n    ```bash\n    --8<--\n    docs/snippets/{script}' in text


def run(args, env, cwd=None):
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True)


def new_plugin(cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("DATAFLEX", "DEST", "NAME")} | env
    script = DOCS / "snippets" / "new_plugin.sh"
    return subprocess.run(["bash", str(script)], env=full, cwd=cwd, capture_output=True, text=True)


def test_the_script_names_the_package_after_NAME_with_absolute_paths(tmp_path):
    dest = tmp_path / "plugins" / "dataflex-my-signal"
    proc = new_plugin(tmp_path, NAME="my-signal", DATAFLEX=str(ROOT), DEST=str(dest))
    assert proc.returncode == 0, proc.stderr
    pyproject = (dest / "pyproject.toml").read_text()
    assert 'name = "dataflex-my-signal"' in pyproject and 'my-signal = "dataflex_my_signal"' in pyproject
    assert (dest / "src" / "dataflex_my_signal" / "reweighters.py").is_file()
    assert "from dataflex_my_signal import" in (dest / "tests" / "test_conformance.py").read_text()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["dataflex-my-signal"], "scratch folder left behind"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DATAFLEX": "no-such-checkout"}, "has no plugins/_template"),
        ({"NAME": "My_Plugin"}, "lower-case letters"),
    ],
)
def test_the_script_refuses_bad_settings_before_making_anything(tmp_path, env, message):
    proc = new_plugin(ROOT, DEST=str(tmp_path / "out"), **env)
    assert proc.returncode == 1 and message in proc.stderr
    assert not any(tmp_path.iterdir()), "a refused run must not leave a half-made package"


def test_the_script_never_overwrites_an_existing_folder(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep me")
    proc = new_plugin(ROOT, DEST=str(tmp_path / "taken"))
    assert proc.returncode == 1 and "exists already" in proc.stderr
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["mine.txt"]


def test_the_script_renames_the_template_completely(tutorial_package):
    dest, _ = tutorial_package
    pyproject = (dest / "pyproject.toml").read_text()
    assert f'name = "{DIST}"' in pyproject
    assert 'length-tutorial = "dataflex_length_tutorial"' in pyproject
    files = [p for p in dest.rglob("*") if p.is_file() and ".egg-info" not in str(p) and "__pycache__" not in str(p)]
    leftovers = [str(p.relative_to(dest)) for p in files if re.search("dataflex[_-]example", p.read_text())]
    assert not leftovers, f"files still naming the template's module: {leftovers}"


def test_dataflex_plugins_lists_the_package_as_the_page_shows(tutorial_package):
    _, env = tutorial_package
    proc = run(["-m", "dataflex_core.cli", "plugins"], env)
    assert proc.returncode == 0, proc.stderr
    shown = next(b for b in text_blocks(PAGE) if b.startswith("entry point"))
    assert proc.stdout.split() == shown.split()


def test_conformance_certifies_the_package_as_the_page_shows(tutorial_package, tmp_path):
    _, env = tutorial_package
    report = tmp_path / "conformance.json"
    proc = run(["-m", "dataflex_conformance.cli", DIST, "--device", "cpu", "--report", str(report)], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in (PAGE, PAGE.replace(".md", ".zh.md")):
        shown = next(b for b in text_blocks(page) if b.startswith("component"))
        assert certificate(proc.stdout) == certificate(shown), f"{page} shows another certificate:\n{proc.stdout}"
    data = json.loads(report.read_text())
    assert [p["name"] for p in data["packages"]] == [DIST]


def test_the_packages_own_conformance_tests_pass(tutorial_package):
    dest, env = tutorial_package
    proc = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], env, cwd=dest)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"\d+ passed", proc.stdout) and "failed" not in proc.stdout.splitlines()[-1]


#: What a plugin author runs before the first ``pip install`` of their package (issue 29: the tutorial's install
#: pulled a 5 GB CUDA torch into whatever environment was active).
FIRST_INSTALL_PAGES = ["docs/tutorials/plugin-package.md", "docs/tutorials/plugin-package.zh.md", "plugins/_template/README.md"]  # fmt: skip


@pytest.mark.parametrize("page", FIRST_INSTALL_PAGES)
def test_the_first_install_makes_a_virtualenv_and_a_cpu_torch_before_the_package(page):
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / page).read_text(encoding="utf-8"), re.S)
    block = next((b for b in blocks if "pip install -e ." in b), None)
    assert block, f"{page} has no block that installs the package"
    lines = [line.split("#")[0].strip() for line in block.splitlines()]
    package = next(i for i, line in enumerate(lines) if "pip install -e ." in line)
    venv = next((i for i, line in enumerate(lines) if "-m venv" in line and "bin/activate" in line), None)
    torch = next((i for i, line in enumerate(lines) if re.match(r"pip install torch\S* .*whl/cpu", line)), None)
    assert venv is not None and venv < package, f"{page}: make and activate a virtualenv before installing"
    assert torch is not None and venv < torch < package, f"{page}: install a CPU torch before the package"
