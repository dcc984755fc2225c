"""mkdocs hook: render the component catalog from the installed plugin registry at build time.

A hand-written catalog drifts from the code the day a plugin changes a
default; this one is read from ``dataflex_core.get_registry()`` each time the
site is built, so it lists exactly what ``pip install`` put in the docs
environment. A page opts in with the marker ``<!-- dataflex-catalog -->``.

A component without its own docstring, or a plugin that failed to load, is
logged as a warning, which fails ``mkdocs build --strict``.

The module imports nothing from mkdocs, so the docs tests can call
:func:`render_catalog` in any environment that has the plugins installed.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import re
import sys
from typing import Any

MARKER = "<!-- dataflex-catalog -->"
ARXIV = re.compile(r"arXiv[:\s]*(\d{4}\.\d{4,5})(?:v\d+)?", re.IGNORECASE)

log = logging.getLogger("mkdocs.hooks.dataflex_catalog")

LABELS = {
    "en": {
        "name": "Name",
        "kind": "Kind",
        "package": "Package",
        "granularity": "Granularity",
        "accepts": "Accepts granularity",
        "timing": "Timing",
        "groups": "Needs groups",
        "requires": "Reads fields",
        "range": "Score range",
        "any": "any finite value",
        "params": "Params (defaults)",
        "paper": "Paper",
        "summary": "Summary",
        "docstring": "Docstring",
        "pairs": "Pairs with",
        "feeds": "Feeds",
        "pairs_none": "no installed scorer fits its granularity and score range",
        "feeds_none": "no installed actuator accepts its scores",
        "fields": "Parameters",
        "returns": "returns",
        "raises": "raises",
        "required": "required",
        "none": "none",
        "yes": "yes",
        "no": "no",
        "local": "(not from an installed package)",
        "empty": "No dataflex plugins are installed in the environment that built this page.",
        "built_with": "Built from the plugins installed with dataflex-core {core}: {count} components in {dists} packages.",
        "kinds": {
            "scorer": "Scorers",
            "reweighter": "Reweighters",
            "selector": "Selectors",
            "mixer": "Mixers",
            "sampler": "Samplers",
            "allocator": "Allocators",
        },
    },
    "zh": {
        "name": "名称",
        "kind": "类型",
        "package": "包",
        "granularity": "粒度",
        "accepts": "接受的粒度",
        "timing": "时机",
        "groups": "需要分组",
        "requires": "读取字段",
        "range": "分数范围",
        "any": "任意有限值",
        "params": "参数（默认值）",
        "paper": "论文",
        "summary": "简介",
        "docstring": "文档字符串",
        "pairs": "可搭配的 scorer",
        "feeds": "可供给的执行器",
        "pairs_none": "没有已安装的 scorer 符合它的粒度和分数范围",
        "feeds_none": "没有已安装的执行器接受它的分数",
        "fields": "参数",
        "returns": "返回",
        "raises": "抛出",
        "required": "必填",
        "none": "无",
        "yes": "是",
        "no": "否",
        "local": "（不来自已安装的包）",
        "empty": "构建本页的环境中没有安装任何 dataflex 插件。",
        "built_with": "由 dataflex-core {core} 环境中已安装的插件生成：{dists} 个包，共 {count} 个组件。",
        "kinds": {
            "scorer": "Scorer",
            "reweighter": "Reweighter",
            "selector": "Selector",
            "mixer": "Mixer",
            "sampler": "Sampler",
            "allocator": "Allocator",
        },
    },
}


def own_docstring(cls: type) -> str:
    """The class's own docstring (not one inherited from a DataFlex base class), dedented."""
    doc = cls.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else ""


def papers(doc: str) -> list[str]:
    """arXiv ids cited in ``doc``, in order of first mention."""
    return list(dict.fromkeys(m.group(1) for m in ARXIV.finditer(doc)))


