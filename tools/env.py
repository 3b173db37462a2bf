"""The environment a result was measured in: GPU, driver, CUDA, torch, triton, Python."""
from __future__ import annotations

import functools
import platform
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


def resolve_device(device: str | None) -> str:
    """'cuda:N' or 'cpu'; None picks cuda:0 when a GPU is there."""
    import torch

    if device is None:
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        device = "cuda:0"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA GPU is available on this machine")
        index = torch.device(device).index or 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s)")
        return device
    if device != "cpu":
        raise ValueError(f"--device {device}: expected cpu, cuda or cuda:N")
    return device
