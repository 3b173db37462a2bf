"""Problem files (the KernelBench contract): `class Model(nn.Module)` (or the class `--entry`
names), `get_inputs()` and `get_init_inputs()`. The parent checks the file statically here;
the reference worker then loads it, builds the model and runs it once (tools/worker/).
"""
from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.guard.scan import OP_FAMILIES
from tools.guard.ops import compute_ops


class ProblemError(Exception):
    """The reference file is not a valid problem. str() is one line naming the file."""


@dataclass
class ProblemInfo:
    path: Path
    source: str
    hash: str
    entry: str = "Model"
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    init_args: list[dict[str, Any]] = field(default_factory=list)
    ops: dict[str, int] = field(default_factory=dict)  # aten ops of one reference forward
    input_bytes: int = 0
    output_bytes: int = 0
    param_bytes: int = 0
    flops: int = 0  # torch's flop counter over one forward (matmul/conv/attention only)
    dtype: str = "float32"  # the floating dtype holding most of the bytes
    # held-out variants for the drop-in check (tools/worker/variants.py, tools/judge/heldout.py)
    variants: list[dict[str, Any]] = field(default_factory=list)
    variants_dropped: list[dict[str, str]] = field(default_factory=list)  # not used: {variant, why}

    @property
    def compute_ops(self) -> dict[str, int]:
        return compute_ops(self.ops)

    @property
    def single_op(self) -> str | None:
        """The aten op of a single-op problem (one distinct compute op), else None."""
        ops = self.compute_ops
        return next(iter(ops)) if len(ops) == 1 else None

    @property
    def single_op_family(self) -> str | None:
        op = self.single_op
        if op is None:
            return None
        bare = op.split("::")[-1]
        return next((fam for fam, names in OP_FAMILIES.items() if bare in names), bare)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path), "hash": self.hash, "entry": self.entry, "inputs": self.inputs,
            "outputs": self.outputs, "init_args": self.init_args, "ops": self.ops,
            "single_op": self.single_op, "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes, "param_bytes": self.param_bytes,
            "flops": self.flops, "dtype": self.dtype, "variants": self.variants,
        }


def read_problem(path: Path, entry: str = "Model") -> ProblemInfo:
    """Static checks: readable, parses, defines the entry class and get_inputs."""
    try:
        source = path.read_text()
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: cannot read it ({exc})") from None
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(f"{path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    names = top_level_names(tree)
    if entry not in names["class"]:
        hint = f" (classes here: {', '.join(sorted(names['class']))}; pick one with --entry)" if names["class"] else ""
        raise ProblemError(f"{path}: defines no class {entry}{hint}")
    if "get_inputs" not in names["def"] | names["assign"]:
        raise ProblemError(f"{path}: defines no get_inputs() function")
    digest = hashlib.sha256(f"{entry}\0{source}".encode()).hexdigest()
    return ProblemInfo(path=path.resolve(), source=source, hash=digest, entry=entry)


def top_level_names(tree: ast.Module) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"class": set(), "def": set(), "assign": set()}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out["class"].add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out["def"].add(node.name)
        elif isinstance(node, ast.Assign):
            out["assign"].update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out["assign"].update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


COMPARABLE_SCALARS = frozenset({"int", "float", "bool", "NoneType"})


def apply_description(info: ProblemInfo, described: dict[str, Any]) -> None:
    """Fill in what the reference worker measured when it built the model. Raises ProblemError
    for outputs no candidate could be compared on (a dict, a string, an object)."""
    for item in leaves(described["outputs"]):
        if item.get("kind") == "scalar" and item.get("type") not in COMPARABLE_SCALARS:
            raise ProblemError(f"{info.path.name}: forward() returns a {item.get('type')}, which ratchet cannot compare "
                               "(outputs are tensors, numbers, or tuples and lists of them)")
    info.inputs = described["inputs"]
    info.outputs = described["outputs"]
    info.init_args = described["init_args"]
    info.ops = described["ops"]
    info.input_bytes = described["input_bytes"]
    info.output_bytes = described["output_bytes"]
    info.param_bytes = described["param_bytes"]
    info.flops = described["flops"]
    info.dtype = described["dtype"]
    info.variants = described.get("variants", [])
    info.variants_dropped = described.get("variants_dropped", [])


def candidate_problems(source: str) -> str | None:
    """A quick static check of a candidate file: None, or why it is not a candidate at all."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"SyntaxError at line {exc.lineno}: {exc.msg}"
    if "ModelNew" not in top_level_names(tree)["class"]:
        return "the candidate defines no class ModelNew"
    return None


def leaves(described: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in described:
        out.extend(leaves(item["items"]) if item.get("kind") in ("tuple", "list") else [item])
    return out
