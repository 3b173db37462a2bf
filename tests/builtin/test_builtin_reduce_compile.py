"""The reduction drafts' kernels (split passes, two levels, fused loops, int64 offsets) compiled
for a Hopper GPU (sm_90) by Triton's real pipeline down to a cubin, on a machine without one: what
only the compiler checks (types, loop-carried values, constexprs, layouts). Nothing is launched.
As in tests/builtin/test_builtin_compile.py, the compiling happens in a child process with
TRITON_INTERPRET unset; every @triton.jit function of a draft is compiled with the constexprs and
argument kinds its launch in forward gives it."""
from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from helpers_builtin import compiled_in_child

HERE = Path(__file__).parents[1]
PROBLEMS = HERE / "builtin_problems"
PTR = {"torch.float32": "*fp32", "torch.float16": "*fp16", "torch.bfloat16": "*bf16"}
# case -> (problem, configuration filter, force int64 offsets)
CASES = {
    "split_finish": (PROBLEMS / "mse_loss.py", "split", False),
    "split_apply_moments": (PROBLEMS / "layernorm_long.py", "split", False),
    "split_apply_int64": (PROBLEMS / "frobenius_norm.py", "split", True),
    "split_online": (PROBLEMS / "long_softmax.py", "split", False),
    "global_one_tile": (PROBLEMS / "huber_loss.py", "any", False),
    "twolevel": (PROBLEMS / "cosine_loss.py", "any", False),
    "twolevel_int64": (PROBLEMS / "triplet_loss.py", "any", True),
    "group_norm": (PROBLEMS / "group_norm.py", "any", False),
}
FILTERS = {"any": lambda c: True, "split": lambda c: bool(c.get("split")), "looped": lambda c: bool(c.get("looped"))}
pytestmark = pytest.mark.timeout(300)


def _launches(source: str) -> dict[str, tuple[list[ast.expr], dict[str, ast.expr]]]:
    """kernel name -> (positional arguments, keyword arguments) of its launch in forward."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                and isinstance(node.func.value, ast.Name):
            out[node.func.value.id] = (node.args, {k.arg: k.value for k in node.keywords})
    return out


def _is_float(arg: ast.expr) -> bool:
    """A Python float forward passes: float(self.eps), 1.0 / (x_dim1)."""
    return (isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Div)) or (
        isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "float")


def _constant(value: ast.expr, config: dict) -> object:
    """A launch's compile-time argument: a literal, or the one-tile launch's block_m / block_r,
    which at the problem's own sizes are the configuration's (agent/builtin/kernels/one_tile.j2)."""
    if isinstance(value, ast.Name) and value.id in ("block_m", "block_r"):
        return config[value.id.upper()]
    return ast.literal_eval(value)


def compile_draft(problem: Path, config_filter, force_i64: bool, workdir: Path) -> dict[str, bool]:
    """Compile every kernel of the first matching configuration's draft; kernel -> cubin made."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import agent.builtin.general as general
    from agent.builtin import codegen, search
    from agent.builtin.recognize import recognize

    if force_i64:
        general.needs_int64 = lambda plan: True
    rec = recognize(problem)
    plan = rec.plan
    config = next(c for c in search.space(plan) if config_filter(c))
    source = codegen.draft(plan, rec.problem, config)
    if force_i64:
        assert ".to(tl.int64)" in source
    path = workdir / f"{problem.stem}_{len(list(workdir.iterdir()))}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = {}
    for kernel, (args, keywords) in _launches(source).items():
        fn = getattr(module, kernel)
        signature, constexprs, attrs = {}, {}, {}
        for i, name in enumerate(fn.arg_names):
            if name in keywords:
                signature[name], constexprs[(i,)] = "constexpr", _constant(keywords[name], config)
            elif name.endswith("_ptr"):
                leaf = name[2:-4]
                dtype = plan.leaves[int(leaf)].dtype if name.startswith("in") else \
                    (plan.out_dtype if name == "out_ptr" else "torch.float32")
                signature[name] = PTR[dtype]
                attrs[(i,)] = [["tt.divisibility", 16]]
            elif i < len(args) and _is_float(args[i]):
                signature[name] = "fp32"
            else:
                signature[name] = "i64" if force_i64 else "i32"
        options = {"num_warps": ast.literal_eval(keywords["num_warps"])}
        compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                                  target=GPUTarget("cuda", 90, 32), options=options)
        made[kernel] = bool(compiled.asm.get("cubin"))
    return made


def _child(workdir: str) -> None:
    out = {}
    for case, (problem, name, force_i64) in CASES.items():
        try:
            out[case] = {"ok": True, "kernels": compile_draft(problem, FILTERS[name], force_i64, Path(workdir))}
        except Exception as exc:  # reported to the parent test, which fails with it
            out[case] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    print(json.dumps(out))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compiled_in_child(__file__, tmp_path_factory.mktemp("compiled_reduce"))


@pytest.mark.parametrize("case", list(CASES))
def test_reduction_kernels_compile_for_sm90(case, compiled):
    result = compiled[case]
    if not result["ok"] and "ptxas" in result["error"].lower() and "not found" in result["error"].lower():
        pytest.skip(f"no CUDA compiler toolchain: {result['error']}")
    assert result["ok"], result["error"]
    assert result["kernels"] and all(result["kernels"].values()), result["kernels"]


if __name__ == "__main__":
    _child(sys.argv[1])
