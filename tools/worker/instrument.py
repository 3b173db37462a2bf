"""What a forward pass really did, seen from inside the worker: launches of the candidate's own
kernels (Triton and load_inline extensions) and the aten ops it left to torch.

Installed by the worker before candidate code is imported, so a candidate cannot route around
it without patching classes, which the sandbox refuses.
"""
from __future__ import annotations

import collections
import functools
import types
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def op_name(func: Any) -> str:
    packet = getattr(func, "overloadpacket", func)
    return f"{getattr(packet, '_qualified_op_name', str(packet)).replace('.', '::', 1)}"


class OpRecorder(TorchDispatchMode):
    """Counts every aten op dispatched while active, by name (aten::mm)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: A002 - torch's name
        self.ops[op_name(func)] += 1
        if any(isinstance(leaf, SYMBOLIC) for leaf in tree_leaves((args, kwargs))):
            # a symbolic size's Python methods run inside func, where torch has taken this mode off
            # its stack: a matmul done there went unrecorded (attacker helper, stop 29). Eager
            # code has no symbolic sizes, and torch.compile is refused by the gate.
            raise RuntimeError(f"{op_name(func)} was given a symbolic size (torch.SymInt and the like): "
                               "not allowed in a candidate's forward")
        return func(*args, **(kwargs or {}))


class LaunchCounter:
    """Counts launches of Triton kernels defined in one module and calls into its extensions."""

    def __init__(self) -> None:
        self.module_name: str | None = None
        self.count = 0
        self.names: collections.Counter[str] = collections.Counter()

    def install_triton(self) -> None:
        import triton.runtime.jit as jit

        classes: list[type] = [jit.JITFunction]
        try:
            import triton.runtime.interpreter as interp

            classes.append(interp.InterpretedFunction)
        except ImportError:  # an old triton without the interpreter module
            pass
        for cls in classes:
            setattr(cls, "run", self._counting_run(getattr(cls, "run")))  # noqa: B010 - every class of `classes`

    def _counting_run(self, original):
        @functools.wraps(original)
        def run(kernel, *args, **kwargs):
            fn = getattr(kernel, "fn", None)
            if self.module_name and getattr(fn, "__module__", None) == self.module_name:
                self.count += 1
                self.names[getattr(fn, "__name__", "?")] += 1
            return original(kernel, *args, **kwargs)

        return run

    def wrap_extension(self, module: types.ModuleType, name: str) -> types.ModuleType:
        """A stand-in for a load_inline module whose functions count their calls."""
        proxy = types.ModuleType(module.__name__)
        for attr in dir(module):
            value = getattr(module, attr)
            if callable(value) and not attr.startswith("_"):
                proxy.__dict__[attr] = self._counted(value, f"{name}.{attr}")
            else:
                proxy.__dict__[attr] = value
        return proxy

    def _counted(self, fn, label: str):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            self.count += 1
            self.names[label] += 1
            return fn(*args, **kwargs)

        return call

    def reset(self) -> None:
        self.count = 0
        self.names.clear()
