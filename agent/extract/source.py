"""One module of the user's model as a self-contained problem file (the KernelBench contract).

The file rebuilds the module from its class and its constructor arguments (recorded as the model
was built: agent/extract/profile.py), never from pickled weights: a kernel is judged on the
module's function, and the evaluator initializes reference and candidate alike. A torch.nn class
is named (`nn.Linear`); a class of the user's is copied in, with the classes, functions, modules
and constants its source names, so the file imports nothing but torch and the standard library.
`Model` (an nn.Module, as the KernelBench contract and the built-in policy expect) holds the module
as `self.module`, built with the keyword arguments seen, passes the non-tensor arguments seen to
it, and calls `self.eval()` (extraction is of inference). Every file is checked before it is written (`check`): built from
its own `get_init_inputs()`, the module's state dict loaded into it, run on the real inputs, it
must give the module's outputs, else the module is skipped with the reason.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import math
import textwrap
import types
from typing import Any

from agent.extract.profile import ModuleTime

ATTRIBUTE = "module"  # Model holds the module as self.module: its state dict keys are the module's, prefixed
STDLIB = ("math", "typing", "functools", "itertools", "operator", "collections", "dataclasses", "numbers", "enum")


class NotExtractable(Exception):
    """Why one module cannot be written as a problem file (recorded in the manifest)."""


def literal(value: Any) -> str:
    """Python source for a constructor or call argument, or NotExtractable."""
    import torch

    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, (tuple, list)):
        inner = ", ".join(literal(v) for v in value)
        return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else (f"({inner})" if isinstance(value, tuple) else f"[{inner}]")
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return "{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in value.items()) + "}"
    raise NotExtractable(f"an argument of type {type(value).__name__} cannot be written as a literal")


def tensor_expr(t: Any, batch: str | None) -> str:
    dims = [str(d) for d in t.shape]
    if batch is not None:
        dims[0] = batch
    shape = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    if t.dtype.is_floating_point:
        return f"torch.randn({shape}, dtype={t.dtype})"
    if t.dtype == t.new_zeros(()).bool().dtype:
        return f"(torch.rand({shape}) < 0.5)"
    high = int(t.max().item()) + 1 if t.numel() else 1
    low = min(int(t.min().item()), 0) if t.numel() else 0
    return f"torch.randint({low}, {max(high, low + 1)}, {shape}, dtype={t.dtype})"


class Inliner:
    """The source a user class needs, its dependencies first."""

    def __init__(self) -> None:
        self.imports: list[str] = ["import torch", "import torch.nn as nn", "import torch.nn.functional as F"]
        self.blocks: list[str] = []
        self.done: set[int] = set()
        self.constants: set[str] = set()

    def add(self, obj: Any) -> None:
        if id(obj) in self.done:
            return
        self.done.add(id(obj))
        try:
            src = textwrap.dedent(inspect.getsource(obj))
        except (OSError, TypeError) as exc:
            raise NotExtractable(f"no source for {obj.__qualname__}: {exc}") from None
        if "." in obj.__qualname__:
            raise NotExtractable(f"{obj.__qualname__} is not defined at its module's top level")
        glob = vars(inspect.getmodule(obj)) if inspect.getmodule(obj) else {}
        if inspect.isclass(obj):
            for base in obj.__mro__[1:]:
                if base.__module__.split(".")[0] not in ("torch", "builtins") and base is not object:
                    self.add(base)
        for name in sorted(referenced(src)):
            if name in glob:
                self.bind(name, glob[name], obj)
        self.blocks.append(src)

    def bind(self, name: str, value: Any, user: Any) -> None:
        if name == user.__name__:
            return
        if isinstance(value, types.ModuleType):
            root = value.__name__.split(".")[0]
            if root != "torch" and value.__name__ not in STDLIB:
                raise NotExtractable(f"{user.__qualname__} uses the module {value.__name__}")
            line = f"import {value.__name__}" if name == value.__name__ else f"import {value.__name__} as {name}"
            if name in ("torch", "nn", "F") and line not in self.imports:
                if not (name == "nn" and value.__name__ == "torch.nn") and not (name == "F" and value.__name__ == "torch.nn.functional"):
                    raise NotExtractable(f"{user.__qualname__} binds {name} to {value.__name__}")
            if line not in self.imports:
                self.imports.append(line)
            return
        module = getattr(value, "__module__", None) or ""
        if (inspect.isclass(value) or inspect.isfunction(value)) and module.split(".")[0] in ("torch",) + STDLIB:
            line = f"from {module} import {value.__qualname__}" + ("" if name == value.__qualname__ else f" as {name}")
            if "." in value.__qualname__:
                raise NotExtractable(f"{user.__qualname__} uses {module}.{value.__qualname__}")
            if line not in self.imports:
                self.imports.append(line)
            return
        if inspect.isclass(value) or inspect.isfunction(value):
            if value.__name__ != name:
                raise NotExtractable(f"{user.__qualname__} uses {name}, an alias of {value.__name__}")
            self.add(value)
            return
        try:
            text = literal(value)
        except NotExtractable:
            raise NotExtractable(f"{user.__qualname__} uses the global {name} ({type(value).__name__})") from None
        if name not in self.constants:
            self.constants.add(name)
            self.blocks.append(f"{name} = {text}")


def referenced(src: str) -> set[str]:
    """Names a source reads that are not builtins."""
    tree = ast.parse(src)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    names |= {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    return {n for n in names if not hasattr(builtins, n)}


def class_name(cls: type) -> str:
    """How the generated file names a torch class (`nn.Linear`), or "" for a user class."""
    import torch

    if cls.__module__.split(".")[0] != "torch":
        return ""
    if getattr(torch.nn, cls.__name__, None) is cls:
        return f"nn.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def problem_source(t: ModuleTime, header: str) -> str:
    """The problem file of one module (NotExtractable: why it has none)."""
    import torch

    if t.constructed is None or t.args is None:
        raise NotExtractable("its constructor call or its forward call was not seen")
    cls, init, init_kw = t.constructed.cls, t.constructed.args, t.constructed.kwargs
    inits = [literal(v) for v in init]
    init_kws = {k: literal(v) for k, v in init_kw.items()}
    if any(isinstance(v, torch.Tensor) for v in t.kwargs.values()):
        raise NotExtractable("forward takes a tensor as a keyword argument")
    outputs = t.output if isinstance(t.output, (tuple, list)) else (t.output,)
    if not outputs or not all(isinstance(o, torch.Tensor) for o in outputs):
        raise NotExtractable("forward returns something other than a tensor or a tuple of tensors")
    tensors = [a for a in t.args if isinstance(a, torch.Tensor)]
    if not tensors:
        raise NotExtractable("forward takes no tensor")
    leading = {a.shape[0] if a.dim() else None for a in tensors}
    batch = "batch_size" if len(leading) == 1 and None not in leading else None
    params: list[str] = []
    call: list[str] = []
    exprs: list[str] = []
    for a in t.args:
        if isinstance(a, torch.Tensor):
            params.append(f"x{len(params)}")
            call.append(params[-1])
            exprs.append(tensor_expr(a, batch))
        else:
            call.append(literal(a))
    call += [f"{k}={literal(v)}" for k, v in t.kwargs.items()]
    name = class_name(cls)
    inliner = Inliner()
    if not name:
        inliner.add(cls)
        name = cls.__name__
        if name in ("Model", "ModelNew"):
            raise NotExtractable(f"its class is named {name}, a name the problem contract takes")
    lines = ['"""' + header + '"""'] + inliner.imports + [""] + [b.rstrip() + "\n" for b in inliner.blocks]
    names = [f"arg{i}" for i in range(len(inits))]
    described = ", ".join(inits + [f"{k}={v}" for k, v in init_kws.items()])
    lines += ["\nclass Model(nn.Module):", f'    """{name}({described}) as `self.{ATTRIBUTE}`, in eval mode."""', "",
              f"    def __init__(self{''.join(', ' + n for n in names)}):", "        super().__init__()",
              f"        self.{ATTRIBUTE} = {name}({', '.join(names + [f'{k}={v}' for k, v in init_kws.items()])})",
              "        self.eval()", ""]
    lines += [f"    def forward(self, {', '.join(params)}):", f"        return self.{ATTRIBUTE}({', '.join(call)})", ""]
    if batch is not None:
        lines += ["", f"batch_size = {next(iter(leading))}"]
    lines += ["", "", "def get_inputs():", f"    return [{', '.join(exprs)}]", "", "",
              "def get_init_inputs():", f"    return [{', '.join(inits)}]", ""]
    return "\n".join(lines)


def check(source: str, t: ModuleTime, device: str) -> None:
    """The file, built from its own get_init_inputs() with the module's state loaded, gives the
    module's outputs on the real inputs (NotExtractable otherwise)."""
    import torch

    namespace: dict[str, Any] = {"__name__": "ratchet_extracted"}
    try:
        exec(compile(source, "<extracted problem>", "exec"), namespace)  # noqa: S102 - the user's own code
        model = namespace["Model"](*namespace["get_init_inputs"]()).to(device)
        getattr(model, ATTRIBUTE).load_state_dict(t.module.state_dict())
        assert t.args is not None
        with torch.no_grad():
            out = model(*t.args, **t.kwargs)
            namespace["get_inputs"]()  # the file's own inputs are made too
    except Exception as exc:  # noqa: BLE001 - any failure of the rebuilt module is a reason to skip it
        raise NotExtractable(f"the rebuilt module failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    got = out if isinstance(out, (tuple, list)) else (out,)
    want = t.output if isinstance(t.output, (tuple, list)) else (t.output,)
    if len(got) != len(want) or not all(isinstance(g, torch.Tensor) and g.shape == w.shape and g.dtype == w.dtype
                                        and torch.allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)
                                        for g, w in zip(got, want)):
        raise NotExtractable("the rebuilt module does not give the module's outputs (it depends on more than its "
                             "constructor arguments and state dict)")
