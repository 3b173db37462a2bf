"""The attention kernel compiled for a Hopper GPU (sm_90) on a machine without one, as
tests/builtin/test_builtin_products_compile.py does for the product kernels: Triton's real pipeline to a
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
# case -> (problem at its published size, change to the space's first configuration, head dim
# the kernel is compiled for: the problem's own when None, else another model's, as the held-out
# check passes it and the draft's attention_tile picks that head dim's blocks)
CASES = {
    "fp32_causal_tf32x3": ("attention_03_sdpa_causal.py", {"precision": "tf32x3"}, None),
    "fp16_long_causal_d128": ("attention_05_long_causal_fp16.py", {}, None),
    "fp32_mingpt_buffer_mask": ("attention_09_mingpt_buffer_mask.py", {}, None),
    "fp32_long_d128_tf32x3": ("attention_06_long_fp32.py", {"precision": "tf32x3"}, None),
    # the held-out check's head dim 161 (padded to 256) failed on an H100 with the tile of 128:
    # 458752 bytes of shared memory asked for, 232448 there; then on an H200 with 64 query rows
    # beside 16-wide key blocks it faulted: its tile is 32 rows by 32 keys, below a warpgroup's 64
    "fp32_long_d161_tf32x3": ("attention_06_long_fp32.py", {"precision": "tf32x3"}, 161),
}
SMEM_LIMIT = 232448  # an H100's (sm_90) shared memory per block, opted in
pytestmark = pytest.mark.timeout(300)


def compile_case(problem: Path, change: dict, workdir: Path, head_dim: int | None = None):
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
    dims = (head_dim, head_dim) if head_dim else (q.shape[-1], v.shape[-1])
    block_m, block_n, block_d, block_dv, stages = module.attention_tile(*dims)
    block = {"BLOCK_M": block_m, "BLOCK_N": block_n, "CAUSAL": node_attrs["causal"], "MASK": mask,
             "SAFE": node_attrs["safe"], "BLOCK_D": block_d, "BLOCK_DV": block_dv}
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
                            options={"num_warps": config["num_warps"], "num_stages": stages})
    return kernel, {**config, "BLOCK_M": block_m}


def _child(workdir: str) -> None:
    """Compile every case; print one JSON object: case -> {"ok", "precision", "wgmma", "error"}."""
    out = {}
    for case, (problem, change, head_dim) in CASES.items():
        try:
            kernel, config = compile_case(ROOT / "benchmarks" / "tensor_core" / problem, change, Path(workdir), head_dim)
            ptx = kernel.asm["ptx"]
            out[case] = {"ok": bool(kernel.asm.get("cubin")), "precision": config.get("precision"),
                         "wgmma": ptx.count("wgmma.mma_async"), "tf32": ptx.count(".tf32"),
                         "mma": ptx.count("mma.sync"), "shared": kernel.metadata.shared, "block_m": config["BLOCK_M"]}
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
    if result["block_m"] >= 64:  # a warpgroup's rows: both products on Hopper's wgmma
        assert result["wgmma"] >= 2, result
    else:  # fewer query rows (a wide head in float32): the products on mma.sync's tensor cores
        assert result["mma"] >= 2, result
    if result["precision"] == "tf32x3":  # float32 split into TF32 pieces: three products each
        assert result["tf32"] >= 3, result
    assert result["shared"] <= SMEM_LIMIT, result  # launchable on an H100


if __name__ == "__main__":
    _child(sys.argv[1])
