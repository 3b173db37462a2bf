"""A warm pool (tools/processes/warm.py): workers started before their problem is known serve the next
problem's evaluator, give the same verdicts as fresh ones, never carry anything from one problem
to the next, and leave nothing behind when the pool closes."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers_eval import PROBLEMS, assert_ok, options, source
from helpers_ray import alive
from tools import Evaluator, Verdict
from tools.processes.warm import WarmPool

# tests/problems/elementwise.py with its size read from the environment when the file is imported
WIDTH_PROBLEM = (PROBLEMS / "elementwise.py").read_text().replace(
    "import torch\n", "import os\n\nimport torch\n\nN = int(os.environ.get('WARM_TEST_N', '4096'))\n", 1
).replace("torch.randn(4096)", "torch.randn(N)")
assert WIDTH_PROBLEM.count("torch.randn(N)") == 2


def _stocked(pool: WarmPool) -> list[int]:
    """Pids of the workers the pool holds now."""
    held = ([pool._reference] if pool._reference else []) + list(pool._candidates)
    return [proc.pid for proc in held]


def test_the_next_problems_evaluator_takes_the_workers_started_ahead(tmp_path: Path) -> None:
    opts = options(tmp_path / "cache", spares=1)
    seen: list[int] = []
    with WarmPool(opts) as pool:
        reference_ahead = pool._reference.pid
        with Evaluator(PROBLEMS / "elementwise.py", opts, pool=pool) as ev:
            assert ev.reference.proc.pid == reference_ahead  # the pool's, loaded with this problem
            assert pool._reference is not None and pool._reference.pid != reference_ahead  # the next one started
            assert_ok(ev.evaluate(source("elementwise_ok")))
            spare = ev._spares[0].pid
            seen += [ev.reference.proc.pid, spare]
        assert spare in _stocked(pool)  # never handed a candidate: kept for the next problem
        assert not alive(reference_ahead)  # a reference worker ends with its problem
        second_reference = pool._reference.pid
        with Evaluator(PROBLEMS / "row_softmax.py", opts, pool=pool) as ev:
            assert ev.reference.proc.pid == second_reference
            assert spare not in _stocked(pool)
            assert_ok(ev.evaluate(source("row_softmax_ok")))
            assert ev.evaluate(source("syntax_error")).verdict is Verdict.COMPILE_ERROR
            assert ev.evaluate(source("elementwise_ok")).verdict is not Verdict.OK  # the other problem's kernel
            seen += [ev.reference.proc.pid]
        assert pool.taken == {"reference": 2, "candidate": 1}
        seen += _stocked(pool)
        root = pool.spawner.root
        assert root.is_dir()
    assert not any(alive(pid) for pid in seen)
    assert not root.exists()


def test_a_worker_started_under_another_environment_is_not_used(tmp_path: Path, monkeypatch) -> None:
    """What a problem reads from the environment is what it reads when its evaluator opens, not
    when its worker was started."""
    problem = tmp_path / "width.py"
    problem.write_text(WIDTH_PROBLEM)
    opts = options(tmp_path / "cache", spares=1)
    monkeypatch.setenv("WARM_TEST_N", "4096")
    with WarmPool(opts) as pool:
        with Evaluator(problem, opts, pool=pool) as ev:
            assert ev.problem.inputs[0]["shape"] == [4096]
        stale = _stocked(pool)
        assert len(stale) == 2  # the next reference, and the unused spare
        monkeypatch.setenv("WARM_TEST_N", "300")
        with Evaluator(problem, opts, pool=pool) as ev:
            assert ev.problem.inputs[0]["shape"] == [300]
            assert ev.reference.proc.pid not in stale and ev._spares[0].pid not in stale
            assert_ok(ev.evaluate(source("elementwise_ok")))
        assert pool.taken == {"reference": 1, "candidate": 0}
        assert not any(alive(pid) for pid in stale)


def test_a_reference_worker_loads_one_problem_only(tmp_path: Path) -> None:
    with WarmPool(options(tmp_path / "cache")) as pool:
        proc = pool.take_reference()
        try:
            assert proc.wait_ready(120)["op"] == "ready"
            first = {"op": "load", "problem": str(PROBLEMS / "elementwise.py"), "entry": "Model"}
            assert proc.request(first, 60)[0]["op"] == "loaded"
            again = proc.request({**first, "problem": str(PROBLEMS / "row_softmax.py")}, 60)[0]
            assert again["op"] == "error" and "already holds elementwise.py" in again["message"]
        finally:
            proc.close()


def test_a_problem_that_does_not_load_is_a_problem_error_and_the_pool_goes_on(tmp_path: Path) -> None:
    from tools import ProblemError

    broken = tmp_path / "broken.py"
    broken.write_text(WIDTH_PROBLEM + "\nraise RuntimeError('no such dataset')\n")
    opts = options(tmp_path / "cache")
    with WarmPool(opts) as pool:
        with pytest.raises(ProblemError, match="broken.py: .*no such dataset"):
            Evaluator(broken, opts, pool=pool)
        with Evaluator(PROBLEMS / "elementwise.py", opts, pool=pool) as ev:
            assert_ok(ev.evaluate(source("elementwise_ok")))


def test_an_evaluator_with_other_worker_options_is_refused(tmp_path: Path) -> None:
    with WarmPool(options(tmp_path / "cache")) as pool:
        with pytest.raises(ValueError, match="scratch_mb"):
            Evaluator(PROBLEMS / "elementwise.py", options(tmp_path / "cache", scratch_mb=64), pool=pool)
        assert pool._reference is not None and pool.taken["reference"] == 0  # nothing was taken


def test_a_worker_still_starting_is_killed_at_close_and_a_started_one_is_asked_to_exit(tmp_path: Path) -> None:
    """close() asks a worker that answered its start to exit (it may hold something), and kills one
    still starting at once rather than waiting for it to start only to be told to go."""
    import signal

    with WarmPool(options(tmp_path / "cache"), start=False) as pool:
        starting = pool.spawner.spawn("candidate")
        starting.close()
        assert starting.proc.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)
        started = pool.spawner.spawn("candidate")
        assert started.wait_ready(120)["op"] == "ready"
        started.close()
        assert started.proc.returncode == 0


def test_a_result_says_how_long_its_worker_took_to_start(tmp_path: Path) -> None:
    """The worker's start-up steps come back as phases (`boot`, then `boot_<step>`), beside what the
    evaluation waited for it (`start`): where a batch slot's seconds go, without a profiler."""
    with Evaluator(PROBLEMS / "elementwise.py", options(tmp_path / "cache")) as ev:
        phases = ev.evaluate(source("elementwise_ok")).phases
    steps = {k: v for k, v in phases.items() if k.startswith("boot_")}
    assert set(steps) == {f"boot_{s}" for s in ("main", "confined", "torch", "dynamo", "context", "triton", "ready")}
    assert all(v >= 0 for v in steps.values())
    assert sum(steps.values()) == pytest.approx(phases["boot"], abs=1e-3)
    assert steps["boot_torch"] < 0.05  # torch came with the fork: its zygote imported it (tools/zygote/)
    assert phases["start"] <= phases["boot"] + 0.5  # it waited at most for the rest of the start