def cited_papers(cls: type) -> list[str]:
    """Papers the class docstring cites, else those of its module (one component per module)."""
    found = papers(own_docstring(cls))
    if found:
        return found
    module = sys.modules.get(cls.__module__)
    return papers(inspect.getdoc(module) or "") if module is not None else []


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _sphinx_roles():
    """The role rewriting of ``griffe_sphinx_roles.py`` beside this file (hooks are loaded by path)."""
    import importlib.util
    from pathlib import Path

    if "roles" not in _CACHE:
        path = Path(__file__).with_name("griffe_sphinx_roles.py")
        spec = importlib.util.spec_from_file_location("dataflex_docs_sphinx_roles", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _CACHE["roles"] = module
    return _CACHE["roles"]


#: Inline code (````x```` or ```x```) and Sphinx roles: the spans of a docstring line that are not prose.
CODE_SPAN = re.compile(r"(``.+?``|:\w+:`[^`]+`|`[^`]+`)")


def inline_markdown(text: str) -> str:
    """One line of RST docstring text as Markdown.

    ````x```` and roles such as ``:class:`X``` become inline code; arXiv ids become
    links; ``*``, ``<`` and backslashes in prose are escaped so a formula such
    as ``p_d <= 2 * x`` is not read as emphasis or HTML.
    """
    roles = _sphinx_roles()
    out = []
    for part in CODE_SPAN.split(text):
        if part.startswith("``") and part.endswith("``") and len(part) > 4:
            out.append(f"`{part[2:-2]}`")
        elif roles.ROLE.fullmatch(part):
            out.append(roles.ROLE.sub(roles._role, part))
        elif part.startswith("`") and part.endswith("`") and len(part) > 2:
            out.append(part)
        else:
            escaped = part.replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;")
            out.append(ARXIV.sub(lambda m: f"[arXiv&nbsp;{m.group(1)}](https://arxiv.org/abs/{m.group(1)})", escaped))
    return "".join(out)


FIELD_LINE = re.compile(r"^:(param|returns?|raises?)(?:\s+([\w.]+))?:\s*(.*)$")
#: A line that starts a block of its own: ``Label: ...``, or a formula variant such as ````mean````: ...
BLOCK_START = re.compile(r"^(?:[A-Z][\w ,()/'-]{0,40}:(?:\s|$)|``)")


def docstring_markdown(doc: str, labels: dict[str, Any]) -> str:
    """A component's docstring as Markdown: its prose in paragraphs, then its ``:param:`` fields as a list.

    Lines of a paragraph are joined; a ``Label:`` line, a line after one ending
    in ``:`` (a formula), and a line starting with inline code open a new one.
    """
    prose: list[str] = []
    fields: list[list[str]] = []
    in_field = False
    for line in doc.splitlines():
        match = FIELD_LINE.match(line)
        if match:
            fields.append([match.group(1), match.group(2) or "", match.group(3).strip()])
            in_field = True
        elif in_field and line[:1] in (" ", "\t") and line.strip():
            fields[-1][2] += " " + line.strip()
        elif in_field and not line.strip():
            continue
        else:
            in_field = False
            prose.append(line.strip())
    blocks: list[list[str]] = []
    previous = ""
    for line in prose:
        if not line:
            previous = ""
            continue
        if not blocks or not previous or previous.endswith(":") or BLOCK_START.match(line):
            blocks.append([])
        blocks[-1].append(line)
        previous = line
    out = [inline_markdown(" ".join(block)) for block in blocks]
    if fields:
        items = []
        for kind, name, text in fields:
            if kind == "param":
                items.append(f"- `{name}`: {inline_markdown(text)}")
            elif kind.startswith("return"):
                items.append(f"- {labels['returns']}: {inline_markdown(text)}")
            else:
                items.append(
                    f"- {labels['raises']} `{name}`: {inline_markdown(text)}"
                    if name
                    else f"- {labels['raises']}: {inline_markdown(text)}"
                )
        out.append(f"**{labels['fields']}**\n\n" + "\n".join(items))
    return "\n\n".join(out)


def _default(value: Any, labels: dict[str, Any]) -> str:
    return labels["required"] if value is inspect.Parameter.empty else repr(value)


def component_record(spec: Any) -> dict[str, Any]:
    """Everything the catalog shows about one registered component, as plain data."""
    from dataflex_core import accepted_params

    cls = spec.cls
    doc = own_docstring(cls)
    record = {
        "name": spec.name,
        "kind": spec.kind,
        "dist": spec.plugin.dist,
        "version": spec.plugin.version,
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "needs_groups": bool(cls.needs_groups),
        "requires": list(cls.requires),
        "score_range": getattr(cls, "score_range", None),
        "params": accepted_params(cls),
        "docstring": doc,
        "summary": doc.splitlines()[0] if doc else "",
        "papers": cited_papers(cls),
    }
    if spec.kind == "scorer":
        record["granularity"] = cls.granularity
        record["timing"] = cls.timing
    else:
        record["accepts_granularity"] = tuple(cls.accepts_granularity)
    return record


#: "pair it with ``name``" / "paired with the ``name`` scorer" in an actuator's class or module
#: docstring: the scorer its author recommends.
RECOMMENDED = re.compile(r"pair(?:ed)?(?:\s+it|\s+them)?\s+with\s+(?:the\s+)?``(\w+)``", re.IGNORECASE)


def recommended_scorers(cls: type) -> list[str]:
    """Scorers the actuator's class docstring recommends, then those its module docstring does."""
    module = sys.modules.get(cls.__module__)
    texts = [own_docstring(cls), inspect.getdoc(module) or "" if module is not None else ""]
    return [name for text in texts for name in RECOMMENDED.findall(text)]


def catalog_records(registry: Any = None) -> list[dict[str, Any]]:
    """Records of every component in ``registry`` (default: the installed plugins), by kind then name.

    Each actuator's record lists the scorers it pairs with (``pairs``: the
    granularity and score-range rule of ``dataflex_conformance``, which certifies
    exactly those pairs) and the one its config lines use (``snippet_scorer``:
    the scorer its docstring recommends, else the first that pairs); each
    scorer's record lists the actuators it feeds (``feeds``).
    """
    from dataflex_conformance.subjects import pairing_problem

    if registry is None:
        from dataflex_core import get_registry

        registry = get_registry()
    specs = list(registry)
    records = [component_record(spec) for spec in specs]
    scorers = [(spec, record) for spec, record in zip(specs, records) if spec.kind == "scorer"]
    for record in records:
        record["pairs"], record["feeds"] = [], []
    for spec, record in zip(specs, records):
        if spec.kind == "scorer":
            continue
        for scorer_spec, scorer_record in scorers:
            if pairing_problem(spec.cls, scorer_spec.cls) is None:
                record["pairs"].append(scorer_spec.name)
                scorer_record["feeds"].append(f"{spec.kind}:{spec.name}")
        recommended = [n for n in recommended_scorers(spec.cls) if n in record["pairs"]]
        chosen = (recommended or record["pairs"] or [None])[0]
        scorer_record = next((r for s, r in scorers if s.name == chosen), None)
        record["snippet_scorer"] = (
            {"name": chosen, "params": scorer_record["params"]} if scorer_record is not None else None
        )
    return records


def _package(record: dict[str, Any], labels: dict[str, Any]) -> str:
    if not record["dist"]:
        return labels["local"]
    return f"`{record['dist']}=={record['version']}`"


def _params(record: dict[str, Any], labels: dict[str, Any]) -> str:
    if not record["params"]:
        return labels["none"]
    return ", ".join(f"`{k}={_default(v, labels)}`" for k, v in record["params"].items())


def _paper_links(record: dict[str, Any]) -> str:
    return ", ".join(f"[arXiv&nbsp;{p}](https://arxiv.org/abs/{p})" for p in record["papers"]) or "–"


def _granularity(record: dict[str, Any]) -> str:
    if record["kind"] == "scorer":
        return f"`{record['granularity']}`"
    return ", ".join(f"`{g}`" for g in record["accepts_granularity"])


#: The ``dataflex.mechanism`` that drives each actuator kind.
MECHANISM_OF = {
    "reweighter": "reweight",
    "selector": "select",
    "mixer": "mix",
    "sampler": "curriculum",
    "allocator": "allocate",
}


def yaml_value(value: Any) -> str:
    """A parameter default as YAML flow syntax (``...`` marks a required parameter)."""
    if value is inspect.Parameter.empty:
        return "..."
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def _entry(name: str, params: dict[str, Any]) -> str:
    values = ", ".join(f"{k}: {yaml_value(v)}" for k, v in params.items())
    return f"{{name: {name}, params: {{{values}}}}}"


def config_lines(record: dict[str, Any]) -> str:
    """The lines of the ``dataflex:`` block that use this component, with every param at its default.

    An actuator's lines name a scorer it pairs with (``snippet_scorer``), so they form a complete block.
    """
    entry = _entry(record["name"], record["params"])
    if record["kind"] == "scorer":
        return f"dataflex:\n  scorer: {entry}"
    lines = ["dataflex:", f"  mechanism: {MECHANISM_OF[record['kind']]}"]
    scorer = record.get("snippet_scorer")
    if scorer is not None:
        lines.append(f"  scorer: {_entry(scorer['name'], scorer['params'])}")
    lines.append(f"  actuator: {entry}")
    if record["kind"] == "mixer":
        lines.append("  domains: [math, code]  # the domain names of your dataset")
    return "\n".join(lines)


def _links(keys: list[str], records: list[dict[str, Any]]) -> str:
    """``kind:name`` keys as links to their catalog sections (plain code when not on the page)."""
    shown = {f"{r['kind']}:{r['name']}": anchor(r) for r in records}
    parts = []
    for key in keys:
        name = key.split(":", 1)[1]
        parts.append(f"[`{name}`](#{shown[key]})" if key in shown else f"`{name}`")
    return ", ".join(parts)


def anchor(record: dict[str, Any]) -> str:
    return f"{record['kind']}-{record['name']}".replace("_", "-")


def render_catalog(records: list[dict[str, Any]], lang: str = "en", core_version: str | None = None) -> str:
    """Markdown for the catalog: one summary table per kind, then a section per component."""
    labels = LABELS.get(lang, LABELS["en"])
    if core_version is None:
        from dataflex_core import __version__ as core_version
    if not records:
        return f"!!! warning\n    {labels['empty']}\n"
    dists = {r["dist"] for r in records if r["dist"]}
    out = [labels["built_with"].format(core=core_version, count=len(records), dists=len(dists)), ""]
    kinds = list(dict.fromkeys(r["kind"] for r in records))
    for kind in kinds:
        rows = [r for r in records if r["kind"] == kind]
        gran = labels["granularity"] if kind == "scorer" else labels["accepts"]
        out += [f"## {labels['kinds'][kind]}", ""]
        out.append(
            f"| {labels['name']} | {labels['package']} | {gran} | {labels['groups']} | "
            f"{labels['paper']} | {labels['summary']} |"
        )
        out.append("| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            package = f"{r['dist']} {r['version']}" if r["dist"] else labels["local"]
            out.append(
                f"| [`{r['name']}`](#{anchor(r)}) | {package} | {_granularity(r)} | "
                f"{labels['yes'] if r['needs_groups'] else labels['no']} | "
                f"{_paper_links(r)} | {_cell(inline_markdown(r['summary']))} |"
            )
        out.append("")
        for r in rows:
            out += [f"### `{r['name']}` {{#{anchor(r)}}}", ""]
            facts = [
                (labels["kind"], f"{r['kind']} (`{r['class']}`)"),
                (labels["package"], _package(r, labels)),
                (gran, _granularity(r)),
            ]
            if kind == "scorer":
                facts.append((labels["timing"], f"`{r['timing']}`"))
            facts += [
                (labels["groups"], labels["yes"] if r["needs_groups"] else labels["no"]),
                (labels["requires"], ", ".join(f"`{f}`" for f in r["requires"]) or labels["none"]),
                (labels["range"], f"`{list(r['score_range'])}`" if r["score_range"] else labels["any"]),
                (labels["params"], _params(r, labels)),
                (labels["paper"], _paper_links(r)),
            ]
            if kind == "scorer":
                facts.append((labels["feeds"], _links(r["feeds"], records) or labels["feeds_none"]))
            else:
                facts.append(
                    (labels["pairs"], _links([f"scorer:{n}" for n in r["pairs"]], records) or labels["pairs_none"])
                )
            out += [f"- **{k}**: {v}" for k, v in facts]
            out += ["", "```yaml", config_lines(r), "```"]
            out += ["", f'??? note "{labels["docstring"]}"', ""]
            out += [f"    {line}".rstrip() for line in docstring_markdown(r["docstring"], labels).splitlines()]
            out += [""]
    return "\n".join(out)


def problems(records: list[dict[str, Any]], failures: list[Any] = ()) -> list[str]:
    """What makes the catalog incomplete: undocumented components and plugins that failed to load."""
    found = [
        f"{r['kind']} {r['name']!r} ({r['class']}) has no docstring of its own" for r in records if not r["docstring"]
    ]
    found += [f"the catalog misses a plugin: {f.message}" for f in failures]
    return found


def _page_lang(page: Any, config: Any) -> str:
    src = getattr(page.file, "src_uri", "") or ""
    if src.endswith(".zh.md"):
        return "zh"
    theme = config.get("theme") if hasattr(config, "get") else None
    language = getattr(theme, "get", lambda *_: None)("language") if theme is not None else None
    return "zh" if str(language or "").startswith("zh") else "en"


_CACHE: dict[str, Any] = {}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    if "records" not in _CACHE:
        from dataflex_core import get_plugin_manager

        manager = get_plugin_manager()
        records = [r for r in catalog_records(manager.registry()) if r["dist"]]
        for problem in problems(records, manager.failures):
            log.warning(problem)
        _CACHE["records"] = records
    return markdown.replace(MARKER, render_catalog(_CACHE["records"], _page_lang(page, config)))
