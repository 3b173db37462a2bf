"""What `ratchet extract` is pointed at: the user's model (an import path) and its example inputs
(a function, or shapes and dtypes on the command line). Every mistake a user can make here is an
ExtractError naming the option, printed as one line (agent/cli/extract.py)."""
from __future__ import annotations

import importlib
import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from agent.extract.profile import Constructed


class ExtractError(Exception):
    """A mistake in what the user named (a bad import path, shape spec, init args): one line,
    EXIT_USAGE."""


class ModelFailed(Exception):
    """The user's model could not be built, or its forward raised: one line, EXIT_USER_MODEL."""


INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "bool")
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
SHAPE = re.compile(r"^(\d+(?:x\d+)*)(?::([a-z0-9]+))?(?::(\d+))?$")


@dataclass(frozen=True)
class ShapeSpec:
    """One `--shape 8x3x224x224:float32` (an integer dtype takes an exclusive upper bound:
    `8x128:int64:50257`)."""

    shape: tuple[int, ...]
    dtype: str
    high: int | None = None

    def make(self, device: str) -> torch.Tensor:
        import torch

        dtype = getattr(torch, self.dtype)
        if self.dtype in INT_DTYPES:
            return torch.randint(0, self.high or 2, self.shape, device=device).to(dtype)
        return torch.randn(self.shape, device=device, dtype=dtype)


def parse_shape(text: str) -> ShapeSpec:
    match = SHAPE.match(text.strip())
    if match is None:
        raise ExtractError(f"--shape {text}: expected SIZExSIZE...[:DTYPE[:HIGH]], e.g. 8x3x224x224:float32")
    shape = tuple(int(s) for s in match.group(1).split("x"))
    dtype = match.group(2) or "float32"
    if dtype not in INT_DTYPES + FLOAT_DTYPES:
        raise ExtractError(f"--shape {text}: unknown dtype {dtype} (one of {', '.join(FLOAT_DTYPES + INT_DTYPES)})")
    high = int(match.group(3)) if match.group(3) else None
    if high is not None and dtype not in INT_DTYPES:
        raise ExtractError(f"--shape {text}: an upper bound (:{high}) is for integer dtypes only")
    if dtype in INT_DTYPES and dtype != "bool" and high is None:
        raise ExtractError(f"--shape {text}: an integer input needs its exclusive upper bound, e.g. {match.group(1)}:{dtype}:1000")
    if high is not None and high < 1:
        raise ExtractError(f"--shape {text}: the upper bound must be at least 1")
    return ShapeSpec(shape, dtype, high)


def resolve(spec: str, option: str) -> Any:
    """The object an import path names: `pkg.mod:attr` or `path/file.py:attr` (attr may be dotted)."""
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise ExtractError(f"{option} {spec}: expected MODULE:NAME, e.g. pkg.models:make_model or model.py:Net")
    if module_part.endswith(".py"):
        path = Path(module_part)
        if not path.is_file():
            raise ExtractError(f"{option} {spec}: no such file {path}")
        module = _load_file(path, option, spec)
    else:
        if str(Path.cwd()) not in sys.path and "" not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        try:
            module = importlib.import_module(module_part)
        except ImportError as exc:
            raise ExtractError(f"{option} {spec}: cannot import {module_part}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the user's module raised while importing: one line
            raise ModelFailed(f"{option} {spec}: importing {module_part} raised {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for name in attr.split("."):
        if not hasattr(obj, name):
            raise ExtractError(f"{option} {spec}: {module_part} has no attribute {attr}")
        obj = getattr(obj, name)
    if not callable(obj):
        raise ExtractError(f"{option} {spec}: {attr} is not callable")
    return obj


def _load_file(path: Path, option: str, spec: str) -> Any:
    """Import a .py file as a module of its own name (registered, so its classes' source can be read)."""
    resolved = path.resolve()
    name = "ratchet_user_" + re.sub(r"\W", "_", resolved.stem)
    if (known := sys.modules.get(name)) is not None and getattr(known, "__file__", None) == str(resolved):
        return known
    if str(resolved.parent) not in sys.path:
        sys.path.insert(0, str(resolved.parent))  # its own sibling imports
    loader_spec = importlib.util.spec_from_file_location(name, resolved)
    if loader_spec is None or loader_spec.loader is None:
        raise ExtractError(f"{option} {spec}: cannot import {path}")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[name]
        raise ExtractError(f"{option} {spec}: syntax error in {path} at line {exc.lineno}: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - the user's file raised while importing: one line
        del sys.modules[name]
        raise ModelFailed(f"{option} {spec}: importing {path} raised {type(exc).__name__}: {exc}") from None
    return module


def parse_init_args(text: str | None) -> tuple[list[Any], dict[str, Any]]:
    """`--init-args` JSON: a list (positional), an object (keywords) or [[...], {...}] (both)."""
    if text is None:
        return [], {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExtractError(f"--init-args: not JSON ({exc.msg} at column {exc.colno})") from None
    if isinstance(value, dict):
        return [], value
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], list) and isinstance(value[1], dict):
        return value[0], value[1]
    if isinstance(value, list):
        return value, {}
    raise ExtractError("--init-args: expected a JSON list (positional), object (keywords) or [list, object]")


def build_model(spec: str, init_args: str | None) -> tuple[Any, dict[int, Constructed]]:
    """Call MODEL's factory or class (with --init-args) and check it made a torch module; with
    the constructor arguments of every module it built (agent/extract/profile.py)."""
    import torch

    from agent.extract.profile import capture_constructors

    factory = resolve(spec, "MODEL")  # imported first: its classes exist when their constructors are wrapped
    args, kwargs = parse_init_args(init_args)
    try:
        with capture_constructors() as constructed:
            model = factory(*args, **kwargs)
    except TypeError as exc:
        raise ModelFailed(f"MODEL {spec}: calling it raised TypeError: {exc} (constructor arguments go in --init-args)") from None
    except Exception as exc:  # noqa: BLE001 - the user's constructor raised: one line
        raise ModelFailed(f"MODEL {spec}: building the model raised {type(exc).__name__}: {exc}") from None
    if not isinstance(model, torch.nn.Module):
        raise ExtractError(f"MODEL {spec}: made a {type(model).__name__}, not a torch.nn.Module")
    return model, constructed


def make_inputs(function: str | None, shapes: list[str], device: str) -> list[Any]:
    """The forward's positional arguments: from `--inputs MODULE:FUNCTION` (called with no
    arguments; a tensor, or a list or tuple of them) or from `--shape` specs."""
    import torch

    if function is not None and shapes:
        raise ExtractError("--inputs and --shape: give one or the other")
    if function is None:
        if not shapes:
            raise ExtractError("no example inputs: give --inputs MODULE:FUNCTION or --shape SIZExSIZE:DTYPE (repeatable)")
        specs = [parse_shape(s) for s in shapes]
        return [s.make(device) for s in specs]
    make = resolve(function, "--inputs")
    try:
        value = make()
    except Exception as exc:  # noqa: BLE001 - the user's function raised: one line
        raise ModelFailed(f"--inputs {function}: raised {type(exc).__name__}: {exc}") from None
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise ExtractError(f"--inputs {function}: returned no inputs")
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]
