"""The convolution kernel (agent.builtin.conv) compiled for a Hopper GPU (sm_90) on a machine
without one, as tests/builtin/test_builtin_products_compile.py does for the product kernels: the kernel a
draft launches goes through Triton's real pipeline to a cubin - float32 with tf32x3 and with ieee
dots, and float16 with the native dot; a 3-d convolution, and a transposed one by stride phases and
by the plain gather. Nothing is launched."""
from __future__ import annotations

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
# case -> (problem, precision of the configuration or None, dtype the problem is cast to)
CASES = {
    "fp32_tf32x3": ("conv2d_bias_relu.py", "tf32x3", None),
    "fp32_ieee": ("conv2d_bias_relu.py", "ieee", None),
    "fp16": ("conv2d_bias_relu.py", None, "torch.float16"),
    "depthwise_direct": ("conv1d_depthwise.py", "ieee", None),
    "conv3d_tf32x3": ("conv3d_grouped_relu.py", "tf32x3", None),
    "transposed_phases_tf32x3": ("conv_transpose2d_sigmoid.py", "tf32x3", None),  # the stride-phase kernel
    "transposed_gather_ieee": ("conv_transpose2d_sigmoid.py", "ieee", None, False),  # the plain gather
}
pytestmark = pytest.mark.timeout(300)


def compile_case(problem: Path, precision: str | None, dtype: str | None, workdir: Path,
                 phases: bool | None = None):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from agent.builtin import codegen, search
    from agent.builtin.recognize import recognize

    if dtype is not None:  # the same problem with half inputs and weights
        text = problem.read_text().replace("return [torch.randn(batch_size, channels, height, width)]",
                                           f"return [torch.randn(batch_size, channels, height, width, dtype={dtype})]")
        text = text.replace("stride=2, padding=1)", f"stride=2, padding=1).to({dtype})")
        text = text.replace("torch.randn(out_channels, 1, 1)", f"torch.randn(out_channels, 1, 1, dtype={dtype})")
        problem = workdir / f"{problem.stem}_{dtype.split('.')[-1]}.py"
        problem.write_text(text)
    rec = recognize(problem)
    assert rec.plan is not None, rec.reason
    config = search.space(rec.plan)[0]  # a depthwise convolution's: the direct kernel
    if not config.get("direct"):
        config = next(c for c in search.space(rec.plan) if c.get("precision") == precision
                      and phases in (None, bool(c.get("phases"))))
    source = codegen.draft(rec.plan, rec.problem, config)
    path = workdir / f"{problem.stem}_{precision}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"compiled_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = module.conv_direct_kernel if config.get("direct") else \
        module.conv_phase_kernel if config.get("phases") else module.conv_igemm_kernel
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name == "tab_ptr":  # the stride phases' table
            signature[name] = "*i32"
        elif name.endswith("_ptr"):
            signature[name] = PTR[rec.plan.leaves[int(name[2:-4])].dtype] if name.startswith("in") else \
                PTR[rec.plan.out_dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name.startswith("scalar_"):
            signature[name] = "fp32"
        elif name in config:
            signature[name], constexprs[(i,)] = "constexpr", config[name]
        else:
            signature[name] = "i32"
    options = {k: config[k] for k in ("num_warps", "num_stages") if k in config}
    kernel = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                            target=GPUTarget("cuda", 90, 32), options=options)
    return kernel, source, config


def _child(workdir: str) -> None:
    """Compile every case; print one JSON object: case -> {"ok", "mma", "error"}."""
    out = {}
    for case, (problem, precision, dtype, *phases) in CASES.items():
        try:
            kernel, source, config = compile_case(PROBLEMS / problem, precision, dtype, Path(workdir), *phases)
            ptx = kernel.asm["ptx"]
            out[case] = {"ok": bool(kernel.asm.get("cubin")), "tensor_core": bool(re.search(r"\b(mma|wgmma)\b", ptx)),
                         "tf32": bool(re.search(r"\.tf32", ptx)),
                         "precision": re.findall(r'input_precision="(\w+)"', source), "direct": "direct" in config,
                         "phases": bool(config.get("phases"))}
        except Exception as exc:  # reported to the parent test, which fails with it
            out[case] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    print(json.dumps(out))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compiled_in_child(__file__, tmp_path_factory.mktemp("compiled_conv"))


@pytest.mark.parametrize("case", list(CASES))
def test_the_conv_kernel_compiles_for_sm90(case, compiled):
    result = compiled[case]
    if not result["ok"] and "ptxas" in result.get("error", "").lower() and "not found" in result["error"].lower():
        pytest.skip(f"no CUDA compiler toolchain: {result['error']}")
    assert result["ok"], result.get("error")
    precision = CASES[case][1]
    if case == "depthwise_direct":  # float32 FMAs, no dot
        assert result["direct"] and result["precision"] == [] and not result["tf32"]
        return
    assert result["precision"] == ([precision] if precision else [])
    assert result["phases"] == (case == "transposed_phases_tf32x3")
    if precision == "ieee":
        assert not result["tf32"]  # IEEE float32: no TF32 instruction at all
    else:
        assert result["tensor_core"]  # tf32x3 and float16 run on the tensor cores


if __name__ == "__main__":
    _child(sys.argv[1])
