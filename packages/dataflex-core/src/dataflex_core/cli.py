"""``dataflex`` console script: inspect and pin the installed plugin set.

While plugins load, anything they write to standard output goes to stderr, so the output of ``plugins``,
``lock`` and ``verify`` stays parseable. Other distributions add sub-commands (:mod:`.cli_extensions`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import sys
from collections.abc import Iterator, Sequence

from .cli_extensions import add_extension_commands
from .discovery import ENV_PLUGINS_LOCK
from .lock.enforce import get_plugin_manager
from .lock.file import DEFAULT_LOCK_FILE
from .version import __version__

#: Exit status of ``dataflex verify`` when the environment differs from the lock.
EXIT_MISMATCH = 1
#: Exit status when the lock file cannot be read or written.
EXIT_LOCK_ERROR = 2
#: Sub-commands of ``dataflex`` that other distributions provide, with what to install for each.
EXTENSION_COMMANDS = {"compare": "dataflex-lab", "ledger": "dataflex-lab"}


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send what is written to standard output meanwhile to stderr: ``sys.stdout``, and file descriptor 1 for C code."""
    sys.stdout.flush()
    try:
        os.fstat(1), os.fstat(2)
        saved = os.dup(1)
    except OSError:  # no standard streams to redirect: only the Python-level one
        saved = None
    if saved is not None:
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            # flush C stdio buffers, so what C code printed meanwhile is not written after the redirect ends
            with contextlib.suppress(OSError, AttributeError, TypeError):  # no C library to ask: nothing buffered
                ctypes.CDLL(None).fflush(None)
            os.dup2(saved, 1)
            os.close(saved)


def _plugins(args: argparse.Namespace) -> int:
    from .errors import DataFlexError
    from .lock import LockFileError
    from .plugin_report import plugin_table

    try:
        with _stdout_to_stderr():
            # Never strict here: listing every plugin, broken ones included, is the point.
            manager = _loaded_manager()
            rows = manager.describe_plugins()
            problems = manager.problems()
    except (LockFileError, DataFlexError) as exc:
        print(f"dataflex plugins: {exc}", file=sys.stderr)
        return EXIT_LOCK_ERROR if isinstance(exc, LockFileError) else EXIT_MISMATCH
    print(json.dumps(rows, indent=2, sort_keys=True) if args.json else plugin_table(rows))
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    if args.verbose:
        for failure in manager.all_failures:
            print(f"\n{failure.plugin.label}:\n{failure.traceback}", file=sys.stderr)
    elif manager.all_failures:
        print("run `dataflex plugins -v` for the tracebacks", file=sys.stderr)
    return EXIT_MISMATCH if problems else 0


def _loaded_manager():
    """The process-wide manager, loaded without strict mode so every failure is listed."""
    import warnings

    from .discovery import ENV_STRICT, PluginLoadWarning

    saved = os.environ.pop(ENV_STRICT, None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PluginLoadWarning)
            return get_plugin_manager()
    finally:
        if saved is not None:
            os.environ[ENV_STRICT] = saved


def _lock(args: argparse.Namespace) -> int:
    from .atomic_write import write_text_atomic
    from .lock import LockFileError, lock_environment, read_lock, write_lock

    try:
        if args.from_lock:
            plugin_set, source = read_lock(args.from_lock), args.from_lock
        else:
            with _stdout_to_stderr():
                plugin_set, source = lock_environment(), "the installed environment"
    except LockFileError as exc:
        print(f"dataflex lock: {exc}", file=sys.stderr)
        return EXIT_LOCK_ERROR
    for record in plugin_set.plugins.values():
        for name in record.startup_files:
            print(
                f"note: {record.name} installs {name}, which Python runs at every start-up, before any lock is "
                "checked; see section 6 of the production guide (what a lock guarantees, and what it cannot)",
                file=sys.stderr,
            )
    if args.requirements:
        try:
            text = plugin_set.requirements(source=args.from_lock or "")
        except LockFileError as exc:
            print(f"dataflex lock: {exc}", file=sys.stderr)
            return EXIT_LOCK_ERROR
        if args.output in (None, "-"):
            sys.stdout.write(text)
            return 0
        if not _write_or_report(lambda: write_text_atomic(args.output, text), args.output):
            return EXIT_LOCK_ERROR
        print(f"wrote {len(plugin_set.plugins) + 1} pins to {args.output}", file=sys.stderr)
        return 0
    if args.from_lock:
        print("dataflex lock: --from only makes sense with --requirements", file=sys.stderr)
        return EXIT_LOCK_ERROR
    output = args.output or DEFAULT_LOCK_FILE
    if output == "-":
        sys.stdout.write(plugin_set.to_toml())
        return 0
    if not _write_or_report(lambda: write_lock(plugin_set, output), output):
        return EXIT_LOCK_ERROR
    print(f"locked {plugin_set.summary()} from {source} into {output}", file=sys.stderr)
    return 0


