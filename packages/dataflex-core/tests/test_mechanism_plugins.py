"""A mechanism shipped by a distribution: discovered, resolved, listed, locked; a bad one fails only its plugin.

Also a component kind a distribution declares with its own base class: it registers through the one
components hook and is listed and locked like a shipped kind.
"""

import json

import pytest

from dataflex_core import ConfigError, DeclarationError, build_from_config, get_plugin_manager
from dataflex_core.cli import main as cli_main
from dataflex_core.components import BASE_CLASSES, Component, Scorer, kind_of
from dataflex_core.lock import LockFileError, parse_lock, scan_environment
from dataflex_core.mechanisms import get_mechanism, mechanism_names

#: A mechanism-only distribution: doubled reweighter weights (loss weights, renormalised by the step).
MECHANISM_DIST = """
    from dataflex_core import hookimpl
    from dataflex_core.mechanisms import LossMechanism, check_rollout_time
    from dataflex_core.mechanisms.base import scored_weights

    class Doubled(LossMechanism):
        name = "disc_doubled"
        actuator_kind = "reweighter"

        @classmethod
        def check(cls, pipeline, host, loss_unit):
            check_rollout_time(pipeline, host, cls.name)

        def weights(self, step, batch, step_id):
            return 2 * scored_weights(step, batch, step_id)

    @hookimpl
    def dataflex_register_mechanisms(register):
        register(Doubled)
"""

NOT_A_MECHANISM = """
    from dataflex_core import hookimpl

    class Plain:
        name = "disc_plain_mechanism"

    @hookimpl
    def dataflex_register_mechanisms(register):
        register(Plain)
"""

SHIPPED_NAME = """
    from dataflex_core import hookimpl
    from dataflex_core.mechanisms import LossMechanism

    class MyReweight(LossMechanism):
        name = "reweight"
        actuator_kind = "reweighter"

    @hookimpl
    def dataflex_register_mechanisms(register):
        register(MyReweight)
"""

#: A distribution declaring a component kind of its own (its base class) and registering one of it.
NEW_KIND_DIST = """
    import torch
    from dataflex_core import Actuator, hookimpl

    class Grader(Actuator):
        kind = "disc_grader"

    class Halves(Grader):
        name = "disc_halves"

        def act(self, scores, batch, **ctx):
            return scores / 2

    @hookimpl
    def dataflex_register_components(register):
        register(Halves)
"""


def _install_mechanism(site):
    site.add_dist("disc-mech", "0.4.0", {"disc_mech": MECHANISM_DIST}, {"disc_mech": "disc_mech"})


def test_a_mechanism_from_a_distribution_is_resolved_and_builds_like_a_built_in(fake_site, only_plugins):
    _install_mechanism(fake_site)
    only_plugins("disc-mech")
    spec = get_plugin_manager().registry().get("mechanism", "disc_doubled")
    assert (spec.dist, spec.version) == ("disc-mech", "0.4.0")
    assert get_mechanism("disc_doubled") is spec.cls
    assert mechanism_names()[:7] == ("reweight", "select", "mix", "curriculum", "filter", "allocate", "pilot")
    assert "disc_doubled" in mechanism_names()


