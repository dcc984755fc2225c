"""Sub-commands other distributions add to DataFlex's console scripts, through the entry-point group ``dataflex.cli``.

An entry point ``<program>.<command>`` (``dataflex.compare``) names ``add(subparsers, name)``, which adds the
command's parser and handler. A program lists the commands it expects from elsewhere, so a missing one says
what to install and a failing one says which distribution failed and why.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from importlib import metadata

#: The entry-point group of the console scripts' added sub-commands.
CLI_GROUP = "dataflex.cli"
#: Exit status of a command that is not installed or did not load.
EXIT_UNAVAILABLE = 2


def _entry_points(program: str) -> dict[str, list[metadata.EntryPoint]]:
    """Command name -> the entry points of ``CLI_GROUP`` that add it to ``program``."""
    found: dict[str, list[metadata.EntryPoint]] = {}
    for entry in metadata.entry_points(group=CLI_GROUP):
        prefix, _, command = entry.name.rpartition(".")
        if prefix == program and command:
            found.setdefault(command, []).append(entry)
    return found


def _provider(entry: metadata.EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    return f"{dist.metadata['Name']}=={dist.version}" if dist is not None else entry.value


def _unavailable(subparsers: argparse._SubParsersAction, program: str, name: str, summary: str, message: str) -> None:
    """A command that takes any arguments (``--help`` included) and only explains why it cannot run."""

    def refuse(args: argparse.Namespace) -> int:
        print(f"{program} {name}: {message}", file=sys.stderr)
        return EXIT_UNAVAILABLE

    # No prefix characters: every argument, "--help" too, is collected instead of parsed.
    parser = subparsers.add_parser(name, help=summary, description=message, add_help=False, prefix_chars="\0")
    parser.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)
    parser.set_defaults(func=refuse)


def add_extension_commands(
    subparsers: argparse._SubParsersAction, program: str, expected: Mapping[str, str] | None = None
) -> None:
    """Add the commands installed distributions provide for ``program``; stand-ins for ``expected`` ones missing.

    :param expected: command -> the requirement that provides it (``{"compare": "dataflex-lab"}``): without a
        provider, the command exits with :data:`EXIT_UNAVAILABLE` and names the ``pip install`` that adds it.
    """
    expected = expected or {}
    provided = _entry_points(program)
    for name in sorted(set(provided) | set(expected)):
        entries = provided.get(name, [])
        if not entries:
            requirement = expected[name]
            _unavailable(
                subparsers,
                program,
                name,
                f"(not installed: pip install {requirement})",
                f"this command comes with {requirement.split('[')[0]}, which is not installed here; "
                f"pip install {requirement}",
            )
            continue
        if len(entries) > 1:
            providers = ", ".join(_provider(e) for e in entries)
            _unavailable(
                subparsers,
                program,
                name,
                "(provided twice: see the error)",
                f"more than one installed distribution provides this command ({providers}); uninstall all but one",
            )
            continue
        (entry,) = entries
        try:
            add: Callable[[argparse._SubParsersAction, str], object] = entry.load()
            add(subparsers, name)
        except Exception as exc:  # noqa: BLE001 - a broken extension must not take the program down with it
            if name in subparsers.choices:
                raise  # it added its parser and then failed: a bug of the extension, shown as is
            _unavailable(
                subparsers,
                program,
                name,
                "(failed to load: see the error)",
                f"{_provider(entry)} provides this command but failed to load it ({entry.value}): "
                f"{type(exc).__name__}: {exc}",
            )
