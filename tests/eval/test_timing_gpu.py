"""Timing on a GPU: cheats that only show while timed are caught; honest timings repeat.

Run on the GPU machine: python -m pytest -m gpu tests/eval/test_timing_gpu.py
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tools.evaluate import EvalOptions, Evaluator
from tools.record import Verdict

pytestmark = pytest.mark.gpu
HERE = Path(__file__).parents[1] / "gpu_problems"

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


def launch(x):
    y = torch.empty_like(x)
    scale_add[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
'''

HONEST = KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return launch(x)
'''

SKIPS_WORK = KERNEL + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.last = None

    def forward(self, x):
        self.calls += 1
        if self.calls > 8 and self.last is not None:
            return self.last  # correct in the 5 trials, stale once timing starts
        self.last = launch(x)
        return self.last
'''

CACHES_BY_POINTER = KERNEL + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = (x.data_ptr(), x.shape)
        if key not in self.cache:
            self.cache[key] = launch(x)
        return self.cache[key]
'''

SIDE_STREAM = KERNEL + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream()

    def forward(self, x):
        self.stream.wait_stream(torch.cuda.current_stream())  # correct: it waits for its inputs
        with torch.cuda.stream(self.stream):
            return launch(x)  # but returns before the work is done, hoping the timer misses it
'''

PATCHES_TIMER = KERNEL + '''
torch.cuda.Event.elapsed_time = lambda self, end: 1e-6


class ModelNew(nn.Module):
    def forward(self, x):
        return launch(x)
'''

REBINDS_SYNC = KERNEL + '''
class ModelNew(nn.Module):
    def forward(self, x):
        torch.cuda.synchronize = lambda *a, **k: None
        return launch(x)
'''

TF32_MATMUL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        torch.backends.cuda.matmul.allow_tf32 = True

    def forward(self, a, b):
        c = a @ b
        out = torch.empty_like(c)
        copy_kernel[(triton.cdiv(c.numel(), 1024),)](c, out, c.numel(), BLOCK=1024)
        return out
'''


# one program walks the whole array: an honest kernel of a few milliseconds, far from the
# roofline (so only the parent's clock can tell a forged time from a real one)
SLOW = KERNEL + '''
@triton.jit
def one_program(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


def launch_slow(x):
    y = torch.empty_like(x)
    one_program[(1,)](x, y, x.numel(), BLOCK=1024)
    return y
'''

SLOW_HONEST = SLOW + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return launch_slow(x)
'''

# what native code owning the process can do: every time its worker reads is divided by 1.5
SLOW_FORGED = SLOW + '''
import sys


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        timing = sys.modules["tools.worker.timing"]
        real = timing._elapsed
        timing._elapsed = lambda a, b: real(a, b) / 1.5

    def forward(self, x):
        return launch_slow(x)
'''

# ... and it answers the back-to-back passes before its GPU work is done: no synchronization left
SLOW_EARLY = SLOW_FORGED.replace("timing._elapsed = lambda", "timing.synchronize = lambda device: None\n        timing._elapsed = lambda")
SCALE_ADD_4M = HERE / "scale_add_4m.py"

@pytest.fixture(scope="module")
def scale_add():
    with Evaluator(HERE / "scale_add.py", EvalOptions(device="cuda:0")) as ev:
        yield ev


def test_honest_kernel_is_timed_and_repeats_within_two_percent(scale_add):
    first, second = scale_add.evaluate(HONEST), scale_add.evaluate(HONEST)
    for r in (first, second):
        assert r.verdict is Verdict.OK, r.message
        assert r.candidate_time.measured and r.candidate_time.samples >= 30
        assert r.eager_time.measured and r.speedup_vs_eager is not None
        assert r.roofline.measured and 0 < r.roofline.achieved_fraction <= 1.2
    a, b = first.speedup_vs_eager, second.speedup_vs_eager
    assert abs(a - b) / min(a, b) < 0.02, (a, b)


def test_skipping_work_on_repeated_calls_is_caught_while_timed(scale_add):
    r = scale_add.evaluate(SKIPS_WORK)
    assert r.trials == 5  # it passed the correctness trials...
    assert r.verdict is Verdict.INCORRECT  # ...and failed when timed
    assert any(c.name == "timing:verified" and not c.passed for c in r.checks)


def test_caching_by_input_pointer_is_rejected_statically(scale_add):
    r = scale_add.evaluate(CACHES_BY_POINTER)
    assert r.verdict is Verdict.REJECTED and "guard:caching" in {c.name for c in r.checks}


def test_caching_by_input_pointer_is_caught_at_run_time_too():
    options = EvalOptions(device="cuda:0", disabled_rules=frozenset({"caching"}))
    with Evaluator(HERE / "scale_add.py", options) as ev:
        r = ev.evaluate(CACHES_BY_POINTER)
    assert r.verdict is Verdict.INCORRECT, r.message


def test_side_stream_is_rejected(scale_add):
    r = scale_add.evaluate(SIDE_STREAM)
    assert r.verdict is Verdict.REJECTED and "guard:streams-graphs" in {c.name for c in r.checks}


def test_side_stream_work_is_caught_by_the_timing_protocol():
    """With the static rule off, the work left running past the end event is seen and rejected,
    while the honest kernel passes the same check. (Side work short enough to finish inside
    the timer's 0.2 ms pre-roll instead reads as impossibly fast and fails the roofline.)"""
    options = EvalOptions(device="cuda:0", disabled_rules=frozenset({"streams-graphs"}))
    with Evaluator(HERE / "scale_add.py", options) as ev:
        honest, side = ev.evaluate(HONEST), ev.evaluate(SIDE_STREAM)
    assert honest.ok, honest.message
    assert any(c.name == "timing:one-stream" and c.passed for c in honest.checks)
    assert side.verdict is Verdict.REJECTED, side.message
    assert any(c.name == "timing:one-stream" and not c.passed for c in side.checks), side.message


def test_patching_the_timer_is_rejected(scale_add):
    r = scale_add.evaluate(PATCHES_TIMER)
    assert r.verdict is Verdict.REJECTED and "guard:patching" in {c.name for c in r.checks}


@pytest.mark.parametrize("source", [PATCHES_TIMER, REBINDS_SYNC], ids=["class-attribute", "module-attribute"])
def test_patching_the_timer_is_caught_at_run_time(source):
    options = EvalOptions(device="cuda:0", disabled_rules=frozenset({"patching", "dunder"}))
    with Evaluator(HERE / "scale_add.py", options) as ev:
        r = ev.evaluate(source)
    assert r.verdict is Verdict.REJECTED, r.message
    assert any(c.name.startswith("sandbox:patching") for c in r.checks), r.checks


def test_enabling_tf32_on_an_fp32_problem_is_rejected():
    with Evaluator(HERE / "matmul_fp32.py", EvalOptions(device="cuda:0")) as ev:
        static = ev.evaluate(TF32_MATMUL)
    assert static.verdict is Verdict.REJECTED and "guard:precision-flags" in {c.name for c in static.checks}
    options = EvalOptions(device="cuda:0", disabled_rules=frozenset({"precision-flags", "patching", "single-op"}))
    with Evaluator(HERE / "matmul_fp32.py", options) as ev:
        dynamic = ev.evaluate(TF32_MATMUL)
    assert dynamic.verdict is Verdict.REJECTED, dynamic.message
    assert any(c.name.startswith("sandbox:precision-flags") for c in dynamic.checks), dynamic.checks


CUDA_SOURCE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <torch/extension.h>
__global__ void scale_add_kernel(const float* x, float* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f + 1.0f;
}
torch::Tensor scale_add(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    scale_add_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline("scale_add_ext", cpp_sources="torch::Tensor scale_add(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["scale_add"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.scale_add(x)
'''


def test_cuda_build_runs_ahead_on_cpu_cores_and_is_reported_separately(tmp_path):
    """prebuild() compiles in a worker without the GPU while the GPU evaluates something else;
    evaluate() then waits for a fraction of the build (`prebuild` is the build's whole run,
    `cuda_build` what the evaluation waited)."""
    with Evaluator(HERE / "scale_add.py", EvalOptions(device="cuda:0", cache_dir=tmp_path)) as ev:  # cold cache
        assert ev.prebuild(CUDA_SOURCE)
        started = time.monotonic()
        assert ev.evaluate(HONEST).verdict is Verdict.OK  # the GPU's other work, meanwhile
        other = time.monotonic() - started
        r = ev.evaluate(CUDA_SOURCE)
    assert r.verdict is Verdict.OK, r.message
    assert r.phases["prebuild"] > 1.0  # nvcc ran there...
    # ...while the other evaluation ran: the wait is the build less what ran ahead (a cold nvcc
    # build can outlast the other evaluation: measured 53 s of build against 5 s of evaluation)
    assert r.phases["cuda_build"] <= r.phases["prebuild"] - 0.8 * other
    assert "cuda_load" in r.phases  # the GPU worker loaded what the build worker made


def test_a_forged_time_is_caught_by_the_parents_clock():
    """The candidate's worker reports every time divided by 1.5 (the static rule that would refuse
    its import is off: native code needs no import). Only the parent's clock stands in its way."""
    with Evaluator(SCALE_ADD_4M, EvalOptions(device="cuda:0", disabled_rules=frozenset({"import"}))) as ev:
        honest = ev.evaluate(SLOW_HONEST)
        forged = ev.evaluate(SLOW_FORGED)
    assert honest.verdict is Verdict.OK, honest.message
    assert any(c.name == "timing:two-clocks" and c.passed for c in honest.checks), honest.checks
    assert forged.verdict is Verdict.REJECTED, forged.message
    assert any(c.name == "timing:two-clocks" and not c.passed for c in forged.checks), forged.checks


def test_answering_before_the_work_is_done_gains_nothing():
    """Forged times, and a worker whose synchronizations are gone, so it answers while its kernels
    still run: the parent copies the outputs the moment the reply comes and stops its clock after
    that copy, so the work is either inside the clock or missing from the outputs checked."""
    with Evaluator(SCALE_ADD_4M, EvalOptions(device="cuda:0", disabled_rules=frozenset({"import"}))) as ev:
        early = ev.evaluate(SLOW_EARLY)
    assert "timing.synchronize = lambda device: None" in SLOW_EARLY
    assert early.verdict in (Verdict.REJECTED, Verdict.INCORRECT), early.message


# reads a timed block's later input sets from its input's storage (the block's sets lie one after
# another in the input arena), computes them all in the block's first call and answers the others
# from that work with a one-element kernel: every output right, the median of calls the pad's
AHEAD = KERNEL + '''

def later_inputs(x):
    """(data pointer, view) of each later input set lying after x in its storage (a block's or
    a pass's sets lie one after another, 256-byte aligned), up to nine."""
    n = x.numel()
    step = -(-n * x.element_size() // 256) * 256 // x.element_size()
    room = x.untyped_storage().nbytes() // x.element_size()
    for j in range(1, 10):
        start = x.storage_offset() + j * step
        if start + n > room:
            break
        yield x.data_ptr() + j * step * x.element_size(), x.as_strided((n,), (1,), start)
'''
READS_AHEAD = AHEAD + '''

@triton.jit
def touch(y_ptr):
    tl.store(y_ptr, tl.load(y_ptr))


class ModelNew(nn.Module):
    """Reads a timed block's later input sets from its input's storage, computes them all in
    the block's first call, and answers the rest from that work with a one-element kernel."""

    def __init__(self):
        super().__init__()
        self.ahead = {}

    def forward(self, x):
        done = self.ahead.pop(x.data_ptr(), None)
        if done is not None:
            touch[(1,)](done)
            return done
        out = launch(x)
        self.ahead = {ptr: launch(later) for ptr, later in later_inputs(x)}
        return out
'''


READS_AHEAD_CHECKED = AHEAD + '''

@triton.jit
def answer(x_ptr, y_ptr, key_ptr, n, BLOCK: tl.constexpr):
    """The read-ahead answer: nothing to do while the input still starts with the values the
    work was done for (a run-time check that changes the input in place finds it changed)."""
    first = tl.arange(0, 4)
    same = tl.sum((tl.load(x_ptr + first) == tl.load(key_ptr + first)).to(tl.int32), axis=0)
    if same != 4:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    """As READS_AHEAD, with each early result kept next to the first values of the input it was
    computed from, and checked against them on the GPU when it is used."""

    def __init__(self):
        super().__init__()
        self.ahead = {}

    def forward(self, x):
        done = self.ahead.pop(x.data_ptr(), None)
        if done is not None:
            y, key = done
            answer[(triton.cdiv(x.numel(), 1024),)](x, y, key, x.numel(), BLOCK=1024)
            return y
        out = launch(x)
        self.ahead = {ptr: (launch(later), later[:4].clone()) for ptr, later in later_inputs(x)}
        return out
'''


@pytest.mark.parametrize("attack", ["READS_AHEAD", "READS_AHEAD_CHECKED"])
def test_reading_a_timed_blocks_later_inputs_ahead_is_not_paid(attack):
    """The static rule against results keyed on data pointers (`caching`) is a first filter only,
    switched off here; the parent's gated clock sees the work wherever it was done. Reading ahead
    pads the candidate's one-call pass too (its first call does the pass's work): on an H200 the
    plain attack passed the gated clock with 0.05 ms of intercept allowance at k = 9, and was
    refused only by the roofline (2026-11-28); both are the gated clock's now."""
    with Evaluator(SCALE_ADD_4M, EvalOptions(device="cuda:0", disabled_rules=frozenset({"caching"}))) as ev:
        honest = ev.evaluate(HONEST)
        ahead = ev.evaluate(globals()[attack])
    assert honest.verdict is Verdict.OK, honest.message
    assert ahead.verdict is Verdict.REJECTED, (ahead.verdict, ahead.message)
    assert any(c.name == "timing:two-clocks" and not c.passed for c in ahead.checks), ahead.checks
