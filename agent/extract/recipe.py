"""The patch recipe `ratchet apply` writes: a small importable file, `ratchet_patch.py`, whose
`patch(model)` replaces each optimized module of a model instance by its kept `ModelNew`, with the
module's own parameters and buffers loaded into it (so the model's state dict still loads); the
kernels beside it in `kernels/`. No pickle: the recipe is source a user reads and imports."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.extract.source import ATTRIBUTE

RECIPE = "ratchet_patch.py"
KERNELS = "kernels"


@dataclass(frozen=True)
class Replacement:
    """One module path to replace: by the ModelNew of `kernel` (a file in kernels/), built with `init`."""

    path: str  # "" for the model itself
    kernel: str
    init: str  # the constructor's positional arguments, as Python source of a list


TEMPLATE = '''"""Written by `ratchet apply` (docs/extract.md): the kept kernels of {source} put into a model.

    from ratchet_patch import patch
    model = patch(model)   # the modules below replaced in place (the model itself if listed as "")

Each replacement is built with the module's constructor arguments, and the module's parameters and
buffers are loaded into it (strictly); the patched model's state dict has the original's keys, so a
checkpoint of the model loads into it.
"""
import importlib.util
from pathlib import Path

from agent.extract.source import ATTRIBUTE

import torch

HERE = Path(__file__).resolve().parent

# (module path, kernel file in kernels/, constructor arguments)
REPLACEMENTS = [
{rows}
]


def _model_new(kernel):
    spec = importlib.util.spec_from_file_location("ratchet_kernel_" + Path(kernel).stem, HERE / "{kernels}" / kernel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ModelNew


def _load(new, state):
    """The module's state into its replacement: held as `self.{attribute}` (as the problem's Model holds
    it), with hooks so that the patched model's state dict keeps the module's keys; else as it is."""
    held = {{"{attribute}." + key: value for key, value in state.items()}}
    if set(held) == set(new.state_dict()):
        new.load_state_dict(held)
        new.register_state_dict_post_hook(_drop_attribute)
        new.register_load_state_dict_pre_hook(_add_attribute)
    else:
        new.load_state_dict(state)  # strict: a ModelNew holding the state otherwise fails here


def _drop_attribute(module, state_dict, prefix, local_metadata):
    for key in [k for k in state_dict if k.startswith(prefix + "{attribute}.")]:
        state_dict[prefix + key[len(prefix) + len("{attribute}."):]] = state_dict.pop(key)


def _add_attribute(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(prefix + "{attribute}.")]:
        state_dict[prefix + "{attribute}." + key[len(prefix):]] = state_dict.pop(key)


def patch(model: torch.nn.Module) -> torch.nn.Module:
    classes = {{}}
    for path, kernel, init in REPLACEMENTS:
        if kernel not in classes:
            classes[kernel] = _model_new(kernel)
        old = model.get_submodule(path)
        new = classes[kernel](*init)
        tensors = list(old.parameters()) + list(old.buffers())
        if tensors:
            new = new.to(tensors[0].device)
        _load(new, old.state_dict())
        new.train(old.training)
        if not path:
            model = new
            continue
        parent_path, _, name = path.rpartition(".")
        setattr(model.get_submodule(parent_path), name, new)
    return model
'''


def write_recipe(out: Path, source: str, replacements: list[Replacement], kernels: dict[str, str]) -> Path:
    """OUT/ratchet_patch.py and OUT/kernels/<file> (kernel file name -> its source)."""
    (out / KERNELS).mkdir(parents=True, exist_ok=True)
    for name, text in kernels.items():
        (out / KERNELS / name).write_text(text)
    rows = "\n".join(f"    ({r.path!r}, {r.kernel!r}, {r.init})," for r in replacements)
    path = out / RECIPE
    path.write_text(TEMPLATE.format(source=source, rows=rows, kernels=KERNELS, attribute=ATTRIBUTE))
    return path


def load_recipe(path: Path):  # type: ignore[no-untyped-def]
    """The `patch` function of a written recipe."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ratchet_patch_" + str(abs(hash(str(path)))), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.patch
