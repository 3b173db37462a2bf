"""get_ncu_profile's counters on a GPU (tools/counters/): Nsight Compute runs around a candidate's
worker inside the candidate's own sandbox, or not at all.

Where the driver lets only administrators read performance counters (RmProfilingAdminOnly: 1), the
unprivileged worker cannot, and the answer must say so rather than run ncu unconfined; elsewhere
the digest must show the candidate's own Triton kernel with its counters.

    python -m pytest -m gpu tests/eval/test_counters_gpu.py
"""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers_eval import source
from tools.counters.ncu import find_ncu
from tools.evaluate import EvalOptions, Evaluator

pytestmark = pytest.mark.gpu
PROBLEM = Path(__file__).parents[1] / "gpu_problems" / "elementwise_8m.py"


def admin_only() -> bool:
    params = Path("/proc/driver/nvidia/params")
    lines = params.read_text().splitlines() if params.exists() else []
    return any(line.replace(" ", "") == "RmProfilingAdminOnly:1" for line in lines)


@pytest.mark.skipif(find_ncu() is None, reason="Nsight Compute is not installed here")
def test_counters_of_a_triton_kernel_are_read_inside_the_sandbox_or_refused(tmp_path):
    options = EvalOptions(device="cuda:0", trial_timeout=60.0, cache_dir=tmp_path / "cache")
    with Evaluator(PROBLEM, options) as ev:
        counters = ev.counters(source("elementwise_ok"))
        print(counters.as_dict())
        again = ev.evaluate(source("elementwise_ok"))  # the evaluator goes on, its card untouched
    assert again.ok, again.message
    if admin_only():
        assert not counters.available and "ERR_NVGPUCTRPERM" in (counters.reason or ""), counters
        return
    assert counters.available, counters.reason
    own = [k for k in counters.kernels if k["own"]]
    assert own, counters.kernels
    kernel = own[0]
    assert kernel["calls"] >= 1 and kernel["time_us"] > 0
    # an elementwise kernel over 8M floats is bound by DRAM: its bandwidth share is the larger
    assert kernel["dram_pct"] > kernel["sm_pct"] > 0, kernel
    assert 0 < kernel["occupancy_pct"] <= 100 and kernel["registers"] > 0, kernel
    assert kernel["top_stalls"] and all(s["cycles_per_issue"] > 0 for s in kernel["top_stalls"]), kernel
