"""The documentation cannot fall behind the code: hooks, public API, components and translations."""

from __future__ import annotations

import ast
import inspect
import re
import unicodedata
from pathlib import Path

import pytest

import dataflex_core
from dataflex_core import DataFlexPluginManager, Reweighter, Scorer, hookspecs
from dataflex_core.registry import PluginInfo, Registry

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent

#: Papers the project promised each shipped component cites (issues 3 and 7); the catalog must link them.
PROMISED_PAPERS = {
    ("scorer", "advantage_magnitude"): "1511.05952",
    ("scorer", "group_reward_variance"): "2509.19803",
    ("scorer", "token_prob"): "2505.12929",
    ("reweighter", "per_advantage"): "1511.05952",
    ("reweighter", "grpo_lead"): "2504.09696",
    ("reweighter", "focal"): "2602.06717",
    ("reweighter", "positive_downweight"): "2506.01347",
    ("reweighter", "advantage_reweight"): "2505.12929",
    ("reweighter", "high_entropy_tokens"): "2506.01939",
    ("selector", "gfpo"): "2508.09726",
    ("selector", "max_variance"): "2504.13818",
    ("mixer", "dump_ucb"): "2504.09710",
    ("mixer", "tscl"): "1707.00183",
    ("mixer", "odm"): "2312.02406",
}

#: English pages that have a Chinese translation kept in step (the user guide and tutorials).
TRANSLATED = [
    "index.md",
    "getting-started.md",
    "concepts.md",
    "catalog.md",
    "tutorials/add-a-scorer.md",
    "tutorials/add-a-reweighter.md",
    "tutorials/plugin-package.md",
    "tutorials/write-a-host.md",
    "write-a-mechanism.md",
    "host.md",
    "mechanisms.md",
    "production.md",
    "install.md",
    "recipes.md",
    "is-it-working.md",
    "from-dataflex-rl.md",
    "compare.md",
    "evidence.md",
    "ledger.md",
    "reference/api.md",
    "reference/api-verl.md",
    "reference/api-conformance.md",
    "reference/hooks.md",
    "reference/cli.md",
]


def installed_registry() -> Registry:
    """The installed plugins as a fresh manager sees them (whatever other tests did to the global one)."""
    manager = DataFlexPluginManager()
    manager.load_entrypoints(strict=False)
    assert not manager.failures, [f.message for f in manager.failures]
    return manager.registry()


def hookspec_names() -> list[str]:
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return sorted(name for name, obj in vars(hookspecs).items() if inspect.isfunction(obj) and hasattr(obj, marker))


