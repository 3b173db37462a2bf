"""Rendering of the prompt templates in prompts/*.j2 (Jinja2, StrictUndefined).

All text the model reads comes from those templates; this module only loads them and provides a
few number-formatting filters. A missing variable is an error, never an empty string.
"""
from __future__ import annotations

import os
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2


def _prompts_dir() -> Path:
    """$RATCHET_PROMPTS, else the source tree's prompts/, else where a wheel put them
    (pyproject.toml's data-files: <prefix>/share/ratchet/prompts)."""
    if os.environ.get("RATCHET_PROMPTS"):
        return Path(os.environ["RATCHET_PROMPTS"])
    root = Path(__file__).resolve().parents[2]  # the source tree, or the install's root (pip --target)
    tree = root / "prompts"
    if (tree / "system.j2").is_file():
        return tree
    for prefix in (sysconfig.get_path("data"), str(root)):
        installed = Path(prefix) / "share" / "ratchet" / "prompts"
        if (installed / "system.j2").is_file():
            return installed
    return tree  # reported as missing by the first render


PROMPTS_DIR = _prompts_dir()
FEEDBACK_VERDICTS = ("ok", "rejected", "compile_error", "runtime_error", "incorrect", "timeout", "crashed", "error")


def _ms(value: float | None) -> str:
    if value is None:
        return "not measured"
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 1:
        return f"{value:.3g} ms"
    return f"{value * 1000:.3g} us"


def _speedup(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _bytes(value: int | None) -> str:
    if value is None:
        return "unknown bytes"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value} B"


def _flops(value: int | None) -> str:
    if value is None:
        return "unknown FLOPs"
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value} FLOP"


def _describe_input(item: Any) -> str:
    """One input of get_inputs(), as the problem loader describes it (a dict), in a few words."""
    if not isinstance(item, dict):
        return str(item)
    kind = item.get("kind", "tensor")
    if kind == "tensor":
        shape = item.get("shape")
        text = f"tensor {tuple(shape) if shape is not None else '?'} {item.get('dtype', '?')}"
        extra = [f"{k}={item[k]}" for k in ("device", "range", "low", "high") if item.get(k) is not None]
        return text + (f" ({', '.join(extra)})" if extra else "")
    details = ", ".join(f"{k}={v}" for k, v in item.items() if k != "kind")
    return f"{kind} {details}".strip()


@lru_cache(maxsize=4)
def environment(directory: str | None = None) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory or str(PROMPTS_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
    )
    env.filters.update(ms=_ms, x=_speedup, bytes=_bytes, flops=_flops, describe_input=_describe_input)
    return env


def render(name: str, **variables: Any) -> str:
    """Render prompts/<name>.j2."""
    return environment().get_template(f"{name}.j2").render(**variables).strip()


def render_feedback(verdict: str, **variables: Any) -> str:
    if verdict not in FEEDBACK_VERDICTS:
        raise ValueError(f"no feedback template for verdict {verdict!r}")
    return render(f"feedback_{verdict}", **variables)
