"""One profiled forward of the user's model, its time attributed to module paths.

Constructor arguments are recorded while the model is built (`capture_constructors`: every module
class's `__init__` wrapped meanwhile sees the arguments the class was called with).
Forward pre-hooks open a `record_function` range named after the module's path and keep the
first call's arguments; forward hooks close it. The time of an aten op whose innermost enclosing
range is module M (its direct op) is M's own time (the median over PROFILED forwards): CPU time on the CPU, device time on a GPU
(the kernels the op launched), so a module's time counts ops only, never the hooks' overhead.
"""
from __future__ import annotations

import contextlib
import functools
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

LABEL = "ratchet::"
PASS = "ratchet-pass::"
PROFILED = 5  # forwards profiled; a module's time is its median over them (one alone is noisy on a CPU)


@dataclass
class Constructed:
    """How a module was built: its class called with these arguments."""

    cls: type
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class ModuleTime:
    """One module of the model after the profiled forward."""

    path: str  # "" for the model itself
    module: Any
    children: list[str]
    calls: int = 0
    own_us: float = 0.0  # time of its direct ops
    total_us: float = 0.0  # own + its children's
    args: tuple[Any, ...] | None = None  # the first call's arguments (tensors cloned)
    kwargs: dict[str, Any] = field(default_factory=dict)
    output: Any = None  # the first call's output (cloned)
    constructed: Constructed | None = None


@contextlib.contextmanager
def capture_constructors() -> Iterator[dict[int, Constructed]]:
    """id(module) -> Constructed, for every torch module built inside the block: each module
    class's own `__init__` is wrapped meanwhile, and the outermost call of an instance records it."""
    import torch

    records: dict[int, Constructed] = {}
    keep: list[Any] = []  # the instances, so that an id is never reused while recording

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            if id(self) not in records:
                keep.append(self)
                records[id(self)] = Constructed(type(self), args, dict(kwargs))
            original(self, *args, **kwargs)
        return __init__

    saved: list[tuple[type, Any]] = []
    pending: list[type] = [torch.nn.Module]
    seen: set[type] = set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        pending.extend(cls.__subclasses__())
        if "__init__" in cls.__dict__:
            saved.append((cls, cls.__dict__["__init__"]))
    try:
        for klass, original in saved:
            setattr(klass, "__init__", wrap(original))
        yield records
    finally:
        for klass, original in saved:
            setattr(klass, "__init__", original)


def _clone(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def profile_model(model: Any, inputs: list[Any], device: str,
                  constructed: dict[int, Constructed]) -> dict[str, ModuleTime]:
    """path -> ModuleTime after one warm-up and PROFILED profiled forwards (median own times) (eval mode, no grad)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    times: dict[str, ModuleTime] = {}
    for path, module in model.named_modules():
        times[path] = ModuleTime(path, module, [f"{path}.{n}" if path else n for n, _ in module.named_children()],
                                 constructed=constructed.get(id(module)))
    paths = {id(t.module): p for p, t in times.items()}
    times = {p: times[p] for p in paths.values()}  # a module reachable at two paths: its first
    for t in times.values():
        t.children = [c for c in t.children if c in times]
    stack: list[Any] = []
    recording = {"args": True}

    def pre(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        t = times[paths[id(module)]]
        if recording["args"] and t.args is None:
            t.args, t.kwargs = _clone(args), _clone(kwargs)
        rf = record_function(LABEL + t.path)
        rf.__enter__()
        stack.append(rf)

    def post(module: Any, args: tuple[Any, ...], output: Any) -> None:
        t = times[paths[id(module)]]
        if recording["args"]:
            t.calls += 1
            if t.output is None:
                t.output = _clone(output)
        stack.pop().__exit__(None, None, None)

    handles = []
    for t in times.values():
        handles.append(t.module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(t.module.register_forward_hook(post))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    model.eval()
    try:
        with torch.no_grad():
            model(*inputs)  # the warm-up records arguments and call counts
            recording["args"] = False
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            with profile(activities=activities) as prof:
                for i in range(PROFILED):
                    with record_function(f"{PASS}{i}"):
                        model(*inputs)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
    finally:
        for h in handles:
            h.remove()
    on_gpu = device.startswith("cuda")
    per_pass: dict[str, list[float]] = {p: [0.0] * PROFILED for p in times}
    for evt in prof.events():
        if evt.device_type != DeviceType.CPU or evt.name.startswith((LABEL, PASS)):
            continue
        parent = evt.cpu_parent
        if parent is None or not parent.name.startswith(LABEL):
            continue  # outside the model, or inside another op (counted in that op's time)
        path, top = parent.name[len(LABEL):], parent
        while top is not None and not top.name.startswith(PASS):
            top = top.cpu_parent
        if path in times and top is not None:
            per_pass[path][int(top.name[len(PASS):])] += evt.device_time_total if on_gpu else evt.cpu_time_total
    for path, values in per_pass.items():
        times[path].own_us = statistics.median(values)

    def total(path: str) -> float:
        t = times[path]
        t.total_us = t.own_us + sum(total(c) for c in t.children)
        return t.total_us

    total("")
    return times
