"""Every fault class is contained: the candidate gets its named verdict within its time limit,
and an honest candidate evaluated next by the same Evaluator (same reference worker, a fresh
candidate worker) passes.
"""
from __future__ import annotations

import time

import pytest

from helpers_eval import assert_ok, assert_verdict, evaluator, line_of, source
from tools import Verdict

TRIAL_TIMEOUT = 10.0


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ratchet-cache")


@pytest.fixture(scope="module")
def strict(cache_dir):
    with evaluator("elementwise", cache_dir, trial_timeout=TRIAL_TIMEOUT) as ev:
        yield ev


@pytest.fixture(scope="module")
def lenient(cache_dir):
    """Guard rules off so a fault reaches the worker: import (faulthandler, sys), exit, os._exit."""
    rules = frozenset({"import", "exit", "threads-processes"})
    with evaluator("elementwise", cache_dir, trial_timeout=TRIAL_TIMEOUT, disabled_rules=rules) as ev:
        yield ev


FAULTS = [  # (evaluator, candidate, verdict, failed check, fragments of the message)
    ("lenient", "segfault", Verdict.CRASHED, "worker", ["segmentation fault"]),
    ("strict", "triton_oob", Verdict.CRASHED, "worker", ["segmentation fault"]),  # a far store, interpreted on the host
    ("strict", "hang", Verdict.TIMEOUT, "worker", [f"no answer within {TRIAL_TIMEOUT:.0f} s", "killed"]),
    ("lenient", "sys_exit", Verdict.CRASHED, "trial-0:problem", ["sys.exit(3)"]),
    ("strict", "raise_system_exit", Verdict.CRASHED, "trial-0:problem", ["sys.exit(3)"]),
    ("lenient", "os_exit", Verdict.CRASHED, "worker", ["exited with status 0"]),
    ("lenient", "forged_channel", Verdict.REJECTED, "worker", ["forged output"]),
    ("strict", "raises", Verdict.RUNTIME_ERROR, "trial-0:problem", ["IndexError", f"line {line_of('raises', 'x.shape[3]')}, in forward"]),
    ("strict", "triton_compile_error", Verdict.COMPILE_ERROR, "trial-0:problem",
     ["Triton compilation failed", "power of 2", f"line {line_of('triton_compile_error', 'tl.arange(0, 1000)')}, in bad_kernel"]),
    ("strict", "syntax_error", Verdict.COMPILE_ERROR, "parse", ["SyntaxError at line 6"]),
    ("strict", "no_modelnew", Verdict.COMPILE_ERROR, "parse", ["no class ModelNew"]),
    ("strict", "ctor_mismatch", Verdict.COMPILE_ERROR, "build", ["ModelNew(*get_init_inputs()) does not fit its constructor"]),
]


@pytest.mark.parametrize("which,candidate,verdict,check,fragments", FAULTS, ids=[f[1] for f in FAULTS])
def test_fault_is_contained(request, which, candidate, verdict, check, fragments):
    ev = request.getfixturevalue(which)
    started = time.monotonic()
    result = ev.evaluate(source(candidate))
    elapsed = time.monotonic() - started
    assert_verdict(result, verdict, check, *fragments)
    assert elapsed < TRIAL_TIMEOUT + ev.options.start_timeout  # within its limit, not the suite's
    if verdict is Verdict.TIMEOUT:
        assert TRIAL_TIMEOUT <= elapsed < TRIAL_TIMEOUT + 20
    assert_ok(ev.evaluate(source("elementwise_ok")))  # the next evaluation runs normally


def test_host_out_of_memory(cache_dir):
    """A limit on the worker's address space: torch and Triton start under 3000 MB, the
    candidate's hoarding hits it, and the next candidate gets the same limit and passes."""
    with evaluator("elementwise", cache_dir, host_memory_mb=3000, trial_timeout=60.0) as ev:
        result = ev.evaluate(source("host_oom"))
        assert_verdict(result, Verdict.RUNTIME_ERROR, "trial-0:problem", "can't allocate memory")
        assert_ok(ev.evaluate(source("elementwise_ok")))


