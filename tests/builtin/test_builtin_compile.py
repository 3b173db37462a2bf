"""The built-in policy's kernels compiled for a Hopper GPU (sm_90) on a machine without one.

The interpreter runs the kernels' arithmetic; this checks what only the compiler sees (types,
constexprs, loop-carried values, layouts) by compiling each template through Triton's real
pipeline down to a cubin, with the specializations Triton makes at launch (unit strides as
constants, 16-byte aligned pointers). Nothing is launched. Triton fixes interpreter or compiled
mode per process, so the compiling happens in a child process with TRITON_INTERPRET unset."""
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
PTR = {"torch.float32": "*fp32", "torch.float16": "*fp16", "torch.bfloat16": "*bf16", "torch.bool": "*i1",
       "torch.int64": "*i64"}
KERNEL = {"pointwise": "fused_pointwise_kernel", "rowwise": "fused_rowwise_kernel",
          "colwise": "fused_colwise_kernel", "matmul": "fused_matmul_kernel", "pool": "fused_pool_kernel",
          "scan": "fused_scan_kernel", "argreduce": "fused_argreduce_kernel"}
FILTERS = {"any": lambda c: True, "looped": lambda c: c["looped"], "tf32x3": lambda c: c.get("precision") == "tf32x3",
           "ieee": lambda c: c.get("precision") == "ieee"}
CASES = {
    "pointwise_fp16": (PROBLEMS / "bias_tanh_fp16.py", "any"),
    "layernorm": (PROBLEMS / "layernorm.py", "any"),
    "rows_multi_dim": (PROBLEMS / "misc_rows.py", "any"),
    "rows_looped": (PROBLEMS / "wide_softmax.py", "looped"),
    "colwise": (PROBLEMS / "mid_mean.py", "any"),
    "colwise_full": (PROBLEMS / "channel_rmsnorm.py", "any"),
    "colwise_softmax": (PROBLEMS / "channel_softmax.py", "any"),
    "linear_tf32x3": (PROBLEMS / "linear_gelu.py", "tf32x3"),
    "bmm_ieee": (PROBLEMS / "bmm_scale.py", "ieee"),
    "matmul_fp16": (HERE.parent / "benchmarks" / "problems" / "matmul_fp16.py", "any"),
    "max_pool1d": (PROBLEMS / "max_pool1d.py", "any"),
    "max_pool3d": (PROBLEMS / "max_pool3d.py", "any"),
    "avg_pool2d_epilogue": (PROBLEMS / "avg_pool2d_scaled.py", "any"),
    "scan_rows": (PROBLEMS / "cumsum_exclusive.py", "any"),
    "scan_masked": (PROBLEMS / "cumsum_masked.py", "any"),
    "scan_reverse": (PROBLEMS / "cumsum_reverse.py", "any"),
    "scan_mid_prod": (PROBLEMS / "cumprod_mid.py", "any"),
    "argmax_mid": (PROBLEMS / "argmax_mid.py", "any"),
    "argmin_rows": (PROBLEMS / "argmin_rows.py", "any"),
}
pytestmark = pytest.mark.timeout(300)


def compile_case(problem: Path, config_filter, workdir: Path):
    """Compile the first matching configuration's kernel for sm_90 (in a process not interpreting)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from agent.builtin import codegen, search
    from agent.builtin.recognize import recognize

    rec = recognize(problem)
    plan = rec.plan
    config = next(c for c in search.space(plan) if config_filter(c))
    path = workdir / f"{problem.stem}_candidate.py"
    path.write_text(codegen.draft(plan, rec.problem, config))
    spec = importlib.util.spec_from_file_location(f"compiled_{problem.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, KERNEL[plan.kind])
    unit = {}
    if plan.kind == "matmul":
        mm = next(n for n in plan.nodes if n.op == "mm")
        a, b = (plan.leaves[r[1]] for r in mm.args)
        unit = {"stride_ab": 0, "stride_am": a.strides[-2], "stride_ak": a.strides[-1], "stride_bb": 0,
                "stride_bk": b.strides[-2], "stride_bn": b.strides[-1]}
        config = {**config, "EVEN_K": a.shape[-1] % config["BLOCK_K"] == 0}  # a constexpr forward computes
    if plan.kind == "pool":  # the window's size: constexprs forward reads from the pooling's settings
        pool = next(n for n in plan.nodes if n.op == "pool")
        kernel = (1,) * (3 - pool.attrs["dims"]) + pool.attrs["kernel"]
        config = {**config, "KD": kernel[0], "KH": kernel[1], "KW": kernel[2]}
    signature, constexprs, attrs = {}, {}, {}
    floats = _float_arguments(path.read_text(), KERNEL[plan.kind], fn.arg_names)
    for i, name in enumerate(fn.arg_names):
        if name in floats:
            signature[name] = "fp32"  # a module scalar or a size's reciprocal, passed as a Python float
        elif name.endswith("_ptr"):
            signature[name] = PTR[plan.leaves[int(name[2:-4])].dtype] if name.startswith("in") else PTR[plan.out_dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in config:
            signature[name], constexprs[(i,)] = "constexpr", config[name]
        elif unit.get(name) in (0, 1):
            signature[name], constexprs[(i,)] = "constexpr", unit[name]
        else:
            signature[name] = "i32"
            if name in unit and unit[name] % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]  # as Triton specializes such values at launch
    options = {"num_warps": config["num_warps"], **({"num_stages": config["num_stages"]} if "num_stages" in config else {})}
    return triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32), options=options)


def _float_arguments(source: str, kernel: str, arg_names: list[str]) -> set[str]:
    """The kernel's parameters forward passes a Python float for (float(self.scale), 1.0 / (x_dim1))."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == kernel:
            return {name for name, arg in zip(arg_names, node.args)
                    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Div)
                    or isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "float"}
    raise AssertionError(f"no launch of {kernel} in the draft")


def _child(workdir: str) -> None:
    """Compile every case; print one JSON object: case -> {"ok", "error", "cubin", "ttgir_has"}."""
    out = {}
    for case, (problem, name) in CASES.items():
        try:
            kernel = compile_case(problem, FILTERS[name], Path(workdir))
            ttgir = kernel.asm.get("ttgir", "")
            out[case] = {"ok": True, "cubin": bool(kernel.asm.get("cubin")),
                         "pipelined": "async_copy" in ttgir and "warp_group_dot" in ttgir}
        except Exception as exc:  # reported to the parent test, which fails with it
            out[case] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    print(json.dumps(out))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compiled_in_child(__file__, tmp_path_factory.mktemp("compiled"), {"TRITON_DEFAULT_FP_FUSION": "1"})


@pytest.mark.parametrize("case", [c for c in CASES if c != "matmul_fp16"])
def test_kernel_compiles_for_sm90(case, compiled):
    result = compiled[case]
    if not result["ok"] and "ptxas" in result["error"].lower() and "not found" in result["error"].lower():
        pytest.skip(f"no CUDA compiler toolchain: {result['error']}")
    assert result["ok"], result["error"]
    assert result["cubin"]


def test_matmul_k_loop_is_pipelined(compiled):
    """With unit strides specialized, the K loop's loads become asynchronous copies (num_stages)."""
    result = compiled["matmul_fp16"]
    assert result["ok"], result.get("error")
    assert result["pipelined"]


if __name__ == "__main__":
    _child(sys.argv[1])
