"""Loading and tracing the problem: import the user's (trusted) file in-process, build its model
on the meta device (nothing is allocated whatever the problem's sizes), and trace the forward with
torch.fx make_fx at the aten level, parameters and buffers as explicit inputs."""
from __future__ import annotations

import importlib.util
import itertools
import operator
import sys
from pathlib import Path

from agent.builtin.ir import LEAF_DTYPES, Unrecognized

_LOADED = itertools.count()
SCALARS = (float, int, bool)  # forward inputs that are plain numbers (KernelBench L1 5: `A * s`)


def load(path: Path, entry: str, dtype=None):
    """(module, model, inputs): the problem's module, its `entry` class built on the meta device
    from get_init_inputs(), and get_inputs() (meta tensors); under a half precision (`dtype`) the
    model's floating parameters and buffers and the floating inputs cast to it, as the evaluator's
    workers cast them (tools/worker/precision.py)."""
    import torch

    name = f"_ratchet_builtin_problem_{next(_LOADED)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise Unrecognized(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    cls = getattr(module, entry, None)
    if cls is None or not hasattr(module, "get_inputs"):
        raise Unrecognized(f"{path}: no class {entry} or no get_inputs()")
    from tools.worker.inputs import InputError, call_factory

    try:  # the evaluator's own checks: a Tensor from get_inputs() is not a list of inputs (issue 37)
        with torch.device("meta"):
            init = call_factory(getattr(module, "get_init_inputs", lambda: []), "get_init_inputs", None)
            torch.manual_seed(0)
            model = cls(*init)
            inputs = call_factory(module.get_inputs, "get_inputs", None)
    except InputError as exc:
        raise Unrecognized(f"{path.name}: {exc}") from None
    if dtype is not None:
        from tools.worker.precision import cast_floating

        model = model.to(dtype)
        inputs = [cast_floating(x, dtype) for x in inputs]
    return module, model, inputs


def trace(model, inputs):
    """(graph module, parameter and buffer names in placeholder order, number of inputs)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functional_call

    for index, value in enumerate(inputs):
        if type(value) in SCALARS:  # a number given to forward: traced as a constant (agent.builtin.variants
            continue  # finds where it goes and passes it to the kernel at run time, or refuses other values)
        if not isinstance(value, torch.Tensor):
            raise Unrecognized(f"input {index} is not a tensor or a number ({type(value).__name__})")
        if (str(value.dtype) not in LEAF_DTYPES and value.dtype not in (torch.int64, torch.int32)) \
                or value.dtype == torch.float64:  # integers (class targets): the fallback's torch calls read them
            raise Unrecognized(f"input {index} is {value.dtype}; the built-in kernels handle float32/16, bfloat16, "
                               f"bool and (in torch calls) int64/int32")
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names = list(state)

    def run(params, *args):
        return functional_call(model, params, args)

    with torch.no_grad(), _numbers_on_the_cpu():
        graph = make_fx(run)(state, *inputs)
    return graph, names, len(inputs)


def op_name(target) -> str:
    """The aten op a traced node calls, without its overload ("convolution"); "getitem" for a
    tuple's element; else the target as text."""
    if target is operator.getitem:
        return "getitem"
    packet = getattr(target, "overloadpacket", None)
    return getattr(packet, "__name__", str(target)) if packet is not None else str(target)


def placeholder_sources(traced) -> dict:
    """Each placeholder of a traced forward (what `trace` returns) -> ("param", its name) or
    ("input", its position in forward)."""
    graph, param_names, _ = traced
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    return {n: (("param", param_names[i]) if i < len(param_names) else ("input", i - len(param_names)))
            for i, n in enumerate(placeholders)}


def _numbers_on_the_cpu():
    """A mode in which `torch.tensor(number, device=x.device)` in a forward makes its tensor on the
    CPU: traced with meta inputs it would be a meta constant whose value is lost (KernelBench's
    L2 83 and 93, `torch.min(x, torch.tensor(v, device=x.device))`); a one-number CPU tensor mixes
    with tensors of any device, and the trace keeps its value."""
    import torch
    from torch.overrides import TorchFunctionMode

    class NumbersOnTheCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.tensor and args and isinstance(args[0], (bool, int, float)):
                kwargs["device"] = "cpu"
            return func(*args, **kwargs)

    return NumbersOnTheCpu()

