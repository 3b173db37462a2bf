"""Held-out variants of a problem: other sizes and constructor arguments a user could pass, for
one untimed trial each, so that the kept kernel is a drop-in module and not only right on the
benchmark's own shapes (tools/judge/heldout.py judges them).

Runs in the reference worker (it holds the problem's module, which is trusted). A variant is a
set of overrides of the problem module's module-level constants, in force while get_inputs()
and get_init_inputs() run (not while the models are built or run: a candidate only ever gets the
constructor's arguments and the inputs, so a Model that reads `batch_size` itself has no variant
a candidate could follow, and the reference refusing it drops it), plus a factor on the floating
constructor arguments:

- declared: the problem's own `RATCHET_VARIANTS = [{"batch_size": 3, "dim": 100}, ...]` (each
  dict overrides those module-level names; floats are not scaled). `RATCHET_VARIANTS = []`
  declares that the problem's shapes are fixed: no held-out trial.
- derived, when nothing is declared; the first of these the reference accepts is used:
  1. "sizes": every module-level int of at least MIN_SIZE (batch, features, sequence lengths;
     smaller ones are kept, being axes, kernel sizes, strides or groups more often than sizes)
     becomes the smaller odd value (v // 2) | 1, and every floating constructor argument is
     scaled by FLOAT_SCALE;
  2. "leading": only the leading size (the first module-level int whose name mentions batch,
     else the first one of at least 2) becomes (v // 2) | 1.
  and, besides, one LARGER variant, the first of these the reference accepts within the memory
  bound of tools/worker/variant_bytes.py (a tile or grid baked to the problem's size passes
  every smaller variant, its mask hiding the difference, and fails a larger one):
  3. "larger": every module-level int of at least MIN_SIZE becomes the larger odd value
     (v + v // 4) | 1 (16 -> 21, 256 -> 321, 4096 -> 5121: about 1.25x, never a power of two),
     floats unscaled;
  4. "larger, leading kept": the same for all but the leading size;
  5. "larger, last": the same for the last such int alone (in source order: most often the
     innermost, the row length).
  The reference accepts a variant when it builds, runs, gives finite outputs where its own
  were finite, and its inputs' shapes or its constructor arguments differ from the problem's.
"""
from __future__ import annotations

import ast
import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

MIN_SIZE = 8
FLOAT_SCALE = 0.75
DECLARED = "RATCHET_VARIANTS"


class VariantError(Exception):
    """A problem's own RATCHET_VARIANTS is malformed."""


@dataclass
class Variant:
    sizes: dict[str, int] = field(default_factory=dict)  # module-level name -> value while it runs
    float_scale: float = 1.0  # applied to floating constructor arguments (not bools)
    origin: str = "derived"  # "declared" or "derived"
    larger: bool = False  # a derived variant larger than the problem (held out within a memory bound)
    bytes: dict[str, int] = field(default_factory=dict)  # what the reference took on it: inputs, outputs

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.sizes.items()]
        if self.float_scale != 1.0:
            parts.append(f"float constructor arguments x{self.float_scale:g}")
        return ", ".join(parts) or "the problem's own sizes"

    def to_dict(self) -> dict[str, Any]:
        return {"sizes": dict(self.sizes), "float_scale": self.float_scale, "origin": self.origin,
                "larger": self.larger, "describe": self.describe(),
                "input_bytes": self.bytes.get("inputs", 0), "output_bytes": self.bytes.get("outputs", 0)}


