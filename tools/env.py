"""The environment a result was measured in: GPU, driver, CUDA, torch, triton, Python."""
from __future__ import annotations

import functools
import platform
import re
import shutil
import subprocess
from typing import Any


@functools.lru_cache(maxsize=None)
def environment(device: str) -> dict[str, Any]:
    import torch
    import triton

    env: dict[str, Any] = {
        "device": device,
        "gpu": None,
        "driver": None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
    }
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        env["gpu"] = torch.cuda.get_device_name(index)
        props = torch.cuda.get_device_properties(index)
        env["sm_count"] = props.multi_processor_count
        env["capability"] = f"{props.major}.{props.minor}"
        env["memory_bytes"] = props.total_memory
        env["l2_bytes"] = getattr(props, "L2_cache_size", None)
        env["driver"] = _driver_version()
    else:
        env["gpu"] = "none (CPU, Triton interpreter)"
    return env


def _driver_version() -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


CPU_TARGET = "the CPU (Triton interpreter; timing is not measured)"


def target_name(device: str, override: str | None = None) -> str:
    """The target the prompts name: the GPU as the driver names it, or the CPU."""
    if override:
        return override
    if device.startswith("cuda"):
        return environment(device)["gpu"] or "an NVIDIA GPU"
    return CPU_TARGET


class DeviceError(ValueError):
    """A device that is malformed or not on this machine; str() is one line naming where the value came from."""


DEVICE_FORMS = "cpu, cuda or cuda:N"


def resolve_device(device: str | None, *, given_as: str | None = None) -> str:
    """'cuda:N' or 'cpu'; None picks cuda:0 when a GPU is there. Raises DeviceError for anything
    else, or a GPU this machine does not have; `given_as` names the value in that error as the
    user gave it (`--device cuda:7`, `RATCHET_DEVICE=tpu`; default `--device VALUE`). The form is
    checked before torch is imported, so a malformed value is refused at once."""
    shown = given_as or f"--device {device}"
    form = None if device is None else re.fullmatch(r"cpu|cuda(?::(\d+))?", device)
    if device is not None and form is None:
        raise DeviceError(f"{shown}: expected {DEVICE_FORMS}")
    import torch

    if device is None:
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if not torch.cuda.is_available():
        raise DeviceError(f"{shown}: no CUDA GPU is available on this machine")
    assert form is not None  # device is not None here, and its form matched
    index, count = int(form.group(1) or 0), torch.cuda.device_count()
    if index >= count:
        raise DeviceError(f"{shown}: this machine has {count} GPU(s) (cuda:0 to cuda:{count - 1})")
    return f"cuda:{index}"
