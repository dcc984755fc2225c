"""The restore ``dataflex verify`` prints works before publishing and names only what differs (issue 40.4).

Each test installs plugins with pip into a fresh virtualenv (:class:`~dataflex_lab.testing.plugin_sites.PipSite`),
locks it, edits one installed file, and runs the command ``verify`` printed, as an operator would paste it.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path

from dataflex_core import reset_plugin_manager
from dataflex_core.cli import main as cli_main
from dataflex_lab.testing.plugin_sites import LENGTH_PLUGIN

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


def printed_restore(err: str) -> list[list[str]]:
    """The pip commands of the printed restore line, each as its arguments after ``pip``."""
    line = next(line for line in err.splitlines() if line.startswith("restore the locked bytes of"))
    commands = re.search(r"`(.*)`", line)[1].split(" && ")
    return [shlex.split(command)[1:] for command in commands]


def lock_site(pip_site, tmp_path: Path) -> Path:
    lock = tmp_path / "dataflex.lock"
    assert cli_main(["lock", "-o", str(lock)]) == 0
    pip_site.forget_modules()
    reset_plugin_manager()
    return lock


def test_the_restore_reinstalls_only_the_changed_plugin_from_its_checkout(pip_site, tmp_path, capsys):
    checkout = tmp_path / "checkout"
    for dist, module, name in (("rs-one", "rs_one", "rs_one_length"), ("rs-two", "rs_two", "rs_two_length")):
        folder = checkout_plugin(checkout, dist, module, LENGTH_PLUGIN.replace("lk_length", name))
        pip_site.pip("install", "--no-deps", "--no-index", str(folder))
    lock = lock_site(pip_site, tmp_path)
    target = pip_site.file("rs_one")
    target.write_text(target.read_text() + "\nprint('patched')\n")
    code, err = verify_says(lock, capsys)
    assert code == 1
    assert "pins.txt" not in err and "dataflex lock --requirements" not in err  # no pins of unpublished versions
    (command,) = printed_restore(err)
    assert command == ["install", "--force-reinstall", "--no-deps", str(checkout / "rs-one")], command
    pip_site.pip(*command)
    assert verify_says(lock, capsys) == (0, "")


def test_the_restore_reinstalls_a_changed_plugin_from_its_wheelhouse(pip_site, tmp_path, capsys):
    pip_site.install("rs-wheel", "0.2.0", "rs_wheel", LENGTH_PLUGIN.replace("lk_length", "rs_wheel_length"))
    pip_site.install("rs-other", "0.1.0", "rs_other", LENGTH_PLUGIN.replace("lk_length", "rs_other_length"))
    lock = lock_site(pip_site, tmp_path)
    target = pip_site.file("rs_wheel")
    target.write_text(target.read_text() + "\nprint('patched')\n")
    code, err = verify_says(lock, capsys)
    assert code == 1
    (command,) = printed_restore(err)
    house = str(pip_site.wheels / "rs-wheel-0.2.0")
    assert command == ["install", "--force-reinstall", "--no-deps", "--no-index", "--find-links", house,
                       "rs-wheel==0.2.0"], command  # fmt: skip
    assert "rs-other" not in " ".join(command)
    pip_site.pip(*command)
    assert verify_says(lock, capsys) == (0, "")


def test_a_plugin_from_an_index_is_pinned_alone_with_how_to_restore_it_unpublished(pip_site, tmp_path, capsys):
    """No record of where it came from (installed by name from an index or --find-links): the pin, and the note."""
    pip_site.install("rs-indexed", "0.3.0", "rs_indexed", LENGTH_PLUGIN.replace("lk_length", "rs_indexed_length"))
    (info,) = pip_site.root.glob("rs_indexed-0.3.0.dist-info")
    (info / "direct_url.json").unlink()
    lock = lock_site(pip_site, tmp_path)
    target = pip_site.file("rs_indexed")
    target.write_text(target.read_text() + "\n# edited\n")
    code, err = verify_says(lock, capsys)
    assert code == 1
    assert printed_restore(err) == [["install", "--force-reinstall", "--no-deps", "rs-indexed==0.3.0"]]
    assert "--no-index --find-links WHEELHOUSE" in err
