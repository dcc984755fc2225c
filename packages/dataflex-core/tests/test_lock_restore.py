"""The restore ``dataflex verify`` prints is one pip command that works before publishing and names only what
differs (issue 40.4, issue 54).

One pip run installs the module's plugins into a fresh virtualenv
(:class:`~dataflex_lab.testing.plugin_sites.PipSite`): two from a checkout's
folders, two from wheel files, one as if from an index. Each test locks them,
edits installed files, and runs the command ``verify`` printed, as an operator
would paste it.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path

import pytest

from dataflex_core import reset_plugin_manager
from dataflex_core.cli import main as cli_main
from dataflex_lab.testing import plugin_sites
from dataflex_lab.testing.plugin_sites import LENGTH_PLUGIN, build_wheel

#: A PEP 517 backend of the standard library alone (pip builds offline, in isolation): a checkout's plugin.
BACKEND = """
import base64, hashlib, zipfile
from pathlib import Path

NAME, VERSION = "{dist}", "0.1.0"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    stem = NAME.replace("-", "_")
    info = f"{{stem}}-{{VERSION}}.dist-info"
    files = {{"{module}/__init__.py": Path("{module}/__init__.py").read_text()}}
    files[f"{{info}}/METADATA"] = f"Metadata-Version: 2.1\\nName: {{NAME}}\\nVersion: {{VERSION}}\\n"
    files[f"{{info}}/WHEEL"] = "Wheel-Version: 1.0\\nGenerator: probe\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    files[f"{{info}}/entry_points.txt"] = "[dataflex]\\n{module} = {module}\\n"
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{{path}},sha256={{digest}},{{len(text.encode())}}")
    files[f"{{info}}/RECORD"] = "\\n".join(record + [f"{{info}}/RECORD,,"]) + "\\n"
    name = f"{{stem}}-{{VERSION}}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return name
"""


def checkout_plugin(root: Path, dist: str, module: str, source: str) -> Path:
    """A plugin's folder as a checkout has it: pyproject, its own build backend, the package."""
    folder = root / dist
    (folder / module).mkdir(parents=True)
    (folder / module / "__init__.py").write_text(source)
    (folder / "backend.py").write_text(BACKEND.format(dist=dist, module=module))
    (folder / "pyproject.toml").write_text(
        textwrap.dedent("""
        [build-system]
        requires = []
        build-backend = "backend"
        backend-path = ["."]
        """)
    )
    return folder


def verify_says(lock: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    reset_plugin_manager()
    code = cli_main(["verify", str(lock)])
    return code, capsys.readouterr().err


def printed_restore(err: str) -> list[str]:
    """The one pip command of the printed restore line, as its arguments after ``pip``."""
    line = next(line for line in err.splitlines() if line.startswith("restore the locked bytes of"))
    (command,) = re.findall(r"`([^`]*)`", line)
    return shlex.split(command)[1:]


def scorer(name: str) -> str:
    return LENGTH_PLUGIN.replace("lk_length", name)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """rs-one and rs-two from a checkout's folders, rs-wheel and rs-other from wheel files, rs-indexed installed
    by name (no record of where from): one pip run."""
    root = tmp_path_factory.mktemp("restore")
    with pytest.MonkeyPatch.context() as mp, plugin_sites.pip_site(root, mp, alone=True) as site:
        checkout = root / "checkout"
        folders = [checkout_plugin(checkout, f"rs-{n}", f"rs_{n}", scorer(f"rs_{n}_len")) for n in ("one", "two")]
        wheels = [
            build_wheel(site.wheels / f"{dist}-{version}", dist, version, {f"{m}/__init__.py": scorer(m)}, {m: m})
            for dist, version, m in (("rs-wheel", "0.2.0", "rs_wheel"), ("rs-other", "0.1.0", "rs_other"),
                                     ("rs-indexed", "0.3.0", "rs_indexed"))
        ]  # fmt: skip
        site.pip("install", "--no-deps", "--no-index", *map(str, folders), *map(str, wheels))
        (info,) = site.root.glob("rs_indexed-0.3.0.dist-info")
        (info / "direct_url.json").unlink()
        site.keep()
        yield site


@pytest.fixture
def pip_site(site):
    site.reset()
    reset_plugin_manager()
    yield site
    site.reset()
    reset_plugin_manager()


def lock_site(pip_site, tmp_path: Path) -> Path:
    lock = tmp_path / "dataflex.lock"
    assert cli_main(["lock", "-o", str(lock)]) == 0
    pip_site.forget_modules()
    reset_plugin_manager()
    return lock


def edit(pip_site, *modules: str) -> None:
    for module in modules:
        target = pip_site.file(module)
        target.write_text(target.read_text() + "\nprint('patched')\n")


def test_one_command_reinstalls_only_the_changed_plugins_each_from_where_it_came(pip_site, tmp_path, capsys):
    lock = lock_site(pip_site, tmp_path)
    edit(pip_site, "rs_one", "rs_wheel", "rs_indexed")
    code, err = verify_says(lock, capsys)
    assert code == 1
    assert "pins.txt" not in err and "dataflex lock --requirements" not in err  # no pins of unpublished versions
    (wheel,) = (pip_site.wheels / "rs-wheel-0.2.0").glob("*.whl")
    checkout = pip_site.root.parents[3] / "checkout"
    command = printed_restore(err)
    assert command == ["install", "--force-reinstall", "--no-deps", "rs-indexed==0.3.0", str(checkout / "rs-one"),
                       str(wheel)], command  # fmt: skip
    # offline, the index is the folder of the wheel it came from
    pip_site.pip(*command, "--no-index", "--find-links", str(pip_site.wheels / "rs-indexed-0.3.0"))
    assert verify_says(lock, capsys) == (0, "")


def test_the_pins_of_an_image_build_restore_too(pip_site, tmp_path, capsys):
    lock = lock_site(pip_site, tmp_path)
    edit(pip_site, "rs_wheel")
    pins = tmp_path / "pins.txt"
    assert cli_main(["lock", "--requirements", "--from", str(lock), "-o", str(pins)]) == 0
    # the pins file's own header names the command (without --no-deps it would reinstall torch and the rest)
    header = pins.read_text().splitlines()[0]
    restore = header.split("restore it with `")[1].removesuffix(" <this file>`").split()
    assert restore == ["pip", "install", "--force-reinstall", "--no-deps", "-r"], header
    wanted = tmp_path / "wheel-pins.txt"  # dataflex-core and the checkouts are not in this throwaway index
    wanted.write_text("".join(x + "\n" for x in pins.read_text().splitlines() if x.startswith("rs-wheel==")))
    links = str(pip_site.wheels / "rs-wheel-0.2.0")
    pip_site.pip(*restore[1:-1], "--no-index", "--find-links", links, "-r", str(wanted))
    assert verify_says(lock, capsys) == (0, "")


def test_an_editable_plugin_is_named_apart_not_reinstalled(pip_site, tmp_path, capsys):
    (info,) = pip_site.root.glob("rs_other-0.1.0.dist-info")
    source = pip_site.root.parents[3] / "checkout" / "rs-other"
    (info / "direct_url.json").write_text(f'{{"url": "{source.as_uri()}", "dir_info": {{"editable": true}}}}')
    lock = lock_site(pip_site, tmp_path)
    edit(pip_site, "rs_other", "rs_two")
    code, err = verify_says(lock, capsys)
    assert code == 1
    assert printed_restore(err)[3:] == [str(source.parent / "rs-two")]
    assert f"rs-other is an editable install of {source}: its files are the checkout's own" in err
