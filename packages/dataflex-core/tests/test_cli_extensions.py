"""Sub-commands other distributions add to ``dataflex``: found through ``dataflex.cli``, explained when missing."""

from __future__ import annotations

from importlib import metadata

import pytest

from dataflex_core import cli_extensions
from dataflex_core.cli import build_parser, main
from dataflex_core.cli_extensions import CLI_GROUP, EXIT_UNAVAILABLE

HELLO = """
def add(subparsers, name):
    parser = subparsers.add_parser(name, help="say hello")
    parser.add_argument("--to", default="world")
    parser.set_defaults(func=lambda args: print(f"hello {args.to}") or 0)
    return parser
"""


@pytest.fixture
def only_installed(monkeypatch):
    """``only_installed(*dists)``: the ``dataflex.cli`` entry points are those of these distributions only."""
    real = metadata.entry_points

    def restrict(*dists: str) -> None:
        def entry_points(**params):
            found = real(**params)
            return [e for e in found if e.dist is not None and e.dist.metadata["Name"] in dists]

        monkeypatch.setattr(cli_extensions.metadata, "entry_points", entry_points)

    return restrict


def test_a_command_of_a_missing_distribution_says_what_to_install(only_installed, capsys):
    only_installed()  # dataflex-lab is not installed
    for argv in (["compare", "runs.json", "--metric", "reward"], ["compare", "--help"], ["compare"]):
        assert main(argv) == EXIT_UNAVAILABLE
        err = capsys.readouterr().err
        assert "dataflex compare: this command comes with dataflex-lab, which is not installed here" in err
        assert "pip install dataflex-lab" in err
    assert "(not installed: pip install dataflex-lab)" in build_parser().format_help()


def test_an_installed_distribution_adds_its_command(fake_site, only_installed, capsys):
    fake_site.add_dist("acme-hello", "1.0", {"acme_hello": HELLO}, {"dataflex.hello": "acme_hello:add"}, CLI_GROUP)
    only_installed("acme-hello")
    assert main(["hello", "--to", "you"]) == 0
    assert capsys.readouterr().out == "hello you\n"
    assert "say hello" in build_parser().format_help()


def test_an_extension_that_fails_to_load_is_named_and_the_other_commands_still_run(fake_site, only_installed, capsys):
    fake_site.add_dist(
        "acme-broken", "0.1", {"acme_broken": "raise ImportError('needs acme-lib')"}, {"dataflex.hello": "acme_broken:add"},
        CLI_GROUP,
    )  # fmt: skip
    only_installed("acme-broken")
    assert main(["plugins", "--json"]) in (0, 1)  # the core's own commands are unaffected
    capsys.readouterr()
    assert main(["hello"]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert "acme-broken==0.1 provides this command but failed to load it (acme_broken:add)" in err
    assert "ImportError: needs acme-lib" in err


def test_a_command_two_distributions_provide_is_refused_naming_both(fake_site, only_installed, capsys):
    for dist in ("acme-one", "acme-two"):
        module = dist.replace("-", "_")
        fake_site.add_dist(dist, "1.0", {module: HELLO}, {"dataflex.hello": f"{module}:add"}, CLI_GROUP)
    only_installed("acme-one", "acme-two")
    assert main(["hello"]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert "more than one installed distribution provides this command" in err
    assert "acme-one==1.0" in err and "acme-two==1.0" in err


def test_an_entry_point_of_another_program_is_not_added_here(fake_site, only_installed):
    fake_site.add_dist("acme-host", "1.0", {"acme_host": HELLO}, {"dataflex-acme.hello": "acme_host:add"}, CLI_GROUP)
    only_installed("acme-host")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["hello"])
