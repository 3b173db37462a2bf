"""Which modules become problems, merged and ranked, and the manifest that records them.

The units: from the model down, a module is one unit when it is a leaf, or when its own code
(ops outside its children) holds at least `OWN_SHARE` of its time and it can be written as a
problem file; otherwise its children are looked at. Units whose problem files are the same
(same class, constructor arguments, input shapes and dtypes) are one problem with a count. The
problems are ranked by their share of the model's time; `--top` and `--min-share` keep the head.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.extract.profile import ModuleTime
from agent.extract.source import NotExtractable, check, problem_source

OWN_SHARE = 0.1  # a composite whose own ops are this much of its time is extracted whole
MANIFEST = "manifest.json"
SCHEMA = 1


@dataclass
class Problem:
    """One problem file: the modules it stands for and their share of the model's time."""

    file: str
    cls: str
    modules: list[str]
    count: int
    share: float
    time_ms: float
    init_args: list[str]
    inputs: list[dict[str, Any]]


@dataclass
class Skipped:
    module: str
    cls: str
    share: float
    why: str


@dataclass
class Manifest:
    model: str
    inputs: list[str]
    device: str
    timer: str  # "cpu" (CPU time of the ops) or "device" (GPU time of their kernels)
    total_ms: float
    coverage: float  # the problems' shares summed
    problems: list[Problem] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    below_threshold: int = 0  # problems found but not written (--top, --min-share)
    schema: int = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, out: Path) -> Path:
        path = out / MANIFEST
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path


def read_manifest(path: Path) -> Manifest:
    data = json.loads(path.read_text())
    problems = [Problem(**p) for p in data.pop("problems")]
    skipped = [Skipped(**s) for s in data.pop("skipped")]
    return Manifest(**data, problems=problems, skipped=skipped)


def display(path: str) -> str:
    return path or "(model)"


def qualname(t: ModuleTime) -> str:
    cls = type(t.module)
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass
class Unit:
    time: ModuleTime
    source: str


def units(times: dict[str, ModuleTime], device: str, skipped: list[Skipped], total: float) -> list[Unit]:
    """The modules to write, from the model down (see the module's docstring)."""
    found: list[Unit] = []

    def visit(path: str) -> None:
        t = times[path]
        if t.total_us <= 0 or t.calls == 0:
            return
        leaf = not t.children
        if leaf or t.own_us >= OWN_SHARE * t.total_us:
            try:
                header = f"{display(path)} ({qualname(t)}) of the extracted model"
                src = problem_source(t, header)
                check(src, t, device)
                found.append(Unit(t, src))
                return
            except NotExtractable as exc:
                skipped.append(Skipped(display(path), qualname(t), round(t.total_us / total if leaf else t.own_us / total, 6),
                                       str(exc)))
        for child in t.children:
            visit(child)

    visit("")
    return found


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:40] or "model"


def build(times: dict[str, ModuleTime], device: str, model: str, inputs: list[str], out: Path,
          top: int, min_share: float) -> Manifest:
    """Pick, merge, rank and write the problems and the manifest into `out`."""
    import torch

    total = times[""].total_us
    if total <= 0:
        raise NotExtractable("the profiled forward ran no op")
    skipped: list[Skipped] = []
    groups: dict[str, list[Unit]] = {}
    for unit in units(times, device, skipped, total):
        body = unit.source.split('"""', 2)[2]  # the header names the module: the rest decides identity
        groups.setdefault(body, []).append(unit)
    ranked = sorted(groups.values(), key=lambda g: -sum(u.time.total_us for u in g))
    manifest = Manifest(model, inputs, device, "device" if device.startswith("cuda") else "cpu",
                        round(total / 1000, 4), 0.0, skipped=skipped)
    out.mkdir(parents=True, exist_ok=True)
    for group in ranked:
        share = sum(u.time.total_us for u in group) / total
        if len(manifest.problems) >= top or share < min_share:
            manifest.below_threshold += 1
            continue
        first = group[0].time
        name = f"{len(manifest.problems) + 1:02d}_{slug(type(first.module).__name__)}_{slug(display(first.path))}.py"
        paths = [display(u.time.path) for u in group]
        header = (f"{', '.join(paths)} ({qualname(first)}) of {model}: {len(group)} identical module(s), "
                  f"{share:.1%} of the model's {manifest.timer} time (ratchet extract; docs/extract.md)")
        (out / name).write_text('"""' + header + '"""' + group[0].source.split('"""', 2)[2])
        assert first.constructed is not None and first.args is not None
        inputs_spec = [{"shape": list(a.shape), "dtype": str(a.dtype).removeprefix("torch.")}
                       for a in first.args if isinstance(a, torch.Tensor)]
        manifest.problems.append(Problem(name, qualname(first), paths, len(group), round(share, 6),
                                         round(sum(u.time.total_us for u in group) / 1000, 4),
                                         [repr(a) for a in first.constructed.args], inputs_spec))
    manifest.coverage = round(sum(p.share for p in manifest.problems), 6)
    manifest.write(out)
    return manifest
