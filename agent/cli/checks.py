"""The checks every command makes of what a user names, before anything heavy is imported.

One rule per kind of mistake, so every command answers it the same way: a file that is missing,
not a file, or unreadable is a usage error (EXIT_USAGE) whatever role it plays (a reference, a
candidate, a problem module); a device that is malformed or not on this machine is a usage error
naming the flag, variable or config key it came from. A file that exists but is not a valid
problem is another matter: EXIT_BAD_PROBLEM, decided by the evaluator.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path


class UsageError(Exception):
    """A mistake on the command line or in a named file; printed as one line, exit EXIT_USAGE.
    Every command raises it; agent.cli prints it (here so that the commands need not import the
    CLI that loads them)."""


def readable_file(path: str | os.PathLike, role: str) -> Path:
    """`path` if it is a file this process can read; else UsageError naming it and the `role` it plays."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: cannot read {role}: no such file")
    if not path.is_file():
        raise UsageError(f"{path}: cannot read {role}: not a file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {role}: {exc.strerror or exc}") from None
    return path


def check_device(device: str | None, given_as: str | None = None) -> str | None:
    """The one device check of the command line: `device` resolved ("cuda" is "cuda:0"; None stays
    None: the default, chosen when the evaluator starts), or UsageError with one line naming where
    it came from (`given_as`, e.g. `--device cuda:7` or `RATCHET_DEVICE=tpu`) and why it is no good
    here. What it returns is what the evaluator gets: nothing behind it resolves the device again
    but the evaluator's own entry, which validates it for callers that are not the command line."""
    if device is None:
        return None
    from tools.env import DeviceError, resolve_device  # torch, once the form is right (see resolve_device)

    try:
        return resolve_device(device, given_as=given_as)
    except DeviceError as exc:
        raise UsageError(str(exc)) from None


def device_origin(device: str, source: str) -> str:
    """How a device setting was given, from its source in agent.config (`command line`,
    `environment`, `config file PATH`), as the user would write it."""
    if source == "environment":
        return f"RATCHET_DEVICE={device}"
    if source.startswith("config file"):
        return f"{source}: device = {device!r}"
    return f"--device {device}"


def ray_installed() -> None:
    """`--ray` (optimize's judges, batch's slots) needs Ray: where it is missing, a UsageError with
    the line that installs it. Only whether it is there: nothing of Ray is started."""
    try:
        importlib.import_module("ray")
    except ImportError:
        from agent.batch.ray_slots import INSTALL_LINE

        raise UsageError(INSTALL_LINE) from None