def test_output_flood_is_capped(cache_dir):
    """Every file a worker writes, its output log included, is capped (RLIMIT_FSIZE; Python
    ignores SIGXFSZ, so the write fails): a candidate printing 64 MB per call stops at the cap
    with "File too large" instead of filling the disk, and the next candidate passes."""
    with evaluator("elementwise", cache_dir, file_mb=1) as ev:
        result = ev.evaluate(source("floods_output"))
        assert_verdict(result, Verdict.RUNTIME_ERROR, "trial-0:problem", "File too large", "capped at 1 MiB")
        logs = list(ev.root.glob("candidate-*/output.log"))
        assert logs and max(log.stat().st_size for log in logs) <= 1 << 20
        assert_ok(ev.evaluate(source("elementwise_ok")))


def test_a_stall_in_every_call_meets_the_evaluations_deadline(tmp_path):
    """Each forward() stalls 2 s (time.sleep: the guard's import rule off), under the 3 s trial timeout: five trials and the held-out ones
    would take over 14 s. The whole evaluation's deadline (the candidate's 5 s of replies in all,
    tools/processes/allowance.py) ends it as `timeout`, its worker's processes gone, and the
    evaluator serves the next candidate."""
    from helpers_escape import survivors

    before = {p["pid"] for p in survivors("stall_each_call")}  # other open evaluators' (module fixtures)
    with evaluator("elementwise", tmp_path, trial_timeout=3.0, deadline_s=5.0, disabled_rules=frozenset({"import"})) as ev:
        started = time.monotonic()
        result = ev.evaluate(source("stall_each_call"))
        elapsed = time.monotonic() - started
        assert_verdict(result, Verdict.TIMEOUT, "deadline", "deadline passed", "5 s")
        assert elapsed < 5.0 + 10.0, elapsed  # the deadline, plus the build's JIT and the parent's own work
        assert result.trials < 5
        assert_ok(ev.evaluate(source("elementwise_ok")))
    deadline = time.monotonic() + 15
    while (left := [p for p in survivors("stall_each_call") if p["pid"] not in before]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []


@pytest.mark.parametrize("overrides", [{}, {"float64_max_mb": 0}], ids=["whole-float64", "sampled-rows"])
def test_the_evaluators_own_work_succeeds_with_no_candidate(tmp_path, overrides):
    """What decides whether a fault is the candidate's (rule resource): with no candidate running,
    the evaluator's side (a fresh reference trial at every size, its float64 evaluation or rows of
    it) succeeds, so a fault that does not reproduce here is charged to the candidate."""
    from tools.selfcheck import without_candidate

    with evaluator("deep_matmul", tmp_path, **overrides) as ev:
        assert ev.bench.exact is not bool(overrides) and ev.bench.exact_sampled is bool(overrides)
        assert without_candidate(ev.bench) is None


@pytest.mark.parametrize("terms", [900, 4000])
def test_a_source_too_deeply_nested_to_read_is_rejected_never_an_error(tmp_path, terms):
    """An attacker helper (stop 45) appended `0 + 0 + ...` to a kernel: the guard's recursive walk
    (900 terms) or Python's parser itself (4000) ran out of recursion, and the evaluation was an
    evaluator `error`, a masked reward, for any candidate. It is the candidate's: rejected."""
    from tools.reward.score import score_record

    text = source("elementwise_ok") + "\n\ndef _unused():\n    return " + " + ".join(["0"] * terms) + "\n"
    with evaluator("elementwise", tmp_path) as ev:
        result = ev.evaluate(text)
    assert_verdict(result, Verdict.REJECTED, "guard:unreadable", "could not be read")
    assert score_record(result).reward == 0.0 and not score_record(result).evaluator_fault


def test_a_source_too_large_for_the_worker_is_a_compile_error_saying_so(strict):
    """An attacker's find: an honest kernel padded with ~100 MB of comments was `crashed` (the worker
    died reading a frame past its limit); it is refused at once, with the size and the limit."""
    from tools.judge.static import MAX_CANDIDATE_CHARS

    padded = source("elementwise_ok") + "#" * (MAX_CANDIDATE_CHARS + 1) + "\n"
    assert_verdict(strict.evaluate(padded), Verdict.COMPILE_ERROR, "parse", f"at most {MAX_CANDIDATE_CHARS}")
    assert_ok(strict.evaluate(source("elementwise_ok") + "#" * 100_000 + "\n"))  # a long comment under it is fine
