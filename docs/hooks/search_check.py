"""mkdocs hook: fail a strict build whose search index cannot find Chinese words.

lunr, the search engine of mkdocs-material, splits text at the configured
separator only, and Chinese has no spaces: unless the index was segmented
into words when it was built, a Chinese query matches only where it happens
to begin a run of characters. mkdocs-material segments with jieba when jieba
is installed, putting zero-width spaces (U+200B) between words; the
separator must split on them. This hook reads the index after the build and
warns (an error under ``--strict``) when the Chinese pages were not
segmented, when the separator does not split on U+200B or on spaces (English
words), or when a term of the project's jieba dictionary (``docs/jieba/terms.txt``)
is not a whole token anywhere in the Chinese pages (a stale or mistyped entry).

The docs tests call :func:`search_index_problems` on a small index where mkdocs
is not installed.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

try:
    from mkdocs.plugins import event_priority
except ImportError:  # the docs tests import this module without mkdocs

    def event_priority(priority: float):
        return lambda fn: fn


log = logging.getLogger("mkdocs.hooks.dataflex_search_check")

ZERO_WIDTH_SPACE = "\u200b"
HAN = re.compile(r"[\u4e00-\u9fff]")
TAG = re.compile(r"<[^>]+>")
TERMS = Path(__file__).resolve().parents[1] / "jieba" / "terms.txt"


def dictionary_terms(path: Path = TERMS) -> list[str]:
    """The words of a jieba user dictionary (``word [frequency] [part-of-speech]`` per line)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return [line.split()[0] for line in lines if line.strip()]


def search_index_problems(index: dict[str, Any], terms: list[str], chinese_prefix: str = "zh/") -> list[str]:
    """What keeps ``index`` (mkdocs-material's ``search_index.json``) from finding Chinese and English words."""
    separator = re.compile(index["config"]["separator"])
    problems = [
        f"the search separator {separator.pattern!r} does not split on {what}"
        for what, text in (("U+200B (jieba's word boundary)", f"a{ZERO_WIDTH_SPACE}b"), ("spaces", "a b"))
        if len(separator.split(text)) != 2
    ]
    chinese = [
        TAG.sub(" ", f"{doc.get('title', '')} {doc.get('text', '')}")
        for doc in index["docs"]
        if doc.get("location", "").startswith(chinese_prefix)
    ]
    with_han = [text for text in chinese if HAN.search(text)]
    if not with_han:
        return problems + [f"no Chinese text under {chinese_prefix!r} in the search index"]
    if not any(ZERO_WIDTH_SPACE in text for text in with_han):
        problems.append(
            "the Chinese pages of the search index are not segmented into words: install jieba "
            "where the site is built (`nox -s docs` does)"
        )
        return problems
    tokens = {token for text in with_han for token in separator.split(text)}
    missing = [term for term in terms if term not in tokens]
    if missing:
        problems.append(f"terms of docs/jieba/terms.txt that are no whole token of any Chinese page: {missing}")
    return problems


# After the i18n plugin (priority -100), which builds the other languages and writes the combined index.
@event_priority(-200)
def on_post_build(config: Any, **kwargs: Any) -> None:
    path = Path(config["site_dir"]) / "search" / "search_index.json"
    if not path.is_file():
        log.warning(f"no search index at {path}: the site has no search")
        return
    for problem in search_index_problems(json.loads(path.read_text(encoding="utf-8")), dictionary_terms()):
        log.warning(problem)
