"""The reference evaluated in float64 (the reference worker only: trusted code, the problem's own
Model): a float64 copy of the model, built once per model, run on the trial's inputs cast to
float64. The parent judges a float32 candidate's error against it (tools/judge/exact.py).

Float32, bfloat16 and float16 tensors are widened to float64, complex64 to complex128 (a
half-precision run, tools/worker/precision.py, is judged against float64 as float32 is); integer
and bool tensors are left as they are. The copy holds the same parameter values as the model,
widened exactly. When the float64 evaluation cannot
be made (out of memory, an op without a float64 kernel), the trial says why and the parent keeps to
the float32 tolerance for that trial, recorded in `errors.float64`.
"""
from __future__ import annotations

import copy
from typing import Any

WIDE = {"torch.float32": "float64", "torch.bfloat16": "float64", "torch.float16": "float64",
        "torch.complex64": "complex128"}


def widen(tree: Any) -> Any:
    """`tree` with its float32/complex64 tensors as float64/complex128 (exact)."""
    import torch

    if isinstance(tree, torch.Tensor):
        wide = WIDE.get(str(tree.dtype))
        return tree.to(getattr(torch, wide)) if wide else tree
    if isinstance(tree, (list, tuple)):
        return type(tree)(widen(x) for x in tree)
    if isinstance(tree, dict):
        return {k: widen(v) for k, v in tree.items()}
    return tree


def wide_model(model: Any) -> Any:
    """A copy of `model` whose float32 parameters and buffers are float64 (complex64: complex128)."""
    import torch

    twin = copy.deepcopy(model)
    for module in twin.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            wide = WIDE.get(str(p.dtype))
            if wide:
                setattr(module, name, torch.nn.Parameter(p.detach().to(getattr(torch, wide)), requires_grad=p.requires_grad))
        for name, b in list(module.named_buffers(recurse=False)):
            wide = WIDE.get(str(b.dtype))
            if wide:
                module._buffers[name] = b.to(getattr(torch, wide))
    return twin


OUT_OF_MEMORY = "the float64 evaluation does not fit in the device's memory"


def skipped(why: str | None) -> dict[str, Any]:
    """A reply's fields for a float64 evaluation not made: why, and whether the device's memory
    (or, evaluated on the host, the host's) ran out (the parent tells a problem too large from a
    candidate's pressure: tools/processes/reference.py)."""
    if not why:
        return {}
    oom = why == OUT_OF_MEMORY or why.startswith(HOST_OUT_OF_MEMORY)
    return {"float64_skipped": why, **({"float64_oom": True} if oom else {})}


def forward64(twins: dict[int, Any], model: Any, inputs: list[Any], device: Any) -> tuple[Any, str | None]:
    """(outputs in float64, None), or (None, why) when the float64 evaluation cannot be made here.
    `twins` keeps each model's float64 copy (by id) for the worker's later trials."""
    import torch

    try:
        if id(model) not in twins:
            twins[id(model)] = wide_model(model)
        twin = twins[id(model)]
        with torch.no_grad():
            out = twin(*widen(inputs))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return out, None
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None, OUT_OF_MEMORY
    except (RuntimeError, TypeError, NotImplementedError) as exc:  # an op with no float64 kernel
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"the reference does not run in float64 ({type(exc).__name__}: {first[:160]})"