def read(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def slugify(title: str) -> str:
    """Python-Markdown's default heading id."""
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def headings(text: str) -> list[tuple[int, str, str | None]]:
    """(level, title, explicit id) of every ## and ### heading outside code fences."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"^(#{2,3}) (.*?)(?: \{#([\w-]+)\})?$", line)
        if match:
            out.append((len(match.group(1)), match.group(2), match.group(3)))
    return out


def test_every_hookspec_has_its_own_entry_in_the_hooks_page():
    names = hookspec_names()
    assert names, "no hookspecs found: did dataflex_core.hookspecs change its marker?"
    page = read("reference/hooks.md")
    missing = [n for n in names if f"::: dataflex_core.hookspecs.{n}\n" not in page]
    assert not missing, f"hookspecs without an entry in docs/reference/hooks.md: {missing}"


@pytest.mark.parametrize("name", hookspec_names())
def test_every_hookspec_docstring_follows_the_pytest_layout(name):
    func = getattr(hookspecs, name)
    doc = inspect.getdoc(func) or ""
    params = [p for p in inspect.signature(func).parameters]
    missing = [f":param {p}:" for p in params if f":param {p}:" not in doc]
    missing += [part for part in (":returns:", "Called ", ".. versionadded::") if part not in doc]
    assert doc and not missing, f"{name}'s docstring lacks {missing}"


def test_every_public_name_of_dataflex_core_is_in_the_api_reference():
    pages = read("reference/api.md") + read("reference/hooks.md")
    missing = [n for n in dataflex_core.__all__ if n != "__version__" and not re.search(rf"\b{re.escape(n)}\b", pages)]
    assert not missing, f"public names of dataflex_core missing from docs/reference/api.md: {missing}"


def test_every_installed_component_is_in_the_catalog_with_package_params_and_docstring(catalog_hook):
    registry = installed_registry()
    records = [r for r in catalog_hook.catalog_records(registry) if r["dist"]]
    assert records, "no plugin is installed: the catalog would be empty"
    assert catalog_hook.problems(records) == []
    page = catalog_hook.render_catalog(records, "en")
    for r in records:
        assert f"### `{r['name']}` {{#{catalog_hook.anchor(r)}}}" in page
        assert f"{r['dist']}=={r['version']}" in page
        for param, default in r["params"].items():
            shown = "required" if default is inspect.Parameter.empty else repr(default)
            assert f"`{param}={shown}`" in page, (r["name"], param)
        body = [line for line in r["docstring"].splitlines() if line.strip()]
        assert len(body) >= 2, f"{r['kind']} {r['name']!r}: the docstring needs a formula/behaviour beyond its summary"


def test_the_catalog_links_the_papers_the_components_promise(catalog_hook):
    records = {(r["kind"], r["name"]): r for r in catalog_hook.catalog_records(installed_registry())}
    wrong = {
        key: records[key]["papers"]
        for key, paper in PROMISED_PAPERS.items()
        if key in records and paper not in records[key]["papers"]
    }
    assert not wrong, f"components whose docstring no longer cites the promised paper: {wrong}"
    page = catalog_hook.render_catalog(list(records.values()), "zh")
    for key in PROMISED_PAPERS.keys() & records.keys():
        assert f"(https://arxiv.org/abs/{PROMISED_PAPERS[key]})" in page


def test_the_catalog_flags_an_undocumented_component_and_a_failed_plugin(catalog_hook):
    class Undocumented(Scorer):
        def score(self, batch, step_id, **ctx):
            return batch.batch["response_mask"].float().sum(-1)

    class Documented(Reweighter):
        """Uniform weights.

        w = 1 everywhere, cites arXiv:2401.00001v2 for the test.
        """

    registry = Registry()
    info = PluginInfo(name="ep", value="m", dist="docs-test-dist", version="9.9")
    registry.add("scorer", "undocumented", Undocumented, info)
    registry.add("reweighter", "documented", Documented, info)
    records = catalog_hook.catalog_records(registry)

    class Failure:
        message = "skipping plugin broken (broken-dist==1.0): ImportError: nope"

    found = catalog_hook.problems(records, [Failure()])
    assert len(found) == 2
    assert "scorer 'undocumented'" in found[0] and "no docstring" in found[0]
    assert "broken-dist==1.0" in found[1]
    assert records[1]["papers"] == ["2401.00001"]


def test_the_catalog_marker_is_replaced_on_both_language_pages(catalog_hook):
    class Page:
        def __init__(self, src):
            self.file = type("F", (), {"src_uri": src})()

    for src, heading in (("catalog.md", "## Scorers"), ("catalog.zh.md", "## Scorer")):
        text = read(src)
        assert catalog_hook.MARKER in text
        out = catalog_hook.on_page_markdown(text, page=Page(src), config={}, files=None)
        assert catalog_hook.MARKER not in out and heading in out
        assert ("需要分组" in out) == src.endswith(".zh.md")


@pytest.mark.parametrize("page", TRANSLATED)
def test_chinese_page_is_kept_in_step_with_the_english_one(page):
    zh_page = page.replace(".md", ".zh.md")
    assert (DOCS / zh_page).exists(), f"{page} has no Chinese version {zh_page}"
    en, zh = read(page), read(zh_page)
    en_ids = [(level, explicit or slugify(title)) for level, title, explicit in headings(en)]
    zh_ids = [(level, explicit) for level, _, explicit in headings(zh)]
    assert zh_ids == en_ids, f"{zh_page} sections (with {{#id}}) differ from {page}'s"
    include = re.compile(r"^--8<--\n(\S+)\n--8<--$", re.M)
    assert include.findall(zh) == include.findall(en), f"{zh_page} includes other snippets than {page}"
    assert en.count("\n```") == zh.count("\n```"), f"{zh_page} has a different number of code blocks"
    for block in re.findall(r"```(?:yaml|toml|bash|text)\n(.*?)```", en, re.S):
        if "#" not in block:  # comments may be translated, the rest must match
            assert block in zh, f"{zh_page} lacks this block of {page}:\n{block}"


def test_the_nav_names_every_page_and_every_title_has_a_chinese_translation():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def walk(items):
        for item in items:
            for title, value in item.items():
                yield title, value
                if isinstance(value, list):
                    yield from walk(value)

    entries = list(walk(config["nav"]))
    listed = [v for _, v in entries if isinstance(v, str)]
    pages = set(listed)
    assert len(listed) == len(pages), (
        f"pages listed twice in the nav: {sorted(p for p in pages if listed.count(p) > 1)}"
    )
    missing = sorted(p for p in pages if not (DOCS / p).exists())
    assert not missing, f"nav entries without a page: {missing}"
    on_disk = {
        str(p.relative_to(DOCS))
        for p in DOCS.rglob("*.md")
        if not p.name.endswith(".zh.md") and p.relative_to(DOCS).parts[0] not in ("snippets", "tests", "hooks")
    }
    assert not on_disk - pages, f"pages missing from the nav in mkdocs.yml: {sorted(on_disk - pages)}"
    i18n = next(p["i18n"] for p in config["plugins"] if isinstance(p, dict) and "i18n" in p)
    zh = next(lang for lang in i18n["languages"] if lang["locale"] == "zh")
    untranslated = sorted({t for t, _ in entries} - set(zh["nav_translations"]))
    assert not untranslated, f"nav titles without a Chinese translation: {untranslated}"


@pytest.mark.parametrize(
    "package", ["packages/dataflex-core", "conformance", "packages/dataflex-verl", "packages/dataflex-trl"]
)
def test_every_console_script_has_its_help_in_the_cli_reference(cli_hook, package):
    pyproject = (ROOT / package / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[project\.scripts\]\n(.*?)(?:^\[|\Z)", pyproject, re.S | re.M)
    scripts = dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.]+):\w+"', section.group(1) if section else "", re.M))
    assert scripts, f"{package} declares no console script"
    page = read("reference/cli.md")
    for script, module in scripts.items():
        assert f"<!-- dataflex-cli {module}:build_parser -->" in page, f"{script} is missing from reference/cli.md"
        rendered = cli_hook.on_page_markdown(f"<!-- dataflex-cli {module}:build_parser -->", None, {}, None)
        assert f"usage: {script}" in rendered
        for sub in re.findall(r"^\s{4}(\w+)\s{2,}", rendered, re.M):
            assert re.search(rf"#### `{script} (\w+ )?{sub}`", rendered), (
                f"sub-command {sub} of {script} has no section"
            )


def test_sphinx_roles_in_docstrings_render_as_markdown(sphinx_roles_hook):
    out = sphinx_roles_hook.rewrite(inspect.getdoc(hookspecs.dataflex_register_scorers))
    assert ":class:" not in out and "`Scorer`" in out and "`DuplicateComponentError`" in out
    assert "*Added in version 0.1.*" in out
    # The narrative ("Called once ...") comes before the fields, so it is not folded into :returns:.
    assert out.index("Called once") < out.index(":param register:") < out.index(":returns:")


def test_the_catalog_config_lines_load_as_yaml_with_the_defaults(catalog_hook):
    yaml = pytest.importorskip("yaml")
    for r in catalog_hook.catalog_records(installed_registry()):
        block = yaml.safe_load(catalog_hook.config_lines(r))["dataflex"]
        entry = block["scorer" if r["kind"] == "scorer" else "actuator"]
        assert entry["name"] == r["name"]
        expected = {k: (list(v) if isinstance(v, tuple) else v) for k, v in r["params"].items()}
        assert entry["params"] == {k: "..." if v is inspect.Parameter.empty else v for k, v in expected.items()}
        if r["kind"] != "scorer":
            assert block["mechanism"] == catalog_hook.MECHANISM_OF[r["kind"]]


def _defines(body: list[ast.stmt], name: str) -> ast.stmt | None:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return node  # a re-export: the name exists here, documented where it is defined
    return None


#: Where mkdocstrings reads the sources (``paths`` in mkdocs.yml): the pages are built from these trees.
SOURCE_ROOTS = [
    ROOT / "packages" / "dataflex-core" / "src",
    ROOT / "packages" / "dataflex-verl" / "src",
    ROOT / "packages" / "dataflex-lab" / "src",
    ROOT / "conformance" / "src",
]


def module_source(module: str) -> Path | None:
    for root in SOURCE_ROOTS:
        base = root.joinpath(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def resolves(identifier: str) -> bool:
    """True when ``identifier`` names a module, or an object defined (or re-exported) in a module's
    source, read from the source trees the docs are built from, without importing anything."""
    parts = identifier.split(".")
    for i in range(len(parts), 0, -1):
        source = module_source(".".join(parts[:i]))
        if source is not None:
            body = ast.parse(source.read_text(encoding="utf-8")).body
            for name in parts[i:]:
                node = _defines(body, name)
                if node is None:
                    return False
                body = getattr(node, "body", [])
            return True
    return False


def api_directives() -> list[tuple[str, str]]:
    """(page, identifier) for every ``::: identifier`` and every name under its ``members:`` option."""
    found = []
    for path in sorted((DOCS / "reference").glob("*.md")):
        page = path.relative_to(DOCS).as_posix()
        for block in re.findall(r"^::: ([\w.]+)\n((?:    .*\n)*)", path.read_text(encoding="utf-8"), re.M):
            ident, options = block
            found.append((page, ident))
            members = re.search(r"members:\n((?:\s+- \w+\n)+)", options)
            for member in re.findall(r"- (\w+)", members.group(1) if members else ""):
                found.append((page, f"{ident}.{member}"))
    return found


def test_every_api_directive_names_something_that_exists():
    directives = api_directives()
    assert len(directives) > 50, "the reference pages lost their ::: directives"
    missing = [f"{page}: {ident}" for page, ident in directives if not resolves(ident)]
    assert not missing, f"API reference entries naming nothing (renamed or removed?): {missing}"
