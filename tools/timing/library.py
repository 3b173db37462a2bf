"""Whose kernels did the work: the share of GPU time in the candidate's own kernels, in library
kernels the reference itself does not use, and, in a single-op problem, in the library's own
kernels for that op (issue 35; the policy: docs/reward.md).

One forward of the candidate is profiled in its worker (tools/worker/profile.py: every kernel the
device ran, from Python, from C++ through ATen or cuBLAS, or from Triton) and one eager forward of
the reference in its own (once per evaluator). Library kernels are compared by family (GEMM,
convolution, attention, softmax, normalization, reduction, elementwise, copy: names vary with
shapes and layouts, the family does not), so a candidate that keeps the reference's own cuBLAS
product beside a fused epilogue is not flagged for the product's kernel variant.

- `library_share`: GPU time in library kernels of a family the reference's forward does not run
  (an attention written out in the problem replaced by a fused library attention, say). Over
  LIBRARY_SHARE, the record says `library: true`: the work is not the candidate's, and the reward
  pays it no speedup by default (tools/reward/score.py, `library`). The verdict is unaffected.
- A single-op problem: GPU time in library kernels of the reference's own families (the op itself,
  called from C++ past the op recorder) over SINGLE_OP_SHARE is rule `single-op`: rejected.

The profile is read in the candidate's process: native code there could forge it (the trust
model of docs/integrity.md); the op recorder and the guard's C++ list are the other lines.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tools.judge.verdict import Failure, passed, reply_failure
from tools.record import Verdict

if TYPE_CHECKING:
    from tools.judge.bench import Bench
    from tools.judge.evaluation import Evaluation

LIBRARY_SHARE = 0.5
SINGLE_OP_SHARE = 0.1
FAMILIES = (  # first match wins: (family, pattern over the lower-cased kernel name)
    ("attention", r"flash|fmha|attention|attn"),
    ("conv", r"conv|cudnn|implicit_?gemm|winograd|dgrad|wgrad"),
    ("gemm", r"gemm|xmma|cutlass|cublas|sm\d+_.*_(tn|nt|nn|tt)\b|splitk|matmul"),
    ("softmax", r"softmax"),
    ("norm", r"norm|welford"),
    ("reduce", r"reduce|reduction|argmax|argmin|cumsum|scan|sort"),
    ("copy", r"copy|memcpy|memset|fill|cat_|gather|scatter|index"),
    ("elementwise", r"elementwise|vectorized|unrolled"),
)


def family(name: str) -> str:
    low = name.lower()
    for fam, pattern in FAMILIES:
        if re.search(pattern, low):
            return fam
    return low


def reference_families(bench: "Bench") -> set[str]:
    """The kernel families of one eager forward of the reference (profiled once per bench)."""
    with bench.lock:
        if bench.reference_kernel_families is None:
            header, _ = bench.reference.checked({"op": "profile", "seed": bench.seeds[0]}, bench.options.trial_timeout)
            bench.reference_kernel_families = frozenset(family(n) for n, t in (header.get("kernels_us") or {}).items()
                                                        if t > 0)
        return set(bench.reference_kernel_families)


def own_kernel_share(bench: "Bench", evaluation: "Evaluation") -> Failure | None:
    """Step: own-kernel and library shares of GPU time in one profiled forward (see the module)."""
    if not bench.timed:
        return None
    assert evaluation.worker is not None and evaluation.scan is not None
    result = evaluation.result
    with evaluation.phase("profile"):
        trees, _ = bench.feed(evaluation.worker, [(None, bench.seeds[0], "problem")])
        names = [n for n in evaluation.scan.triton_kernels + evaluation.scan.cuda_kernels if n]
        header, _ = evaluation.worker.request({"op": "profile", "inputs": trees[0], "own": names}, bench.options.trial_timeout)
        if (failure := reply_failure(header, "profile")) is not None:
            return failure
        times = _times(header.get("kernels_us"))
        if times is None:
            return Failure(Verdict.REJECTED, "profile", "the worker's profile is not a map of kernel names to times",
                           "Rejected: the worker answered the profile request with malformed times.")
        total = sum(times.values())
        if not total:
            return None
        own = {n: t for n, t in times.items() if any(k in n for k in names)}
        library = {n: t for n, t in times.items() if n not in own}
        result.own_kernel_share = round(sum(own.values()) / total, 4)
        ref = reference_families(bench)
        if bench.problem.single_op is not None:
            op_kernels = {n: t for n, t in library.items() if family(n) in ref}
            share = sum(op_kernels.values()) / total
            if share > SINGLE_OP_SHARE:
                top = max(op_kernels, key=lambda n: op_kernels[n])
                detail = (f"{share:.0%} of GPU time in the library's own kernels for {bench.problem.single_op} "
                          f"(the reference's; largest: {top[:120]})")
                return Failure(Verdict.REJECTED, "single-op", detail,
                               f"Rejected (rule single-op): this problem is the single op {bench.problem.single_op}, "
                               f"and {detail}, launched where the op recorder does not see it; compute it in your kernel.")
            return None
        new = {n: t for n, t in library.items() if family(n) not in ref}
        result.library_share = round(sum(new.values()) / total, 4)
        result.library = result.library_share > LIBRARY_SHARE
        if result.library:
            top = max(new, key=lambda n: new[n])
            passed(result, "library", f"{result.library_share:.0%} of GPU time in library kernels the reference does "
                                      f"not use (largest: {top[:120]}): the reward pays it no speedup by default")
        return None


def _times(value: Any) -> dict[str, float] | None:
    if not isinstance(value, dict):
        return None
    out: dict[str, float] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, (int, float)) or isinstance(v, bool) or not (0 <= v < 1e12):
            return None
        out[k] = float(v)
    return out
