"""GPU time per kernel name in one forward, as the device ran it (torch.profiler over CUPTI: every
kernel on the device, launched from Python, from C++ through ATen or cuBLAS, or from Triton).
Both workers use it: the candidate's for the share of its own kernels and of library kernels
(tools/timing/library.py), the reference's for the library kernels the problem itself uses."""
from __future__ import annotations

from typing import Any


def kernel_times(model: Any, inputs: list[Any], device: Any) -> dict[str, float]:
    """{kernel name: microseconds} of one forward of `model` (after one unprofiled warm call)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        model(*inputs)  # compiled and warm before the profiled call
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
        model(*inputs)
        torch.cuda.synchronize(device)
    times: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name] = times.get(event.name, 0.0) + event.device_time_total
    return times


def counted_forward(model: Any, inputs: list[Any], device: Any) -> None:
    """One forward of `model` inside the CUDA profiler's range (after one warm call outside it), for
    Nsight Compute run with `--profile-from-start off` around this worker (tools/counters/): it
    collects counters for the kernels of that forward only, not for the worker's own start, the
    inputs' copies or the candidate's compilation and autotuning."""
    import torch

    with torch.no_grad():
        model(*inputs)
    torch.cuda.synchronize(device)
    torch.cuda.profiler.start()
    try:
        with torch.no_grad():
            model(*inputs)
        torch.cuda.synchronize(device)
    finally:
        torch.cuda.profiler.stop()