def candidates(module: Any, source: str) -> list[Variant] | None:
    """The variants to try, in order (declared ones all count; of derived ones the first smaller
    and the first larger one the reference accepts); None when the problem declares its shapes fixed."""
    declared = getattr(module, DECLARED, None)
    if declared is not None:
        return _declared(module, declared) or None
    sizes = _module_sizes(module, source)
    found: list[Variant] = []
    shrunk = {name: (v // 2) | 1 for name, v in sizes.items() if v >= MIN_SIZE}
    found.append(Variant(sizes=shrunk, float_scale=FLOAT_SCALE))
    leading = next((n for n in sizes if "batch" in n.lower() and sizes[n] >= 2), None) \
        or next((n for n, v in sizes.items() if v >= 2), None)
    if leading is not None and sizes[leading] >= 3:
        found.append(Variant(sizes={leading: (sizes[leading] // 2) | 1}))
    grown = [n for n, v in sizes.items() if v >= MIN_SIZE]
    tried: list[list[str]] = []
    for names in (grown, [n for n in grown if n != leading], grown[-1:]):
        if names and names not in tried:
            tried.append(names)
            found.append(Variant(sizes={n: grow(sizes[n]) for n in names}, larger=True))
    return found


def grow(v: int) -> int:
    """The larger odd size of a larger variant: about 1.25x, so that inputs of two or three grown
    sizes stay within the memory bound (tools/worker/variant_bytes.py)."""
    return (v + v // 4) | 1


def _declared(module: Any, declared: Any) -> list[Variant]:
    if not isinstance(declared, (list, tuple)):
        raise VariantError(f"{DECLARED} must be a list of dicts of module-level names to ints, not {type(declared).__name__}")
    out = []
    for i, entry in enumerate(declared):
        if not isinstance(entry, dict) or not entry:
            raise VariantError(f"{DECLARED}[{i}] must be a non-empty dict of module-level names to values")
        for name, value in entry.items():
            if not isinstance(name, str) or not hasattr(module, name):
                raise VariantError(f"{DECLARED}[{i}] names {name!r}, which the problem does not define at module level")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise VariantError(f"{DECLARED}[{i}][{name!r}] must be a number, not {type(value).__name__}")
        out.append(Variant(sizes=dict(entry), origin="declared"))
    return out


def _module_sizes(module: Any, source: str) -> dict[str, int]:
    """Module-level names assigned at the top level of the problem file holding ints, in source order."""
    names: list[str] = []
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            for name in target.elts if isinstance(target, ast.Tuple) else [target]:  # `ROWS, COLS = ...` too
                if isinstance(name, ast.Name) and not name.id.startswith("_") and name.id not in names:
                    names.append(name.id)
    values = {n: getattr(module, n, None) for n in names}
    return {n: v for n, v in values.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


@contextlib.contextmanager
def applied(module: Any, variant: Variant) -> Iterator[None]:
    """The module's constants overridden by the variant while the block runs."""
    saved = {name: getattr(module, name) for name in variant.sizes}
    try:
        for name, value in variant.sizes.items():
            setattr(module, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def scale_floats(init_inputs: list[Any], factor: float) -> list[Any]:
    if factor == 1.0:
        return list(init_inputs)
    return [x * factor if isinstance(x, float) and math.isfinite(x) else x for x in init_inputs]


def signature(values: list[Any]) -> list[Any]:
    """Shapes of tensors and values of scalars: what tells a variant from the problem."""
    import torch

    out: list[Any] = []
    for x in values:
        if isinstance(x, torch.Tensor):
            out.append(("tensor", tuple(x.shape)))
        elif isinstance(x, (list, tuple)):
            out.append(tuple(signature(list(x))))
        else:
            out.append(repr(x))
    return out


def accepted(build: Callable[[Variant], tuple[list[Any], list[Any], bool]], variant: Variant,
             own: tuple[list[Any], list[Any]]) -> str | None:
    """None if the reference accepts the variant, else why not. `build(variant)` returns the
    variant's (init_inputs, inputs, outputs finite) after running the reference on them, raising
    if it fails; `own` is the problem's (init_inputs, inputs)."""
    try:
        init_inputs, inputs, finite = build(variant)
    except Exception as exc:  # noqa: BLE001 - the reference refusing a variant is an answer, not a fault
        return f"the reference fails on it ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    if not finite:
        return "the reference's output is not finite on it"
    if signature(inputs) == signature(own[1]) and signature(init_inputs) == signature(own[0]):
        return "it changes neither the inputs' shapes nor the constructor's arguments"
    return None


def finite(tree: Any) -> bool:
    """No NaN or infinity in any floating tensor of an output tree."""
    import torch

    if isinstance(tree, torch.Tensor):
        return not (tree.is_floating_point() or tree.is_complex()) or bool(torch.isfinite(tree).all())
    if isinstance(tree, (list, tuple)):
        return all(finite(x) for x in tree)
    return True
