"""Pages that restate what the code says, checked against the code: one test per kind of drift (issue 29).

The CLI reference's prose against the parsers, the sample lock against a real lock of the installed plugins,
and the home page, README and site description against the registered mechanisms. (The tutorial's
certificate is run, counts included, in ``test_docs_plugin_package.py``.)
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from pathlib import Path

import pytest
import tomllib

from dataflex_core.cli import main as dataflex_main
from dataflex_core.mechanisms import mechanism_names

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
#: Each console script of the CLI reference and the parser its section renders.
CLI_PAGES = ["reference/cli.md", "reference/cli.zh.md"]
MARKER = re.compile(r"<!-- dataflex-cli ([\w.]+):(\w+) -->")


def read(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def cli_sections(page: str) -> list[tuple[str, str, str]]:
    """``(program, prose, parser target)`` for each ``## `program` `` section of a CLI reference page."""
    out = []
    for program, body in re.findall(r"^## `([\w-]+)`.*?\n(.*?)(?=^## |\Z)", read(page), re.M | re.S):
        marker = MARKER.search(body)
        assert marker, f"{page}: the section of {program} renders no --help"
        out.append((program, body[: marker.start()], f"{marker.group(1)}:{marker.group(2)}"))
    return out


def sub_commands(cli_hook, target: str) -> set[str]:
    module, _, factory = target.partition(":")
    return set(cli_hook._subcommands(getattr(importlib.import_module(module), factory)()))


@pytest.mark.parametrize("page", CLI_PAGES)
def test_the_cli_references_prose_names_each_sub_command_and_no_other(cli_hook, page):
    """The help texts are rendered from the parsers; the prose around them is checked against the same parsers."""
    sections = cli_sections(page)
    assert {program for program, _, _ in sections} >= {"dataflex", "dataflex-conformance", "dataflex-verl"}
    for program, prose, target in sections:
        real = sub_commands(cli_hook, target)
        named = set(re.findall(rf"`{re.escape(program)}\s+([\w-]+)", prose))
        assert named <= real, f"{page}: the prose of {program} names {sorted(named - real)}, not sub-commands"
        assert real <= named, f"{page}: the prose of {program} does not say what {sorted(real - named)} do"


def sample_lock(page: str) -> dict:
    block = re.search(r"```toml\n(lock_version = .*?)```", read(page), re.S)
    assert block, f"{page} shows no sample lock"
    return tomllib.loads(block.group(1))


@pytest.mark.parametrize("page", ["production.md", "production.zh.md"])
def test_the_sample_lock_is_what_dataflex_lock_writes_for_the_installed_plugins(page, tmp_path):
    shown = sample_lock(page)
    assert dataflex_main(["lock", "-o", str(tmp_path / "real.lock")]) == 0
    real = tomllib.loads((tmp_path / "real.lock").read_text())
    assert shown["lock_version"] == real["lock_version"] and shown["core"] == real["core"], page
    for dist, table in shown["plugins"].items():
        locked = real["plugins"][dist]
        assert table["version"] == locked["version"] == importlib.metadata.version(dist), f"{page}: {dist}"
        assert table["entry_points"] == locked["entry_points"] and table["components"] == locked["components"]
        assert set(table["files"]) <= set(locked["files"]), f"{page}: {dist} has no such files"


@pytest.mark.parametrize(
    ("where", "text"),
    [
        (
            "mkdocs.yml site_description",
            re.search(r"^site_description: (.*)$", (ROOT / "mkdocs.yml").read_text(), re.M)[1],
        ),
        ("index.md", read("index.md").split("```")[0]),
        ("index.zh.md", read("index.zh.md").split("```")[0]),
        ("README.md", (ROOT / "README.md").read_text(encoding="utf-8").split("##")[0]),
    ],
)
def test_the_home_page_readme_and_site_description_name_every_mechanism(where, text):
    missing = [name for name in mechanism_names() if not re.search(rf"\b{name}\b", text)]
    assert not missing, f"{where} (its opening) does not name the mechanism(s) {missing}"


# -- the README and getting-started against the code (issue 40.9) ------------------------------------------------


def readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def layout_rows() -> dict[str, str]:
    """The README's layout table: each row's path -> its "what" column."""
    section = readme().split("## Layout", 1)[1]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
    return rows


def registered_by_distribution() -> dict[str, set[str]]:
    from dataflex_core import get_registry

    found: dict[str, set[str]] = {}
    for by_name in get_registry().components.values():
        for spec in by_name.values():
            found.setdefault(spec.plugin.dist, set()).add(spec.name)
    return found


def test_the_readme_layout_has_a_row_per_plugin_folder_naming_each_of_its_components():
    rows = layout_rows()
    folders = sorted(p.parent.name for p in (ROOT / "plugins").glob("*/pyproject.toml"))
    missing = [f"plugins/{name}" for name in folders if f"plugins/{name}" not in rows]
    assert not missing, f"README.md's layout has no row for {missing}"
    registered = registered_by_distribution()
    for folder in folders:
        if folder.startswith("_"):
            continue  # the copy-me template is not installed
        dist = tomllib.loads((ROOT / "plugins" / folder / "pyproject.toml").read_text())["project"]["name"]
        named = set(re.findall(r"`([\w-]+)`", rows[f"plugins/{folder}"]))
        absent = sorted(registered.get(dist, set()) - named)
        assert not absent, f"README.md's layout row plugins/{folder} does not name its component(s) {absent}"


def test_the_readme_layout_counts_the_components_the_catalog_counts():
    """The catalog counts the shipped plugins' components; the README's table must sum to the same number.

    Only the distributions under ``plugins/`` count: components another test registered in this process (a
    decorator in a test module) are in the registry too, and are no plugin's."""
    shipped = {
        tomllib.loads(path.read_text(encoding="utf-8"))["project"]["name"]
        for path in (ROOT / "plugins").glob("*/pyproject.toml")
        if path.parent.name != "_template"
    }
    by_dist = registered_by_distribution()
    registered = set().union(*(by_dist.get(dist, set()) for dist in shipped))
    named = [
        name
        for path, what in layout_rows().items()
        if path.startswith("plugins/")
        for name in re.findall(r"`([\w-]+)`", what)
        if name in registered
    ]
    assert len(named) == len(registered), (len(named), len(registered), sorted(registered - set(named)))


@pytest.mark.parametrize(
    "page", ["README.md", "docs/getting-started.md", "docs/getting-started.zh.md", "docs/index.md", "docs/index.zh.md"]
)
def test_the_config_comment_lists_every_mechanism(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    comments = re.findall(r"mechanism: \w+\s+#(.*)", text)
    assert comments, f"{page} has no `mechanism: ...  # ...` config comment"
    for comment in comments:
        listed = {name.strip() for name in comment.split("|")}
        omitted = set(mechanism_names()) - listed
        assert not omitted, f"{page}: `# {comment.strip()}` omits {omitted}"


def test_the_readme_demo_row_names_every_option_of_the_demo():
    import argparse

    from dataflex_lab.verl.cli import add_demo

    parser = add_demo(argparse.ArgumentParser().add_subparsers())
    flags = {flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")}
    row = next(line for line in readme().splitlines() if line.startswith("| `nox -s demo ["))
    missing = sorted(flag for flag in flags - {"--help"} if flag not in row)
    assert not missing, f"README.md's `nox -s demo` row does not list {missing}"


#: The widest command line a tutorial's code box shows whole at 1280 px (the site's code font, a sidebar open).
TUTORIAL_COMMAND_WIDTH = 88


@pytest.mark.parametrize("page", sorted(p.name for p in (DOCS / "tutorials").glob("*.md")))
def test_a_tutorials_commands_fit_their_box(page):
    """Issue 40.10: step 3's long lines of the plugin tutorial overflowed their box at 1280 px."""
    blocks = re.findall(r"```bash\n(.*?)```", read(f"tutorials/{page}"), re.S)
    wide = [line for block in blocks for line in block.splitlines() if len(line) > TUTORIAL_COMMAND_WIDTH]
    assert not wide, f"tutorials/{page}: wrap these with \\ or move their comment above: {wide}"