def test_dataflex_plugins_lists_the_mechanism_of_a_mechanism_only_distribution(fake_site, only_plugins, capsys):
    _install_mechanism(fake_site)
    only_plugins("disc-mech")
    assert cli_main(["plugins", "--json"]) == 0
    rows = {row["distribution"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["disc-mech"]["components"] == {"mechanism": ["disc_doubled"]}
    assert cli_main(["plugins"]) == 0
    assert "mechanism: disc_doubled" in capsys.readouterr().out


def test_the_lock_records_the_mechanism_under_its_distribution(fake_site, only_plugins):
    _install_mechanism(fake_site)
    only_plugins("disc-mech")
    plugin_set = scan_environment(load=["disc-mech"])
    record = plugin_set.plugins["disc-mech"]
    assert record.components == {"mechanism": ("disc_doubled",)}
    assert record.files  # its bytes are hashed, so verify and a lock in force check them
    assert parse_lock(plugin_set.to_toml()).plugins["disc-mech"].components == {"mechanism": ("disc_doubled",)}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (NOT_A_MECHANISM, "does not subclass dataflex_core.mechanisms.base.Mechanism"),
        (SHIPPED_NAME, "dataflex-core ships a mechanism of that name"),
    ],
    ids=["not-a-mechanism", "shipped-name"],
)
def test_a_bad_mechanism_registration_fails_only_that_plugin(fake_site, only_plugins, source, expected):
    _install_mechanism(fake_site)
    fake_site.add_dist("disc-bad", "0.1", {"disc_bad": source}, {"disc_bad": "disc_bad"})
    only_plugins("disc-mech", "disc-bad")
    manager = get_plugin_manager()
    [failure] = manager.all_failures
    assert failure.plugin.dist == "disc-bad" and failure.phase == "register"
    assert "dataflex_register_mechanisms failed" in failure.message and expected in failure.message
    assert get_mechanism("disc_doubled").name == "disc_doubled"  # the good plugin still works
    assert get_mechanism("reweight").__module__ == "dataflex_core.mechanisms.reweight"


def test_an_unknown_mechanism_lists_the_plugin_ones(fake_site, only_plugins):
    _install_mechanism(fake_site)
    only_plugins("disc-mech")
    with pytest.raises(ConfigError, match="disc_doubled"):
        build_from_config({"mechanism": "disc_doubld", "scorer": "x", "actuator": "y"})


def test_a_kind_declared_by_a_plugin_base_class_registers_lists_and_locks(fake_site, only_plugins, capsys):
    fake_site.add_dist("disc-kind", "1.0", {"disc_kind": NEW_KIND_DIST}, {"disc_kind": "disc_kind"})
    only_plugins("disc-kind")
    spec = get_plugin_manager().registry().get("disc_grader", "disc_halves")
    assert spec.dist == "disc-kind" and kind_of(spec.cls) == "disc_grader"
    assert cli_main(["plugins", "--json"]) == 0
    [row] = [r for r in json.loads(capsys.readouterr().out) if r["distribution"] == "disc-kind"]
    assert row["components"] == {"disc_grader": ["disc_halves"]}
    assert scan_environment(load=["disc-kind"]).plugins["disc-kind"].components == {"disc_grader": ("disc_halves",)}


def test_a_class_claiming_a_kind_without_its_base_is_refused_at_definition():
    with pytest.raises(DeclarationError, match="does not subclass dataflex_core.Scorer"):

        class NotAScorer(Component):
            kind = "scorer"

    class Restated(Scorer):
        kind = "scorer"  # re-stating the inherited kind is fine

    assert kind_of(Restated) == "scorer" and BASE_CLASSES["scorer"] is Scorer


def test_a_lock_refuses_a_kind_that_is_not_a_kind_name():
    text = (
        'lock_version = 1\n[core]\nversion = "0.5.0"\n[plugins.x]\nversion = "1"\n'
        '[plugins.x.components]\n"Not A Kind" = ["a"]\n'
    )
    with pytest.raises(LockFileError, match="'Not A Kind'"):
        parse_lock(text)


def test_a_kind_base_defined_again_by_a_re_import_replaces_the_old_one():
    namespace = {"__name__": "disc_rerun"}
    source = "from dataflex_core import Actuator\nclass Grader(Actuator):\n    kind = 'disc_rerun_grader'\n"
    exec(source, namespace)
    first = namespace["Grader"]
    exec(source, namespace)  # a notebook cell run twice, or a reloaded module
    assert BASE_CLASSES["disc_rerun_grader"] is namespace["Grader"] is not first
    with pytest.raises(DeclarationError, match="does not subclass disc_rerun.Grader"):
        exec("from dataflex_core import Actuator\nclass Other(Actuator):\n    kind = 'disc_rerun_grader'\n", {"__name__": "elsewhere"})  # fmt: skip
