"""The DataFlex lab: everything that is not production, in a distribution of its own.

- :mod:`.compare`: does an arm beat the baseline over seeds (``dataflex compare``);
- :mod:`.toy_task`, :mod:`.toy_model`, :mod:`.demo_report`: the toy task, its tiny model and what the
  hosts' CPU training demos print and write;
- :mod:`dataflex_lab.verl`: verl's CPU harness (``cpu_loop``), the sandbox that drives verl's real
  ``_compute_advantage`` on synthetic rollouts, and ``dataflex-verl demo`` / ``demo-step``;
- :mod:`dataflex_lab.trl`: the toy task in TRL's terms and ``dataflex-trl demo``;
- :mod:`.testing`: the testing kit every package's tests share (batches as the frameworks build them,
  plugin sites for lock tests, toy components, pytest fixtures).

Its commands join ``dataflex``, ``dataflex-verl`` and ``dataflex-trl`` through the entry-point group
``dataflex.cli``; the production wheels of dataflex-core and the hosts contain none of it.
"""

from .version import __version__

__all__ = ["__version__"]
