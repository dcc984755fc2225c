"""A CPU harness for verl 0.9's own GRPO fit loop: the demo's and the end-to-end tests' training runs.

Never on the production path: it ships with ``dataflex-lab``, not with the host, and
nothing here is imported by the trainers. A run
asks for it by naming :mod:`dataflex_lab.verl.cpu_loop.plugin` in
``VERL_USE_EXTERNAL_MODULES`` (the runner does), which makes verl import it in
the driver and in every Ray process, where it registers a CPU platform, a
CPU rollout backend and a deterministic agent loop with verl's registries.
"""
