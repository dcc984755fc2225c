"""The user-facing pages say things that hold: recipes mount in verl, every metric has its healthy range,
every distribution has its install and changelog line, and every English page has its Chinese one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from dataflex_core import DataFlexPluginManager
from dataflex_core.mechanisms import get_mechanism

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
yaml = pytest.importorskip("yaml")


def read(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def sections(page: str) -> dict[str, str]:
    """``{id: text}`` of every ``## Title {#id}`` section of a page."""
    parts = re.split(r"^## .*? \{#([\w-]+)\}\n", read(page), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def installed():
    manager = DataFlexPluginManager()
    manager.load_entrypoints(strict=False)
    return manager.registry()


# -- every page in both languages -------------------------------------------------------------


def english_pages() -> list[str]:
    skip = ("snippets", "tests", "hooks")
    return sorted(
        p.relative_to(DOCS).as_posix()
        for p in DOCS.rglob("*.md")
        if not p.name.endswith(".zh.md") and p.relative_to(DOCS).parts[0] not in skip
    )


@pytest.mark.parametrize("page", english_pages())
def test_every_english_page_has_a_chinese_page(page):
    zh = page.removesuffix(".md") + ".zh.md"
    assert (DOCS / zh).is_file(), f"{page} has no Chinese page {zh}: the Chinese site would fall back to English"


REFERENCE_PAGES = sorted(
    p.relative_to(DOCS).as_posix() for p in (DOCS / "reference").glob("*.md") if ".zh." not in p.name
)


@pytest.mark.parametrize("page", REFERENCE_PAGES)
def test_chinese_reference_pages_generate_the_same_entries(page):
    """The API text stays English (docstrings); the Chinese page must render the same entries in the same order."""
    generated = re.compile(r"^(?:::: [\w.]+\n(?:    .*\n)*|<!-- dataflex-cli [\w.:]+ -->\n|--8<--\n\S+\n)", re.M)
    en, zh = read(page), read(page.removesuffix(".md") + ".zh.md")
    assert generated.findall(zh) == generated.findall(en), f"{page} and its Chinese page generate different entries"
    assert "保持英文" in zh, f"the Chinese {page} must say that the generated API text stays English"


# -- recipes -----------------------------------------------------------------------------------

RECIPES = sections("recipes.md")


def config_of(text: str) -> dict:
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "a recipe shows exactly one config block"
    return yaml.safe_load(blocks[0])


def overrides(config: dict, prefix: str = "") -> list[str]:
    """verl command-line overrides for every key outside the ``dataflex:`` block."""
    out = []
    for key, value in config.items():
        if not prefix and key == "dataflex":
            continue
        if isinstance(value, dict):
            out += overrides(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={value}")
    return out


def test_the_recipes_table_links_every_recipe_with_its_components():
    rows = re.findall(r"^\| \[.*?\]\(#([\w-]+)\) \| (\w+) \| `(\w+)` \| `(\w+)` \|$", read("recipes.md"), re.M)
    assert [r[0] for r in rows] == list(RECIPES), "the table's rows and the recipe sections differ"
    for anchor, mechanism, scorer, actuator in rows:
        block = config_of(RECIPES[anchor])["dataflex"]
        assert (block["mechanism"], block["scorer"]["name"], block["actuator"]["name"]) == (mechanism, scorer, actuator)


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_recipe_names_installed_components_and_the_packages_that_ship_them(recipe):
    text = RECIPES[recipe]
    block = config_of(text)["dataflex"]
    registry = installed()
    scorer = registry.get("scorer", block["scorer"]["name"])
    actuator = registry.get(get_mechanism(block["mechanism"]).actuator_kind, block["actuator"]["name"])
    assert scorer is not None, f"{recipe}: scorer {block['scorer']['name']!r} is not installed"
    assert actuator is not None, (
        f"{recipe}: {block['mechanism']} actuator {block['actuator']['name']!r} is not installed"
    )
    install = re.search(r"```bash\npip install (.*)\n```", text)
    assert install, f"{recipe}: no pip install line"
    paths = install.group(1).split()
    assert sorted(paths) == sorted(f"./plugins/{d}" for d in {scorer.plugin.dist, actuator.plugin.dist})
    assert all((ROOT / path / "pyproject.toml").is_file() for path in paths), f"{recipe}: {paths}"


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_recipe_cites_its_paper_and_says_when_not_to_use_it(recipe):
    text = RECIPES[recipe]
    paper = re.search(r"\*\*Paper\*\*: (.*?)\n- \*\*", text, re.S)
    assert paper and re.search(r"\[arXiv (\d{4}\.\d{4,5})\]\(https://arxiv\.org/abs/\1\)", paper.group(1)), recipe
    assert "**When not to use it**:" in text and "**How**:" in text


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_recipe_mounts_in_verls_real_config(recipe):
    pytest.importorskip("verl")
    from dataflex_lab.verl.sandbox import compose_config
    from dataflex_verl.lines import trainer_line
    from dataflex_verl.mount import mount

    config = config_of(RECIPES[recipe])
    composed = compose_config(overrides(config), dataflex=config["dataflex"])
    mounted = mount(composed, line=trainer_line(composed))  # the line the recipe's trainer.use_v1 selects
    assert mounted.pipeline.actuator_spec.name == config["dataflex"]["actuator"]["name"]
    for name, value in config["dataflex"]["actuator"]["params"].items():
        assert getattr(mounted.pipeline.actuator, name) == value, f"{recipe}: param {name} did not reach the actuator"


# -- is it working? ----------------------------------------------------------------------------


def metric_names(page: str) -> set[str]:
    """Every ``dataflex/...`` metric a page names (``/std`` shorthands expanded after their stem)."""
    names = set()
    for cell in re.findall(r"^\| (`dataflex/.*?) \|", read(page), re.M):
        last = ""
        for name in re.findall(r"`([\w/<>]+)`", cell):
            if name.startswith("/"):  # `dataflex/weight/token_mean`, `/std`: a sibling of the last name
                name = last.rsplit("/", 1)[0] + name
            elif name.startswith("_"):  # `dataflex/groups_fully_dropped` (`_fraction`): a suffix of it
                name = last + name
            elif not name.startswith("dataflex/"):
                continue
            names.add(name)
            last = name
    return names


def test_every_metric_the_host_pages_document_has_a_healthy_range():
    documented = metric_names("host.md") | metric_names("mechanisms.md")
    assert len(documented) > 15, "the host pages lost their metric tables"
    covered = set(re.findall(r"`(dataflex/[\w/<>]+)`", read("is-it-working.md")))
    missing = sorted(documented - covered)
    assert not missing, f"metrics without a healthy range on is-it-working.md: {missing}"


def test_the_sample_output_is_what_the_metrics_code_prints(snippets, capsys, documented_output):
    import runpy

    capsys.readouterr()
    runpy.run_path(str(DOCS / "snippets" / "step_metrics.py"), run_name="__main__")
    printed = capsys.readouterr().out.strip()
    assert printed == documented_output("is-it-working.md", "step_metrics.py")
    assert documented_output("is-it-working.zh.md", "step_metrics.py") == printed
    for name in re.findall(r"^(dataflex/\S+)", printed, re.M):
        assert f"`{name}`" in read("is-it-working.md"), f"{name} is printed but has no healthy range"


# -- install ------------------------------------------------------------------------------------


def distributions() -> list[tuple[str, str]]:
    """(name, folder) of every released distribution."""
    folders = [*sorted(ROOT.glob("packages/*/pyproject.toml")), ROOT / "conformance" / "pyproject.toml"]
    folders += [p for p in sorted(ROOT.glob("plugins/*/pyproject.toml")) if p.parent.name != "_template"]
    out = []
    for pyproject in folders:
        name = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"]
        out.append((name, pyproject.parent.relative_to(ROOT).as_posix()))
    return out


@pytest.mark.parametrize("page", ["install.md", "install.zh.md"])
def test_the_install_page_links_every_distributions_changelog(page):
    repo = re.search(r"^repo_url:\s*(\S+)", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M).group(1)
    text = read(page)
    for name, folder in distributions():
        row = f"| `{name}` | `{folder}` | [CHANGELOG]({repo}/blob/main/{folder}/CHANGELOG.md) |"
        assert row in text, f"{page} lacks the row of {name}: {row}"


# -- coming from DataFlex-RL --------------------------------------------------------------------


def test_every_component_the_migration_page_compares_is_installed():
    registry = installed()
    names = {spec.name for spec in registry}
    table = sections("from-dataflex-rl.md")["components"]
    compared = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert len(compared) >= 10
    missing = sorted(set(compared) - names)
    assert not missing, f"from-dataflex-rl.md compares components that are not installed: {missing}"


# -- the catalog ----------------------------------------------------------------------------------


def test_every_actuator_snippet_is_a_complete_block_with_a_scorer_it_pairs_with(catalog_hook):
    from dataflex_core import build_from_config

    records = [r for r in catalog_hook.catalog_records(installed()) if r["kind"] != "scorer"]
    assert records
    for record in records:
        block = yaml.safe_load(catalog_hook.config_lines(record))["dataflex"]
        assert block["scorer"]["name"] in record["pairs"], f"{record['name']}: {block['scorer']['name']} does not pair"
        if "..." not in str(block):  # every param has a default: the block builds as printed
            build_from_config(block, adv_estimator="grpo", extra_keys=("domains",))


def test_each_actuator_lists_the_scorers_conformance_pairs_it_with(catalog_hook):
    from dataflex_conformance.subjects import pairing_problem

    registry = installed()
    records = {(r["kind"], r["name"]): r for r in catalog_hook.catalog_records(registry)}
    scorers = [s for s in registry if s.kind == "scorer"]
    for spec in registry:
        if spec.kind == "scorer":
            continue
        expected = [s.name for s in scorers if pairing_problem(spec.cls, s.cls) is None]
        assert records[(spec.kind, spec.name)]["pairs"] == expected
        for name in expected:
            assert f"{spec.kind}:{spec.name}" in records[("scorer", name)]["feeds"]
    page = catalog_hook.render_catalog(list(records.values()), "en")
    assert (
        "- **Pairs with**: [`token_prob`](#scorer-token-prob)" in page
        or ("reweighter", "advantage_reweight") not in records
    )


def test_catalog_docstrings_render_as_markdown_not_rst(catalog_hook):
    page = catalog_hook.render_catalog(catalog_hook.catalog_records(installed()), "zh")
    prose = re.sub(r"```.*?```", "", page, flags=re.S)
    assert "``" not in prose, "RST inline literals (``x``) left in the catalog"
    assert not re.search(r":(param|returns?|raises?|class|func)\b", prose), "RST fields or roles left in the catalog"
    assert "**参数**" in page and "- `temperature`:" in page


def test_docstring_markdown_escapes_formulas_and_lists_fields(catalog_hook):
    doc = "Summary with ``code``.\n\nFormula:\nw = 2 * s <= 3, see arXiv 1511.05952.\n\n:param alpha: first line\n    second line.\n:returns: weights."
    out = catalog_hook.docstring_markdown(doc, catalog_hook.LABELS["en"])
    assert out.splitlines()[0] == "Summary with `code`."
    assert "w = 2 \\* s &lt;= 3" in out and "[arXiv&nbsp;1511.05952](https://arxiv.org/abs/1511.05952)" in out
    assert "- `alpha`: first line second line." in out and "- returns: weights." in out


# -- search --------------------------------------------------------------------------------------


def index(separator: str, texts: dict[str, str]) -> dict:
    return {
        "config": {"separator": separator},
        "docs": [{"location": k, "title": "", "text": v} for k, v in texts.items()],
    }


def test_the_search_check_accepts_a_segmented_index_and_names_what_is_wrong_otherwise(search_hook):
    plugins = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["plugins"]
    site_separator = next(p["search"] for p in plugins if isinstance(p, dict) and "search" in p)["separator"]
    zwsp = "\u200b"
    good = index(
        site_separator, {"zh/host/": f"<p>{zwsp}归一化{zwsp}在{zwsp}有效{zwsp}单元</p>", "host/": "<p>mean one</p>"}
    )
    assert search_hook.search_index_problems(good, ["归一化"]) == []
    problems = search_hook.search_index_problems(good, ["归一化", "重加权"])
    assert problems == ["terms of docs/jieba/terms.txt that are no whole token of any Chinese page: ['重加权']"]
    unsegmented = index(r"[\s\-]+", {"zh/host/": "<p>归一化在有效单元</p>"})
    found = search_hook.search_index_problems(unsegmented, [])
    assert "does not split on U+200B" in found[0] and "not segmented" in found[1] and "jieba" in found[1]


def test_the_project_dictionary_is_well_formed(search_hook):
    lines = [line for line in (DOCS / "jieba" / "terms.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines, "docs/jieba/terms.txt is empty"
    for line in lines:
        assert re.fullmatch(r"[\u4e00-\u9fff]+ \d+ [a-z]+", line), f"not 'word frequency tag': {line!r}"
    assert len(search_hook.dictionary_terms()) == len(lines)


# -- installs that work today ----------------------------------------------------------------

#: The pages a new user installs from (the packages' own READMEs are their index pages, read once published).
INSTALL_PAGES = [*english_pages(), *(p.removesuffix(".md") + ".zh.md" for p in english_pages())]
#: How a page says an install needs the packages on an index.
ONCE_PUBLISHED = ("once published", "发布之后")


def index_installs(text: str) -> list[tuple[str, bool]]:
    """``(command, marked)`` for each ``pip install`` that takes a DataFlex distribution by name from an index
    (no path, no ``--find-links``); marked when its line, the comment above it or its tab says "once published"."""
    found = []
    for tab, block in re.findall(r'(?:=== "([^"]*)"\s*)?```bash\n(.*?)```', text, re.S):
        comment = ""
        for line in block.splitlines():
            command, _, note = line.partition("#")
            if not command.strip():
                comment = note
                continue
            names = re.findall(r"(?<![\w./-])dataflex-[a-z-]+(?![\w/])", command)
            if command.strip().startswith("pip install") and names and "--find-links" not in command:
                marked = any(m in f"{tab} {comment} {note}".lower() for m in ONCE_PUBLISHED)
                found.append((command.strip(), marked))
    for paragraph in re.split(r"\n\s*\n", re.sub(r"```.*?```", "", text, flags=re.S)):
        for command in re.findall(r"`(pip install [^`]*)`", paragraph):
            if re.search(r"(?<![\w./-])dataflex-[a-z-]+(?![\w/])", command) and "--find-links" not in command:
                found.append((command, any(m in paragraph.lower().replace("\n", " ") for m in ONCE_PUBLISHED)))
    return found


@pytest.mark.parametrize("page", [*INSTALL_PAGES, "../README.md", "../plugins/_template/README.md"])
def test_every_install_from_an_index_is_marked_once_published(page):
    """Until a release, ``pip install dataflex-...`` cannot work: a page leads with a checkout or a wheelhouse."""
    unmarked = [command for command, marked in index_installs(read(page)) if not marked]
    assert not unmarked, f"{page}: mark these 'once published' and lead with a checkout or wheelhouse: {unmarked}"


def test_the_index_install_check_finds_an_unmarked_command():
    assert index_installs("```bash\npip install dataflex-verl\n```\n") == [("pip install dataflex-verl", False)]
    assert index_installs("```bash\npip install ./plugins/dataflex-mixers\n```\n") == []
    assert index_installs("Once published, `pip install dataflex-lab` works.") == [("pip install dataflex-lab", True)]


def test_the_built_site_opens_from_disk():
    """With directory URLs a link is ``install/``, which a browser shows as a folder listing without a server."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    assert config.get("use_directory_urls") == "false", "set use_directory_urls: false in mkdocs.yml"
