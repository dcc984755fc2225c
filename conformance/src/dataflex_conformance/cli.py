"""``dataflex-conformance``: certify installed DataFlex plugins and write the report.

Exit status 0 only when every check passed (or failed as declared with
``--xfail``); 1 when anything failed, including ``--device cuda`` without
CUDA, an uninstalled distribution or a plugin that cannot be imported;
2 for a malformed command line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from .certify import certify
from .devices import DEVICE_CHOICES
from .report import print_summary
from .suite import ALL_CHECK_NAMES
from .version import __version__


def _key_value(text: str, flag: str, sep: str = "=") -> tuple[str, str]:
    key, found, value = text.partition(sep)
    if not found or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"{flag} {text!r} must look like KEY{sep}VALUE")
    return key.strip(), value.strip()


def _xfail(text: str) -> tuple[str, str]:
    return _key_value(text, "--xfail")


def _params(text: str) -> tuple[str, dict]:
    name, raw = _key_value(text, "--params")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--params {text!r}: {raw!r} is not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"--params {text!r}: expected a JSON object such as '{{\"temperature\": 0.5}}'"
        )
    return name, value


def _fields(text: str) -> dict:
    module_name, found, attr = text.partition(":")
    if not found:
        raise argparse.ArgumentTypeError(f"--fields {text!r} must look like MODULE:ATTRIBUTE")
    try:
        value = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise argparse.ArgumentTypeError(f"--fields {text!r}: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"--fields {text!r} must name a dict of field name -> synthesiser")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dataflex-conformance",
        description="Certify DataFlex plugins: shapes, devices, declared fields and mean-one normalisation.",
        epilog=f"checks: {', '.join(ALL_CHECK_NAMES)}",
    )
    parser.add_argument(
        "dists", nargs="*", metavar="DIST", help="distributions to certify (default: every installed plugin)"
    )
    parser.add_argument(
        "--device",
        choices=DEVICE_CHOICES,
        default="auto",
        help="auto: CPU and every CUDA device present; cuda without CUDA fails (default: auto)",
    )
    parser.add_argument("--report", metavar="PATH", help="write the JSON report here")
    parser.add_argument(
        "--xfail",
        action="append",
        type=_xfail,
        default=[],
        metavar="CHECK=REASON",
        help="declare an expected failure; CHECK is a check name, <component>-<check> or a full check id",
    )
    parser.add_argument(
        "--fields",
        action="append",
        type=_fields,
        default=[],
        metavar="MODULE:ATTR",
        help="a dict {field: synthesiser(ctx)} for batch fields the suite cannot synthesise",
    )
    parser.add_argument(
        "--params",
        action="append",
        type=_params,
        default=[],
        metavar="NAME=JSON",
        help="certify component NAME with these params (repeat for several sets)",
    )
    parser.add_argument("--version", action="version", version=f"dataflex-conformance {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    fields: dict = {}
    for mapping in args.fields:
        fields.update(mapping)
    params: dict[str, list[dict]] = {}
    for name, value in args.params:
        params.setdefault(name, []).append(value)
    report = certify(
        args.dists or None,
        device=args.device,
        expected_failures=dict(args.xfail),
        fields=fields,
        params=params,
    )
    path = report.write(args.report) if args.report else None
    print_summary(report)
    if path is not None:
        print(f"report: {path}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
