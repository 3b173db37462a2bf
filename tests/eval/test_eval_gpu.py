"""The evaluator on a CUDA GPU (`pytest -m gpu` on the GPU machine): CUDA C++ candidates built
with load_inline (good, failing to build, wrong; a second build of the same source is cached),
device faults (an illegal address, a kernel that never ends) each followed by an honest
candidate that passes, and a problem whose input is 4 GiB.
"""
from __future__ import annotations

import re
import time

import pytest

from helpers_eval import assert_ok, assert_verdict, describe, evaluator, source
from tools import Verdict

pytestmark = pytest.mark.gpu

DEVICE = "cuda:0"
TRIAL_TIMEOUT = 20.0


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ratchet-cache")


@pytest.fixture(scope="module")
def gpu(cache_dir):
    with evaluator("elementwise", cache_dir, device=DEVICE, trial_timeout=TRIAL_TIMEOUT, build_timeout=600.0) as ev:
        yield ev


def test_cuda_candidate_accepted_and_its_build_cached(gpu):
    first = gpu.evaluate(source("cuda_ok"))
    assert_ok(first)
    assert first.kernel_launches == 1  # calls into the extension are counted as launches
    assert first.torch_ops == []
    assert first.phases["cuda_build"] > 0  # nvcc ran in the build sandbox (no GPU, no candidate inputs)
    second = gpu.evaluate(source("cuda_ok"))  # a new worker, the same source: no second build
    assert_ok(second)
    print(f"cuda_build: first {first.phases['cuda_build']:.2f}s; second loaded in {second.phases['cuda_load']:.2f}s")
    assert "cuda_build" not in second.phases


def test_cuda_build_error_names_its_line(gpu):
    result = gpu.evaluate(source("cuda_build_error"))
    assert_verdict(result, Verdict.COMPILE_ERROR, "build", "CUDA build failed")
    assert re.search(r"\(\d+\): error", result.message), describe(result)  # nvcc's file(line): error
    assert len(result.message) < 2500  # trimmed to the first errors
    assert_ok(gpu.evaluate(source("cuda_ok")))


def test_cuda_off_by_one_is_incorrect(gpu):
    result = gpu.evaluate(source("cuda_off_by_one"))
    assert result.verdict is Verdict.INCORRECT, describe(result)
    assert "output at [4095] is NaN" in result.message, describe(result)  # at::empty_like is poisoned too


@pytest.mark.parametrize("candidate", ["cuda_illegal_address", "triton_oob"])
def test_illegal_address_then_an_honest_candidate(gpu, candidate):
    result = gpu.evaluate(source(candidate))
    assert result.verdict in (Verdict.RUNTIME_ERROR, Verdict.CRASHED), describe(result)
    print(f"{candidate}: {result.verdict.value}: {result.message.splitlines()[0]}")
    # a sticky CUDA error stays in the dead worker: the next candidate's worker is clean
    assert_ok(gpu.evaluate(source("elementwise_ok")))


def test_device_hang_then_an_honest_candidate(gpu):
    started = time.monotonic()
    result = gpu.evaluate(source("cuda_hang"))
    elapsed = time.monotonic() - started
    assert_verdict(result, Verdict.TIMEOUT, "worker", f"no answer within {TRIAL_TIMEOUT:.0f} s")
    assert elapsed < TRIAL_TIMEOUT + gpu.options.build_timeout
    assert_ok(gpu.evaluate(source("elementwise_ok")))


def test_inputs_after_forward_are_read_where_the_parent_wrote_them(gpu):
    """On a GPU the candidate's worker names its inputs after forward() without copying them; the
    parent reads them in the input arena it wrote, and still sees a kernel that wrote into them
    and an output that is an input."""
    assert_verdict(gpu.evaluate(source("writes_input")), Verdict.INCORRECT, "inputs-unchanged:values", "input[1]")
    assert_verdict(gpu.evaluate(source("output_alias")), Verdict.REJECTED, "output-alias", "shares memory with an input")


def test_reference_outputs_read_in_place(cache_dir):
    """Sets too large to keep are compared where the reference worker left them (no copy in the
    parent): honest accepted, wrong outputs and inputs written into still caught."""
    with evaluator("elementwise", cache_dir, device=DEVICE, trial_timeout=TRIAL_TIMEOUT, reference_cache_mb=0) as ev:
        assert_ok(ev.evaluate(source("elementwise_ok")))
        assert ev.reference.cache == {}
        wrong = ev.evaluate(source("elementwise_ok").replace("* scale", "* scale + 1.0"))
        assert wrong.verdict is Verdict.INCORRECT, describe(wrong)
        assert_verdict(ev.evaluate(source("writes_input")), Verdict.INCORRECT, "inputs-unchanged:values", "input[1]")


@pytest.mark.timeout(900)
def test_multi_gigabyte_input(cache_dir):
    """4 GiB in, 4 GiB out: inputs are generated on the device and outputs stay there (CUDA IPC),
    so five trials cost seconds; generating them on the host would cost minutes."""
    started = time.monotonic()
    with evaluator("big_elementwise", cache_dir, device=DEVICE, trial_timeout=120.0) as ev:
        setup = time.monotonic() - started
        assert ev.problem.input_bytes == 4 << 30
        result = ev.evaluate(source("big_elementwise_ok"))
    assert_ok(result)
    print(f"setup {setup:.1f}s; phases {result.phases}")
    # a loose ceiling, only to catch host-side input generation or host copies coming back
    assert result.phases["correctness"] < 180, result.phases


def test_an_arena_announced_in_a_reply_nobody_reads_is_mapped_all_the_same(gpu):
    """A reference reply whose values are not wanted (a float64 evaluation skipped, a header read for
    its samples) may announce new, larger memory; the next reply's tensors lie in it without a new
    announcement. Left to the callers, the parent read them through its older, smaller mapping, and
    at KernelBench's published size of level 1's 4D tensor-matrix product the evaluator failed to
    open ("tensor does not lie within the arena"). The reference takes every handle as it comes."""
    import torch

    ref, problem = gpu.reference, gpu.problem
    before = ref.proc.arena.numel() if ref.proc.arena is not None else 0
    n = before // problem.input_bytes + 8  # more sets than the arena the trials left holds: a new one is made
    cap = 2 * n * problem.input_bytes
    sets = [[None, seed, "problem"] for seed in range(n)]
    header, _ = ref.checked({"op": "inputs", "sets": sets, "arena_cap": cap}, TRIAL_TIMEOUT)  # its values unread
    assert "arena" not in header and ref.proc.arena.numel() >= n * problem.input_bytes > before  # mapped all the same
    header, payload = ref.checked({"op": "inputs", "sets": sets[1:], "arena_cap": cap}, TRIAL_TIMEOUT)
    rest = [[t.clone() for t in s] for s in ref.outputs(header, payload)]  # beyond the old arena's end
    header, payload = ref.checked({"op": "inputs", "sets": sets[-1:], "arena_cap": cap}, TRIAL_TIMEOUT)
    alone = ref.outputs(header, payload)[0]
    assert all(torch.equal(a, b) for a, b in zip(rest[-1], alone))
