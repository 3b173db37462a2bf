"""Calibration of the float64-judged accuracy bound (docs/precision.md): how far honest float32
kernels and precision downgrades land from a float64 evaluation, as multiples of eager float32's
own error on the same inputs.

For each case (matrix products at several reduction depths K, rows of softmax, layer norm and sums)
and input distribution, the reference is computed in float64 and in eager float32 (TF32 off);
every variant's error against float64 is printed as two ratios to eager's:
`norm` = ||c - r64|| / ||r32 - r64|| and `max` = max|c - r64| / max|r32 - r64|, with the bound's
verdict at the multiples the evaluator uses (tools/judge/exact.py). Honest variants reorder sums
(Triton IEEE dots with other tilings, 3xTF32, split-K with atomics, online softmax with exp2,
Welford); downgrades round products (TF32, fp16 and bf16 operands, cuBLAS with TF32 allowed).

    python benchmarks/precision_calibration.py [--json OUT] [--quick]

Needs a CUDA GPU (Triton's dots); --quick runs the smaller depths only.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.judge.exact import exact_errors, outside  # noqa: E402
from tools.options import Float64Bound  # noqa: E402


@triton.jit
def _mm(a, b, c, M, N, K, PREC: tl.constexpr, CAST: tl.constexpr, SPLIT: tl.constexpr,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn, ps = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    per = tl.cdiv(K, SPLIT)
    for k0 in range(ps * per, tl.minimum((ps + 1) * per, K), BK):
        rk = k0 + tl.arange(0, BK)
        x = tl.load(a + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        y = tl.load(b + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if CAST == 1:
            acc += tl.dot(x.to(tl.float16), y.to(tl.float16))
        elif CAST == 2:
            acc += tl.dot(x.to(tl.bfloat16), y.to(tl.bfloat16))
        elif PREC == 0:
            acc += tl.dot(x, y, input_precision="ieee")
        elif PREC == 1:
            acc += tl.dot(x, y, input_precision="tf32")
        else:
            acc += tl.dot(x, y, input_precision="tf32x3")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT == 1:
        tl.store(c + rm[:, None] * N + rn[None, :], acc, mask=mask)
    else:
        tl.atomic_add(c + rm[:, None] * N + rn[None, :], acc, mask=mask)


def triton_mm(a: torch.Tensor, b: torch.Tensor, prec: int = 0, cast: int = 0, split: int = 1,
              bk: int = 32) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.zeros(M, N, device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64), split)
    _mm[grid](a, b, c, M, N, K, PREC=prec, CAST=cast, SPLIT=split, BM=64, BN=64, BK=bk)
    return c


@triton.jit
def _softmax(x, y, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for k in range(0, N, BLOCK):
        offs = k + tl.arange(0, BLOCK)
        v = tl.load(x + row * N + offs, mask=offs < N, other=float("-inf"))
        nm = tl.maximum(m, v)
        s = s * tl.exp2((m - nm) * 1.4426950408889634) + tl.exp2((v - nm) * 1.4426950408889634)
        s = tl.where(nm == float("-inf"), 0.0, s)
        m = nm
    gm = tl.max(m, 0)
    total = tl.sum(s * tl.exp2((m - gm) * 1.4426950408889634), 0)
    for k in range(0, N, BLOCK):
        offs = k + tl.arange(0, BLOCK)
        v = tl.load(x + row * N + offs, mask=offs < N, other=float("-inf"))
        tl.store(y + row * N + offs, tl.exp2((v - gm) * 1.4426950408889634) / total, mask=offs < N)


@triton.jit
def _layernorm_welford(x, y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    mean = tl.zeros((BLOCK,), tl.float32)
    m2 = tl.zeros((BLOCK,), tl.float32)
    cnt = tl.zeros((BLOCK,), tl.float32)
    for k in range(0, N, BLOCK):
        offs = k + tl.arange(0, BLOCK)
        v = tl.load(x + row * N + offs, mask=offs < N, other=0.0)
        ok = offs < N
        c1 = cnt + ok.to(tl.float32)
        d = v - mean
        mean = tl.where(ok, mean + d / tl.maximum(c1, 1.0), mean)
        m2 = tl.where(ok, m2 + d * (v - mean), m2)
        cnt = c1
    # merge the lanes (Chan et al.)
    total = tl.sum(cnt, 0)
    gmean = tl.sum(mean * cnt, 0) / total
    gm2 = tl.sum(m2 + cnt * (mean - gmean) * (mean - gmean), 0)
    rstd = 1.0 / tl.sqrt(gm2 / total + eps)
    for k in range(0, N, BLOCK):
        offs = k + tl.arange(0, BLOCK)
        v = tl.load(x + row * N + offs, mask=offs < N, other=0.0)
        tl.store(y + row * N + offs, (v - gmean) * rstd, mask=offs < N)


@triton.jit
def _rowsum_atomic(x, y, N, BLOCK: tl.constexpr):
    row, part = tl.program_id(0).to(tl.int64), tl.program_id(1)
    offs = part * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + row * N + offs, mask=offs < N, other=0.0)
    tl.atomic_add(y + row, tl.sum(v, 0))


def make(dist: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    if dist == "randn":
        return torch.randn(shape, generator=gen, device="cuda")
    if dist == "rand":
        return torch.rand(shape, generator=gen, device="cuda")
    return torch.randn(shape, generator=gen, device="cuda") * 4 + 3  # shifted and scaled


def products(ks: list[int]) -> list[dict]:
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for k in ks:
        for dist in ("randn", "rand", "shifted"):
            a, b = make(dist, (1024, k), gen), make(dist, (k, 1024), gen)
            r64 = a.double() @ b.double()
            torch.backends.cuda.matmul.allow_tf32 = False
            r32 = a @ b
            variants = {
                "honest: cuBLAS, column-major operands": lambda: (a.t().contiguous().t() @ b.t().contiguous().t()),
                "honest: Triton IEEE BK32": lambda: triton_mm(a, b, 0),
                "honest: Triton IEEE BK64": lambda: triton_mm(a, b, 0, bk=64),
                "honest: Triton 3xTF32": lambda: triton_mm(a, b, 2),
                "honest: Triton IEEE split-K 8 (atomics)": lambda: triton_mm(a, b, 0, split=8),
                "honest: Triton 3xTF32 split-K 4": lambda: triton_mm(a, b, 2, split=4),
                "downgrade: Triton TF32": lambda: triton_mm(a, b, 1),
                "downgrade: Triton fp16 operands": lambda: triton_mm(a, b, cast=1),
                "downgrade: Triton bf16 operands": lambda: triton_mm(a, b, cast=2),
                "downgrade: cuBLAS TF32": None,
            }
            for name, fn in variants.items():
                if fn is None:
                    torch.backends.cuda.matmul.allow_tf32 = True
                    c = a @ b
                    torch.backends.cuda.matmul.allow_tf32 = False
                else:
                    c = fn()
                rows.append(_row(f"matmul K={k}", dist, name, c, r32, r64))
    return rows


def rowwise() -> list[dict]:
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(1)
    for n in (4096, 65536):
        for dist in ("randn", "rand", "shifted"):
            x = make(dist, (256, n), gen)
            x64 = x.double()
            r64, r32 = torch.softmax(x64, -1), torch.softmax(x, -1)
            y = torch.empty_like(x)
            _softmax[(256,)](x, y, n, BLOCK=1024)
            rows.append(_row(f"softmax N={n}", dist, "honest: online softmax, exp2", y, r32, r64))
            r64 = torch.nn.functional.layer_norm(x64, (n,), eps=1e-5)
            r32 = torch.nn.functional.layer_norm(x, (n,), eps=1e-5)
            _layernorm_welford[(256,)](x, y, n, 1e-5, BLOCK=1024)
            rows.append(_row(f"layernorm N={n}", dist, "honest: Welford", y, r32, r64))
            r64, r32 = x64.sum(-1), x.sum(-1)
            s = torch.zeros(256, device="cuda")
            _rowsum_atomic[(256, triton.cdiv(n, 1024))](x, s, n, BLOCK=1024)
            rows.append(_row(f"row sum N={n}", dist, "honest: block sums, atomics", s, r32, r64))
            rows.append(_row(f"row sum N={n}", dist, "honest: sequential fp32 (cumsum's last)", x.cumsum(-1)[:, -1].contiguous(), r32, r64))
    return rows


def _row(case: str, dist: str, variant: str, c: torch.Tensor, r32: torch.Tensor, r64: torch.Tensor) -> dict:
    e = exact_errors(r64, r32, c)
    verdict = outside(Float64Bound(), e)
    return {"case": case, "dist": dist, "variant": variant, "eager_norm_rel": e.eager_norm / max(e.ref_norm, 1e-300),
            "norm_ratio": e.cand_norm / max(e.eager_norm, 1e-300), "max_ratio": e.cand_max / max(e.eager_max, 1e-300),
            "accepted": verdict is None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("precision_calibration: needs a CUDA GPU", file=sys.stderr)
        return 2
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    rows = products([256, 1024] if args.quick else [256, 1024, 4096, 16384]) + rowwise()
    print(f"{'case':<18} {'dist':<8} {'variant':<42} {'eager rel':>10} {'norm x':>9} {'max x':>9}  verdict")
    for r in rows:
        flag = "accepted" if r["accepted"] else "REJECTED"
        wrong = r["accepted"] == r["variant"].startswith("downgrade")
        print(f"{r['case']:<18} {r['dist']:<8} {r['variant']:<42} {r['eager_norm_rel']:>10.2e} {r['norm_ratio']:>9.2f} "
              f"{r['max_ratio']:>9.2f}  {flag}{'  <-- wrong' if wrong else ''}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