def batch_rows(inputs: list[Any], rows: Any, batch: int, cut: Any = None) -> tuple[list[Any] | None, str | None]:
    """(`inputs` with every tensor whose leading size is `batch` cut to `rows` of it (with `cut`,
    the inputs it names only: an index cuts that input along its first dimension, an [index, dim]
    pair along `dim`), None), or (None, why not): no such input, or `rows` are not row numbers
    below `batch`. Whether the problem's rows are independent is judged by the parent
    (tools/judge/exact_rows.py), from the float32 forward on the same rows."""
    import torch

    if not isinstance(rows, list) or not rows or not all(isinstance(r, int) and 0 <= r < batch for r in rows):
        return None, f"the rows asked for are not row numbers below {batch}"
    dims: dict[int, int] = {}
    if cut is None:
        dims = {i: 0 for i in range(len(inputs))}
    else:
        for item in cut if isinstance(cut, list) else []:
            if isinstance(item, int) and not isinstance(item, bool):
                dims[item] = 0
            elif (isinstance(item, list) and len(item) == 2
                  and all(isinstance(v, int) and not isinstance(v, bool) for v in item)):
                dims[item[0]] = item[1]
    chosen = {i: d for i, d in dims.items() if 0 <= i < len(inputs) and isinstance(inputs[i], torch.Tensor)
              and 0 <= d < inputs[i].dim() and inputs[i].shape[d] == batch}
    if not chosen:
        return None, f"no input has a size of {batch} (the outputs' batch) where the cut asks"
    out = []
    for i, t in enumerate(inputs):
        if i in chosen:
            t = t.index_select(chosen[i], torch.tensor(rows, dtype=torch.long, device=t.device))
        out.append(t)
    return out, None


def host_model(model: Any) -> Any:
    """A float64 copy of `model` in host memory, made without a second copy on the device: each
    parameter and buffer is copied to the host first and stands in for itself in the deep copy."""
    import torch

    memo: dict[int, Any] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            host = p.detach().to("cpu")
            wide = WIDE.get(str(host.dtype))
            memo[id(p)] = torch.nn.Parameter(host.to(getattr(torch, wide)) if wide else host.clone(),
                                             requires_grad=p.requires_grad)
        for b in module.buffers(recurse=False):
            host = b.to("cpu")
            wide = WIDE.get(str(host.dtype))
            memo[id(b)] = host.to(getattr(torch, wide)) if wide else host.clone()
    return copy.deepcopy(model, memo)


def to_host(tree: Any) -> Any:
    """`tree` with its tensors moved to host memory (then widened by the caller)."""
    import torch

    if isinstance(tree, torch.Tensor):
        return tree.to("cpu")
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_host(x) for x in tree)
    if isinstance(tree, dict):
        return {k: to_host(v) for k, v in tree.items()}
    return tree


HOST_OUT_OF_MEMORY = "the float64 evaluation on the host does not fit in host memory"


def host_sample(twins: dict[int, Any], model: Any, inputs: list[Any], seed: int, count: int,
                device: Any) -> tuple[Any, str | None]:
    """(the reference's outputs evaluated in float64 on the host, each tensor cut to the `count`
    positions tools/wire/positions.py draws from `seed`, on `device`; None), or (None, why). For a
    problem whose float64 evaluation does not fit on the device and whose rows cannot be cut
    (tools/judge/exact_host.py). `twins` keeps each model's host copy (by id)."""
    import torch

    from tools.wire.positions import positions

    try:
        if id(model) not in twins:
            twins[id(model)] = host_model(model)
        host_inputs = widen(to_host(inputs))
        del inputs
        with torch.no_grad():
            out = twins[id(model)](*host_inputs)
        del host_inputs
        leaves = iter(range(1 << 30))

        def cut(tree: Any) -> Any:
            """Each tensor leaf (in tools/judge/exact.py tree_tensors's order) cut to its positions; a
            dict or other container is not an output the parent judges (None)."""
            if isinstance(tree, torch.Tensor):  # torch.take: logical row-major positions, no copy
                return torch.take(tree, positions(tree.numel(), count, seed, next(leaves))).to(device)
            if isinstance(tree, (list, tuple)):
                return [cut(x) for x in tree]
            return None if isinstance(tree, dict) else tree

        return cut(out), None
    except MemoryError:
        return None, HOST_OUT_OF_MEMORY
    except Exception as exc:  # noqa: BLE001 - said in the reply: an op with no float64 or host kernel, a
        # forward written for the device only (an assert, a ValueError): the problem is then judged without it
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "memory" in first.lower():
            return None, f"{HOST_OUT_OF_MEMORY} ({first[:160]})"
        return None, f"the reference does not run in float64 on the host ({type(exc).__name__}: {first[:160]})"
