"""DataFlex core: data-centric control (reweight, select, mix, curriculum, filter, allocate) for RL training of LLMs.

Framework-agnostic: it depends on torch and pluggy only (with numpy, and the TOML and version parsers its lock files
need), never on a training framework or a model library; the demos, ``dataflex compare`` and the testing kit are in
``dataflex-lab``. Hosts such as ``dataflex-verl`` build a pipeline with :func:`build_from_config` and call
``scorer.score`` then ``actuator.act`` on a DataProto-shaped :class:`Batch`; hosts drive :mod:`dataflex_core.session`.
"""

from .allocation import even_split, greedy_allocation
from .batch import Batch
from .components import (
    GRANULARITIES,
    KINDS,
    SAMPLE_GRANULARITIES,
    TIMINGS,
    Actuator,
    Allocator,
    Component,
    Mixer,
    Reweighter,
    Sampler,
    Scorer,
    Selector,
    accepted_params,
)
from .config import DataFlexPipeline
from .decorators import (
    register_allocator,
    register_mixer,
    register_reweighter,
    register_sampler,
    register_scorer,
    register_selector,
)
from .discovery import (
    ENTRY_POINT_GROUP,
    ENV_ALLOW_PLUGINS,
    ENV_BLOCK_PLUGINS,
    ENV_DISABLE_AUTOLOAD,
    ENV_PLUGINS_LOCK,
    ENV_STRICT,
    DataFlexPluginManager,
    PluginLoadWarning,
)
from .errors import (
    ComponentError,
    ConfigError,
    DataFlexError,
    DeclarationError,
    DuplicateComponentError,
    IncompatibleComponentError,
    InvalidOutputError,
    ParamTypeError,
    PluginLoadError,
    UncheckedModuleError,
    UnknownComponentError,
    UnknownParamError,
)
from .groups import (
    group_index,
    masked_seq_max,
    masked_seq_mean,
    masked_seq_sum,
    segment_count,
    segment_max,
    segment_mean,
    segment_min,
    segment_sum,
    segment_var,
)
from .hookspecs import hookimpl
from .inputs import actuator_scores, negative_mask, nonfinite_mask
from .lock.enforce import get_plugin_manager, get_registry, reset_plugin_manager, use_plugin_lock
from .normalize import (
    mean_one,
    normalize_mean_one,
    response_token_mask,
    valid_mask_for,
    valid_sample_mask,
    valid_token_counts,
    valid_token_mask,
)
from .precomputed import STEP_INPUTS_KEY, StepInputs, count_set, prepare_batch
from .registry import ComponentSpec, PluginInfo, Registry
from .runner.build import build_from_config
from .version import __version__

__all__ = [
    "Actuator",
    "Allocator",
    "Batch",
    "Component",
    "ComponentError",
    "ComponentSpec",
    "ConfigError",
    "DataFlexError",
    "DataFlexPipeline",
    "DataFlexPluginManager",
    "DeclarationError",
    "DuplicateComponentError",
    "ENTRY_POINT_GROUP",
    "ENV_ALLOW_PLUGINS",
    "ENV_BLOCK_PLUGINS",
    "ENV_DISABLE_AUTOLOAD",
    "ENV_PLUGINS_LOCK",
    "ENV_STRICT",
    "GRANULARITIES",
    "IncompatibleComponentError",
    "InvalidOutputError",
    "KINDS",
    "Mixer",
    "ParamTypeError",
    "PluginInfo",
    "PluginLoadError",
    "PluginLoadWarning",
    "Registry",
    "Reweighter",
    "SAMPLE_GRANULARITIES",
    "STEP_INPUTS_KEY",
    "Sampler",
    "Scorer",
    "Selector",
    "StepInputs",
    "TIMINGS",
    "UncheckedModuleError",
    "UnknownComponentError",
    "UnknownParamError",
    "__version__",
    "accepted_params",
    "actuator_scores",
    "build_from_config",
    "count_set",
    "even_split",
    "get_plugin_manager",
    "get_registry",
    "greedy_allocation",
    "group_index",
    "hookimpl",
    "masked_seq_max",
    "masked_seq_mean",
    "masked_seq_sum",
    "mean_one",
    "negative_mask",
    "nonfinite_mask",
    "normalize_mean_one",
    "prepare_batch",
    "register_allocator",
    "register_mixer",
    "register_reweighter",
    "register_sampler",
    "register_scorer",
    "register_selector",
    "reset_plugin_manager",
    "response_token_mask",
    "segment_count",
    "segment_max",
    "segment_mean",
    "segment_min",
    "segment_sum",
    "segment_var",
    "use_plugin_lock",
    "valid_mask_for",
    "valid_sample_mask",
    "valid_token_counts",
    "valid_token_mask",
]
