"""The runner: mount the ``dataflex:`` block against a host, check it, and run its mechanism once per step."""

from .run import HOST_KEYS, ON_INVALID, DataFlexStep, InvalidOutputPolicy, MountedStep, host_settings, mount_step

__all__ = ["HOST_KEYS", "ON_INVALID", "DataFlexStep", "InvalidOutputPolicy", "MountedStep", "host_settings", "mount_step"]
