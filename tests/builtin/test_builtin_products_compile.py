"""The product kernels (gemv, mm_reduce, split-K) compiled for a Hopper GPU (sm_90) on a machine
without one, as tests/builtin/test_builtin_compile.py does for the other templates: every @triton.jit
function a draft launches goes through Triton's real pipeline to a cubin, with the arguments its
launch passes (unit strides as constants, as Triton specializes them). Nothing is launched."""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from helpers_builtin import compiled_in_child

HERE = Path(__file__).parents[1]
PROBLEMS = HERE / "builtin_problems"
PTR = {"torch.float32": "*fp32", "torch.float16": "*fp16", "torch.bfloat16": "*bf16"}
# case -> (problem, change to the space's first configuration, sizes specialized as multiples of 16)
CASES = {
    "gemv": ("gemv.py", {"SPLIT_K": 1}, False),
    "gemv_split": ("gemv.py", {"SPLIT_K": 4}, False),
    "gemv_vector_left": ("vector_left.py", {}, False),
    "gemv_three_vectors": ("linear_few_rows.py", {"SPLIT_K": 2}, False),
    "mm_reduce_fused": ("linear_softmax.py", {"fused": True}, False),
    "mm_reduce_two_pass": ("linear_sum.py", {"fused": False, "SPLIT_K": 2}, False),
    "matmul_split_k": ("long_k.py", {}, False),
    # sizes such as 4096: every load of the streamed operand is a 16-byte vector
    "gemv_aligned": ("gemv.py", {"SPLIT_K": 1}, True),
    "gemv_vector_left_aligned": ("vector_left.py", {"SPLIT_K": 1}, True),
    "gemv_three_vectors_aligned": ("linear_few_rows.py", {"SPLIT_K": 1}, True),
    "matmul_split_k_aligned": ("long_k.py", {}, True),
    "matmul_aligned": ("long_k.py", {"SPLIT_K": 1}, True),
}
pytestmark = pytest.mark.timeout(300)


def _config(plan, change: dict) -> dict:
    from agent.builtin import search

    space = search.space(plan)
    base = next(c for c in space if all(c.get(k) == v for k, v in change.items() if k == "fused"))
    return {**base, **change}


def _launches(source: str) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
            and isinstance(n.func.value, ast.Name) and n.func.value.id.endswith("_kernel")]


def compile_case(problem: Path, change: dict, workdir: Path, sizes_divisible: bool = False) -> tuple[list, dict]:
    """Compile every kernel the draft launches for sm_90 (in a process not interpreting); with
    `sizes_divisible`, every integer argument is specialized as a multiple of 16, as Triton does at
    launch for sizes such as 4096."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from agent.builtin import codegen
    from agent.builtin.recognize import recognize

    rec = recognize(problem)
    plan = rec.plan
    config = _config(plan, change)
    source = codegen.draft(plan, rec.problem, config)
    path = workdir / f"{problem.stem}_{abs(hash(json.dumps(change, sort_keys=True)))}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"compiled_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mm = next(n for n in plan.nodes if n.op == "mm")
    a, b = (plan.leaves[r[1]] for r in mm.args)
    strides = {f"a.stride({i})": s for i, s in enumerate(a.strides)} | {f"b.stride({i})": s for i, s in enumerate(b.strides)}
    kernels = []
    for call in _launches(source):
        fn = getattr(module, call.func.value.id)
        signature, constexprs, attrs, options = {}, {}, {}, {}
        for i, (name, arg) in enumerate(zip(fn.arg_names, call.args)):
            text = ast.unparse(arg)
            if name.endswith("_ptr"):
                if name.startswith("in"):
                    signature[name] = PTR[plan.leaves[int(name[2:-4])].dtype]
                elif name in ("a_ptr", "b_ptr"):
                    signature[name] = PTR[a.dtype]
                else:
                    signature[name] = "*fp32" if name == "partial_ptr" else PTR[plan.out_dtype]
                attrs[(i,)] = [["tt.divisibility", 16]]
            elif text.startswith("float(") or isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Div):
                signature[name] = "fp32"
            elif strides.get(text) in (0, 1):
                signature[name], constexprs[(i,)] = "constexpr", strides[text]
            else:
                signature[name] = "i32"
                if sizes_divisible or strides.get(text, 1) % 16 == 0:
                    attrs[(i,)] = [["tt.divisibility", 16]]
        for kw in call.keywords:
            try:
                value = ast.literal_eval(kw.value)
            except ValueError:
                value = True  # EVEN_K, a flag forward computes
            if kw.arg in ("num_warps", "num_stages"):
                options[kw.arg] = value
            else:
                index = fn.arg_names.index(kw.arg)
                signature[kw.arg], constexprs[(index,)] = "constexpr", value
        kernels.append(triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                                      target=GPUTarget("cuda", 90, 32), options=options))
    return kernels, config


def _child(workdir: str) -> None:
    """Compile every case; print one JSON object: case -> {"ok", "kernels", "error"}."""
    out = {}
    for case, (problem, change, divisible) in CASES.items():
        try:
            kernels, config = compile_case(PROBLEMS / problem, change, Path(workdir), divisible)
            ptx = kernels[0].asm["ptx"]
            two_pass = config.get("SPLIT_K", 1) > 1 or config.get("fused") is False
            out[case] = {"ok": all(k.asm.get("cubin") for k in kernels), "kernels": len(kernels), "two_pass": two_pass,
                         "vector_loads": len(re.findall(r"ld\.global(\.\w+)*\.v4", ptx)),
                         "scalar_loads": len(re.findall(r"ld\.global(\.\w+)*\.[bf]32 ", ptx)),
                         "copies_16": len(re.findall(r"cp\.async\.\w+\.shared\.global [^;]*, 0x10,", ptx)),
                         "copies_4": len(re.findall(r"cp\.async\.\w+\.shared\.global [^;]*, 0x4,", ptx))}
        except Exception as exc:  # reported to the parent test, which fails with it
            out[case] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    print(json.dumps(out))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compiled_in_child(__file__, tmp_path_factory.mktemp("compiled_products"))


@pytest.mark.parametrize("case", list(CASES))
def test_product_kernels_compile_for_sm90(case, compiled):
    result = compiled[case]
    if not result["ok"] and "ptxas" in result.get("error", "").lower() and "not found" in result["error"].lower():
        pytest.skip(f"no CUDA compiler toolchain: {result['error']}")
    assert result["ok"], result.get("error")
    assert result["kernels"] == (2 if result["two_pass"] else 1)  # split K or two passes: a second kernel
    if CASES[case][2] and case.startswith("gemv"):  # the matrix is streamed in 16-byte loads
        assert result["vector_loads"] >= 4, result
    if CASES[case][2] and case.startswith("matmul"):  # both operands' tiles copied 16 bytes at a time
        assert result["copies_16"] >= 2 and result["copies_4"] == 0, result


if __name__ == "__main__":
    _child(sys.argv[1])
