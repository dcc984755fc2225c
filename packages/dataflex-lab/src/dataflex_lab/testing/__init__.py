"""The testing kit every DataFlex package's tests share.

- :mod:`.batches`: batches as the hosts build them (:func:`rows_batch` by hand, :func:`grpo_batch` at random:
  verl's GRPO advantages, empty responses, singleton groups, verl's padding rows);
- :mod:`.components`: toy components registered under a suite's prefix (:func:`register_toy_components`), and
  :class:`DomainPreferenceScorer`, a stateful ``pre_rollout`` scorer by domain for curriculum tests;
- :mod:`.staged`: a simulated host of the staged-generation seam (:func:`run_staged_step`: one step of
  ``mechanism: pilot`` with rewards given per prompt and rollout);
- :mod:`.plugin_sites`: plugin wheels really installed by pip, or installed-looking directories, for lock and
  discovery tests; :mod:`.hostile`: what a hostile plugin or checkpoint does, for the tests that it never runs;
- :mod:`.pytest_plugin`: the fixtures (``batch_factory``, ``fake_site``, ``only_plugins``, ``pip_site``,
  ``marker``, ``queue``), loaded by pytest wherever ``dataflex-lab`` is installed.

A plugin's tests may use it as a test requirement (``pip install dataflex-lab``); a plugin never imports it.
"""

from .batches import PromptDataset, grpo_advantages, grpo_batch, grpo_layout, response_mask, rows_batch
from .components import DomainPreferenceScorer, mean_abs_advantage, register_toy_components
from .staged import run_staged_step, stage_rows

__all__ = [
    "PromptDataset",
    "DomainPreferenceScorer",
    "grpo_advantages",
    "grpo_batch",
    "grpo_layout",
    "mean_abs_advantage",
    "register_toy_components",
    "response_mask",
    "rows_batch",
    "run_staged_step",
    "stage_rows",
]
