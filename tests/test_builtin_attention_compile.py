"""The attention kernel compiled for a Hopper GPU (sm_90) on a machine without one, as
tests/test_builtin_products_compile.py does for the product kernels: Triton's real pipeline to a
cubin (the interpreter accepts more than the compiler), with the head dim's unit strides as
constants, as Triton specializes them. Nothing is launched."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from helpers_builtin import ROOT, compiled_in_child

PTR = {"torch.float32": "*fp32", "torch.float16": "*fp16", "torch.bfloat16": "*bf16"}
# case -> (problem at its published size, change to the space's first configuration)
CASES = {
    "fp32_causal_tf32x3": ("attention_03_sdpa_causal.py", {"precision": "tf32x3"}),
    "fp16_long_causal_d128": ("attention_05_long_causal_fp16.py", {}),
    "fp32_mingpt_buffer_mask": ("attention_09_mingpt_buffer_mask.py", {}),
}
pytestmark = pytest.mark.timeout(300)


def compile_case(problem: Path, change: dict, workdir: Path):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from agent.builtin import codegen, search
    from agent.builtin.recognize import recognize

    rec = recognize(problem)
    config = {**search.space(rec.plan)[0], **change}
    path = workdir / f"{problem.stem}.py"
    path.write_text(codegen.draft(rec.plan, rec.problem, config))
    spec = importlib.util.spec_from_file_location(f"compiled_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = module.attention_kernel
    q, _, v = rec.plan.leaves[:3]
    node_attrs = rec.plan.nodes[0].attrs
    mask = {None: 0, "keep_nonzero": 1, "keep_zero": 2, "add": 3}[node_attrs["mask"]]
    mask_ptr = PTR.get(rec.plan.leaves[3].dtype, "*i1") if mask else PTR[q.dtype]
    block = {"BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"], "CAUSAL": node_attrs["causal"],
             "MASK": mask, "SAFE": node_attrs["safe"],
             "BLOCK_D": max(16, triton.next_power_of_2(q.shape[-1])),
             "BLOCK_DV": max(16, triton.next_power_of_2(v.shape[-1]))}
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name.endswith("_ptr"):
            ptr = mask_ptr if name == "m_ptr" else PTR[q.dtype]
            signature[name], attrs[(i,)] = ptr, [["tt.divisibility", 16]]
        elif name in ("qk_scale", "mask_scale"):
            signature[name] = "fp32"
        elif name in block:
            signature[name], constexprs[(i,)] = "constexpr", block[name]
        elif name.startswith("stride_") and name.endswith("d"):  # contiguous head dims: unit stride
            signature[name], constexprs[(i,)] = "constexpr", 1
        else:
            signature[name] = "i32"
    kernel = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                            target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": config["num_warps"], "num_stages": config["num_stages"]})
    return kernel, config


def _child(workdir: str) -> None:
    """Compile every case; print one JSON object: case -> {"ok", "precision", "wgmma", "error"}."""
    out = {}
    for case, (problem, change) in CASES.items():
        try:
            kernel, config = compile_case(ROOT / "benchmarks" / "tensor_core" / problem, change, Path(workdir))
            ptx = kernel.asm["ptx"]
            out[case] = {"ok": bool(kernel.asm.get("cubin")), "precision": config.get("precision"),
                         "wgmma": ptx.count("wgmma.mma_async"), "tf32": ptx.count(".tf32")}
        except Exception as exc:  # reported to the parent test, which fails with it
            out[case] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    print(json.dumps(out))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compiled_in_child(__file__, tmp_path_factory.mktemp("compiled_attention"))


@pytest.mark.parametrize("case", list(CASES))
def test_attention_kernel_compiles_for_sm90_on_tensor_cores(case, compiled):
    result = compiled[case]
    if not result["ok"] and "ptxas" in result.get("error", "").lower() and "not found" in result["error"].lower():
        pytest.skip(f"no CUDA compiler toolchain: {result['error']}")
    assert result["ok"], result.get("error")
    assert result["wgmma"] >= 2, result  # both products on Hopper's tensor cores
    if result["precision"] == "tf32x3":  # float32 split into TF32 pieces: three products each
        assert result["tf32"] >= 3, result


if __name__ == "__main__":
    _child(sys.argv[1])