def _write_or_report(write, output: str) -> bool:
    """Run ``write``; a path that cannot take the file (a directory, a device, a missing folder, a full or
    read-only disk) is one line on stderr naming it, and False."""
    from .atomic_write import UnwritableTargetError

    try:
        write()
    except UnwritableTargetError as exc:
        print(f"dataflex lock: {exc}", file=sys.stderr)
        return False
    except OSError as exc:
        print(f"dataflex lock: cannot write {output!r}: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True


def _verify(args: argparse.Namespace) -> int:
    from .lock import (
        LockFileError,
        compare,
        format_differences,
        installed_plugin_set,
        read_lock,
        remedies,
        scan_environment,
    )
    from .lock.compare import outside_rows, sorted_rows

    path = args.lock or os.environ.get(ENV_PLUGINS_LOCK, "").strip() or DEFAULT_LOCK_FILE
    try:
        locked = read_lock(path)
    except LockFileError as exc:
        print(f"dataflex verify: {exc}", file=sys.stderr)
        return EXIT_LOCK_ERROR
    # Only locked distributions whose files match the lock are imported (to list their components):
    # a changed one, or one with an entry point outside its files, is reported from its metadata and hashes, never run.
    installed = installed_plugin_set(only=locked.dist_names)
    outside = outside_rows(installed)
    changed = {d.dist for d in [*compare(locked, installed), *outside]}
    unchanged = [] if args.no_import else [name for name in locked.dist_names if name not in changed]
    with _stdout_to_stderr():
        actual = scan_environment(load=unchanged)
    differences = sorted_rows([*compare(locked, actual), *outside])
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
        for line in remedies(refused, path):
            print(line, file=sys.stderr)
        return EXIT_MISMATCH
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dataflex", description="DataFlex plugin tools")
    parser.add_argument("--version", action="version", version=f"dataflex-core {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    plugins = sub.add_parser("plugins", help="list installed dataflex plugins and their components")
    plugins.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plugins.add_argument("-v", "--verbose", action="store_true", help="print the traceback of each failed plugin")
    plugins.set_defaults(func=_plugins)

    lock = sub.add_parser("lock", help="write a lock of the installed plugin set (TOML), or its pip pins")
    lock.add_argument("-o", "--output", help=f"file to write ('-' for stdout); default {DEFAULT_LOCK_FILE}, or "
                      "stdout with --requirements")  # fmt: skip
    lock.add_argument("--requirements", action="store_true", help="write name==version pins instead of the lock")
    lock.add_argument("--from", dest="from_lock", metavar="LOCK", help="with --requirements: pin this lock's set")
    lock.set_defaults(func=_lock)

    verify = sub.add_parser("verify", help="check the installed plugin set against a lock; non-zero exit on change")
    verify.add_argument("lock", nargs="?", help=f"lock file; default ${ENV_PLUGINS_LOCK}, else ./{DEFAULT_LOCK_FILE}")
    verify.add_argument("--allow-drift", action="store_true", help="accept version and content changes (warn only)")
    verify.add_argument("--no-import", action="store_true", help="compare metadata and files only; import nothing")
    verify.add_argument("--json", action="store_true", help="print the differences as JSON")
    verify.set_defaults(func=_verify)

    add_extension_commands(sub, "dataflex", EXTENSION_COMMANDS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # what is still buffered meets a closed pipe here, not at interpreter exit
    except BrokenPipeError:
        # the reader left (`dataflex plugins --json | head`): end quietly, as `cat` does, with nothing more to write
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
