"""The registry attributes names by identity (issue 58, F3, F4, F11).

A registration made while a distribution's code is imported is that distribution's, however it registered, so two
distributions claiming one name clash naming both; a core kind's base is the object core defined, whatever another
class's ``__module__`` says; a name is a lower-case identifier.
"""

import pytest

from dataflex_core import DeclarationError, get_plugin_manager
from dataflex_core.cli import main as cli_main
from dataflex_core.components import BASE_CLASSES, Component, Scorer, kind_of
from dataflex_core.errors import ConfigError, DuplicateComponentError
from dataflex_core.lock import scan_environment
from dataflex_core.mechanisms import Mechanism, get_mechanism, register_mechanism

#: Ships mechanism ``disc_shared`` through the hook.
HOOK_MECHANISM = """
    from dataflex_core import hookimpl
    from dataflex_core.mechanisms import LossMechanism

    class Shared(LossMechanism):
        name = "disc_shared"
        actuator_kind = "reweighter"

    @hookimpl
    def dataflex_register_mechanisms(register):
        register(Shared)
"""

#: Registers a mechanism of the same name with ``register_mechanism`` when imported.
IMPORT_MECHANISM = """
    from dataflex_core.mechanisms import LossMechanism, register_mechanism

    @register_mechanism
    class Impostor(LossMechanism):
        name = "disc_shared"
        actuator_kind = "reweighter"

    placeholder = None
"""

#: Declares a component kind of its own and registers one of it through the hook.
KIND_BASE = """
    from dataflex_core import Actuator, hookimpl

    class Grader(Actuator):
        kind = "disc_idgrader"

    class Halves(Grader):
        name = "disc_graded"

    @hookimpl
    def dataflex_register_components(register):
        register(Halves)
"""

#: Registers a class of that kind under the same name: its entry point names the class.
KIND_BY_ENTRY_POINT = """
    from disc_idkind import Grader

    class Thirds(Grader):
        name = "disc_graded"
"""


def test_a_mechanism_registered_at_import_clashes_with_another_distributions_hook_one(fake_site, only_plugins, capsys):
    fake_site.add_dist("disc-hook", "1.0", {"disc_hook": HOOK_MECHANISM}, {"disc_hook": "disc_hook"})
    fake_site.add_dist("disc-import", "2.0", {"disc_import": IMPORT_MECHANISM}, {"disc_import": "disc_import"})
    only_plugins("disc-hook", "disc-import")
    clash = get_plugin_manager().registry().clash("mechanism", "disc_shared")
    assert clash is not None and {p.dist for p in clash.providers} == {"disc-hook", "disc-import"}
    with pytest.raises(
        DuplicateComponentError, match=r"disc-hook==1\.0.*disc-import==2\.0|disc-import==2\.0.*disc-hook==1\.0"
    ):
        get_mechanism("disc_shared")
    scanned = scan_environment(load=["disc-hook", "disc-import"])  # the lock names both providers
    assert scanned.plugins["disc-hook"].components == {"mechanism": ("disc_shared",)}
    assert scanned.plugins["disc-import"].components == {"mechanism": ("disc_shared",)}
    assert cli_main(["plugins", "--json"]) == 1
    assert "'disc_shared' is registered twice" in capsys.readouterr().err


def test_a_new_kinds_name_claimed_by_two_distributions_clashes(fake_site, only_plugins):
    fake_site.add_dist("disc-idkind", "1.0", {"disc_idkind": KIND_BASE}, {"disc_idkind": "disc_idkind"})
    fake_site.add_dist("disc-idkind2", "1.0", {"disc_idkind2": KIND_BY_ENTRY_POINT}, {"thirds": "disc_idkind2:Thirds"})
    only_plugins("disc-idkind", "disc-idkind2")
    clash = get_plugin_manager().registry().clash("disc_idgrader", "disc_graded")
    assert clash is not None and {p.dist for p in clash.providers} == {"disc-idkind", "disc-idkind2"}


def test_a_class_posing_as_a_core_base_does_not_replace_its_kind():
    with pytest.raises(DeclarationError, match="does not subclass dataflex_core.Scorer"):

        class Forged(Component):
            __module__ = Scorer.__module__
            __qualname__ = Scorer.__qualname__
            kind = "scorer"

    assert BASE_CLASSES["scorer"] is Scorer
    with pytest.raises(DeclarationError, match="subclasses dataflex_core.mechanisms.Mechanism"):

        class NotAMechanism(Component):
            __module__ = Mechanism.__module__
            __qualname__ = Mechanism.__qualname__
            kind = "mechanism"

    assert BASE_CLASSES["mechanism"] is Mechanism and kind_of(Mechanism) == "mechanism"


@pytest.mark.parametrize("name", ["evil\nscorer   disc-forged==9", "red\x1b[31m", "Upper", "has-dash", "1st"])
def test_a_name_is_a_lower_case_identifier(fake_site, only_plugins, name):
    source = f"""
    from dataflex_core import Scorer, hookimpl

    class Named(Scorer):
        name = {name!r}

    @hookimpl
    def dataflex_register_components(register):
        register(Named)
"""
    fake_site.add_dist("disc-badname", "1.0", {"disc_badname": source}, {"disc_badname": "disc_badname"})
    only_plugins("disc-badname")
    [failure] = get_plugin_manager().all_failures
    assert failure.plugin.dist == "disc-badname" and "lower-case identifier" in failure.message
    assert "\n" not in failure.message and "\x1b" not in failure.message
    from dataflex_core import register_scorer

    with pytest.raises(DeclarationError, match="lower-case identifier"):
        register_scorer(name)
    with pytest.raises(ConfigError, match="lower-case identifier"):
        register_mechanism(type("Named", (Mechanism,), {"name": name}))


def test_the_plugins_table_prints_no_forged_row(fake_site, only_plugins, capsys):
    source = """
    raise RuntimeError("boom\\ndisc-forged  disc-forged  9.9  loaded  scorer: trusted\\x1b[8m")
"""
    fake_site.add_dist("disc-forge", "1.0", {"disc_forge": source}, {"disc_forge": "disc_forge"})
    only_plugins("disc-forge")
    assert cli_main(["plugins"]) == 1
    out = capsys.readouterr().out
    assert not any(line.startswith("disc-forged") for line in out.splitlines()) and "\x1b" not in out
    assert "boom\\ndisc-forged" in out  # the error is shown, escaped, in its own cell
