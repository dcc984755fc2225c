"""Exception types, so hosts and tests can tell configuration mistakes apart."""


class DataFlexError(Exception):
    """Base of every error DataFlex raises on purpose."""


class DeclarationError(DataFlexError, TypeError):
    """A component class declares an invalid ``timing``, ``granularity`` or ``requires``."""


class ConfigError(DataFlexError, ValueError):
    """The ``dataflex:`` configuration block cannot be built."""


class UnknownComponentError(ConfigError):
    """A configured component name is not registered by any loaded plugin."""


class UnknownParamError(ConfigError):
    """A component was given a parameter it does not accept, or not given one it needs."""


class ParamTypeError(ConfigError):
    """A component parameter has the wrong type (e.g. a string where a number is expected)."""


class IncompatibleComponentError(ConfigError):
    """Components that cannot run together, or with this host's configuration."""


class DuplicateComponentError(ConfigError):
    """A configured name is registered by two plugins, so it cannot be resolved."""


class PluginLoadError(DataFlexError):
    """A plugin failed to load while strict loading was asked for."""


class InvalidOutputError(DataFlexError, ValueError):
    """A component returned scores or weights that break its contract."""


class ComponentError(InvalidOutputError):
    """A component raised, or changed its inputs, during a step; named with its distribution and the step.

    It is invalid output, so ``dataflex.on_invalid: uniform`` replaces it; the plugin's exception is the cause.
    """

    def __init__(self, message: str, component: str = "") -> None:
        super().__init__(message)
        #: The component as messages name it: ``scorer <name> (<dist>==<version>)``.
        self.component = component


class UncheckedModuleError(PluginLoadError, ModuleNotFoundError):
    """Under a lock, an import of a module inside a locked package that the lock does not list.

    A ``ModuleNotFoundError``, so a plugin's optional import (``try: import pkg.fast``) still falls back; in a
    component call it is that call's error, as any other.
    """
