"""``dataflex`` console script: inspect the installed plugin set."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .plugins import ENV_PLUGINS_LOCK, get_plugin_manager
from .version import __version__

#: Exit status of ``dataflex verify`` when the environment differs from the lock.
EXIT_MISMATCH = 1
#: Exit status when the lock file cannot be read or written.
EXIT_LOCK_ERROR = 2


def _plugins(args: argparse.Namespace) -> int:
    manager = get_plugin_manager()
    rows = manager.describe_plugins()
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    if not rows:
        print("no dataflex plugins installed (entry-point group 'dataflex')")
        return 0
    header = ("entry point", "distribution", "version", "status", "components")
    table = [header]
    for row in rows:
        comps = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in sorted(row["components"].items()))
        table.append(
            (
                row["entry_point"],
                row["distribution"] or "-",
                row["version"] or "-",
                row["status"],
                comps or row.get("error", ""),
            )
        )
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header) - 1)]
    for r in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) + "  " + str(r[-1]))
    return 0


def _lock(args: argparse.Namespace) -> int:
    from .lock import DEFAULT_LOCK_FILE, LockFileError, lock_environment, read_lock, write_lock

    try:
        if args.from_lock:
            plugin_set, source = read_lock(args.from_lock), args.from_lock
        else:
            plugin_set, source = lock_environment(), "the installed environment"
    except LockFileError as exc:
        print(f"dataflex lock: {exc}", file=sys.stderr)
        return EXIT_LOCK_ERROR
    if args.requirements:
        text = plugin_set.requirements(source=args.from_lock or "")
        if args.output in (None, "-"):
            sys.stdout.write(text)
        else:
            Path(args.output).write_text(text, encoding="utf-8")
            print(f"wrote {len(plugin_set.plugins) + 1} pins to {args.output}", file=sys.stderr)
        return 0
    if args.from_lock:
        print("dataflex lock: --from only makes sense with --requirements", file=sys.stderr)
        return EXIT_LOCK_ERROR
    output = args.output or DEFAULT_LOCK_FILE
    if output == "-":
        sys.stdout.write(plugin_set.to_toml())
        return 0
    write_lock(plugin_set, output)
    print(f"locked {plugin_set.summary()} from {source} into {output}", file=sys.stderr)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from .lock import (
        DEFAULT_LOCK_FILE,
        LockFileError,
        compare,
        format_differences,
        read_lock,
        scan_environment,
    )

    path = args.lock or os.environ.get(ENV_PLUGINS_LOCK, "").strip() or DEFAULT_LOCK_FILE
    try:
        locked = read_lock(path)
    except LockFileError as exc:
        print(f"dataflex verify: {exc}", file=sys.stderr)
        return EXIT_LOCK_ERROR
    # only the locked distributions are imported (to list their components)
    actual = scan_environment(load=() if args.no_import else locked.dist_names)
    differences = compare(locked, actual)
    refused = [d for d in differences if not (args.allow_drift and d.is_drift)]
    if args.json:
        print(
            json.dumps({"lock": path, "ok": not refused, "differences": [d.as_dict() for d in differences]}, indent=2)
        )
        return EXIT_MISMATCH if refused else 0
    if not differences:
        print(f"ok: the environment matches {path} ({locked.summary()})")
        return 0
    verdict = "accepted as drift (--allow-drift)" if not refused else "does not match"
    print(f"the environment {verdict} {path}:")
    print(format_differences(differences))
    if refused:
        print(
            "review the change, then re-lock with `dataflex lock -o " + path + "`, or restore the locked set "
            "with `dataflex lock --requirements --from " + path + " > pins.txt && pip install -r pins.txt`",
            file=sys.stderr,
        )
        return EXIT_MISMATCH
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dataflex", description="DataFlex plugin tools")
    parser.add_argument("--version", action="version", version=f"dataflex-core {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    plugins = sub.add_parser("plugins", help="list installed dataflex plugins and their components")
    plugins.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plugins.set_defaults(func=_plugins)

    lock = sub.add_parser("lock", help="write a lock of the installed plugin set (TOML), or its pip pins")
    lock.add_argument("-o", "--output", help="file to write ('-' for stdout); default dataflex.lock, or stdout "
                      "with --requirements")  # fmt: skip
    lock.add_argument("--requirements", action="store_true", help="write name==version pins instead of the lock")
    lock.add_argument("--from", dest="from_lock", metavar="LOCK", help="with --requirements: pin this lock's set")
    lock.set_defaults(func=_lock)

    verify = sub.add_parser("verify", help="check the installed plugin set against a lock; non-zero exit on change")
    verify.add_argument("lock", nargs="?", help=f"lock file; default ${ENV_PLUGINS_LOCK} or dataflex.lock")
    verify.add_argument("--allow-drift", action="store_true", help="accept version and content changes (warn only)")
    verify.add_argument("--no-import", action="store_true", help="compare metadata and files only; import nothing")
    verify.add_argument("--json", action="store_true", help="print the differences as JSON")
    verify.set_defaults(func=_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
