"""`ratchet batch` on the CPU: bundled suite problems (small shapes, Triton's interpreter), the
real CLI, scheduler, worker subprocesses, agent and workspaces, against a scripted model on the
loopback HTTP server (one script per problem). The batch is SIGKILLed mid-run and resumed."""
from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from agent.batch.driver import ExecutorScheduler, discover, pending, run_batch
from agent.batch.log import RunLog
from agent.batch.problem import crashed_row, make_spec, problem_key
from agent.cli import main
from agent.cost import format_usd
from agent.workspace.root import Workspace
from helpers_batch import SUITE, SuiteLoopback, candidate, quiet_batch_env
from loopback import hold, submit

ROOT = Path(__file__).resolve().parents[2]
A, B, C = "01_swish_scale", "05_row_sum_scale", "21_cross_entropy"
FILTER = "^(01_swish_scale|05_row_sum_scale|21_cross_entropy)$"


@pytest.fixture
def batch_env(monkeypatch):
    quiet_batch_env(monkeypatch)


def batch_args(server, tmp_path: Path, *extra: str) -> list[str]:
    # input and output at one price: a problem's dollars are its tokens * 2e-6, whatever the split
    return ["batch", str(SUITE), "--filter", FILTER, "--model", "scripted", "--base-url", server.url,
            "--max-attempts", "3", "--out", str(tmp_path / "run"), "--workspace", str(tmp_path / "ws"),
            "--price", "2,2", *extra]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.timeout(300)
def test_cpu_batch_killed_and_resumed(batch_env, tmp_path, capsys):
    wrong = candidate(A)  # swish for the cross-entropy problem: does not even fit its signature
    scripts = {
        A: [submit(candidate(A)), submit(candidate(A)), submit(candidate(A))],
        B: [hold(), submit("def forward(x:\n"), submit(candidate(B)), submit(candidate(B))],
        C: [submit(wrong), submit(candidate(C)), submit(candidate(C)), submit(candidate(C))],
    }
    run_dir = tmp_path / "run"
    results = run_dir / "results.jsonl"
    with SuiteLoopback(scripts, lifetime_s=280) as server:
        # 1. one CPU worker: A runs to its end, then B's first model call hangs; SIGKILL the batch there
        proc = subprocess.Popen([sys.executable, "-m", "agent.cli", *batch_args(server, tmp_path, "--cpu-workers", "1")],
                                cwd=tmp_path, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: server.held.is_set() or proc.poll() is not None, 200, "B's held model call")
            assert proc.poll() is None, proc.communicate()
            rows = RunLog(results).rows()
            log = run_dir / "logs" / f"{A}.log"
            assert [r["problem"] for r in rows] == [A] and rows[0]["status"] == "finished" and rows[0]["correct"], \
                (rows, log.read_text()[-3000:] if log.exists() else "")
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        requests_of_b = len(server.by_problem[B])
        server.release()
        time.sleep(3)  # B's worker saw its parent die and exited: it asks the model nothing more
        assert len(server.by_problem[B]) == requests_of_b == 1
        assert not server.by_problem[C]
        with open(results, "ab") as f:  # and a torn last line, as a crash mid-write would leave
            f.write(b'{"schema": 1, "problem": "05_row_sum')

        # 2. resume with two workers: A is skipped, B continues its run, C starts
        requests_of_a = len(server.by_problem[A])
        code = main(batch_args(server, tmp_path, "--cpu-workers", "2", "--resume"))
        out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["total"] == 3 and summary["done"] == 3 and summary["correct"] == 3
    assert len(server.by_problem[A]) == requests_of_a  # finished before: not run again
    assert "1 already done" in err and "[3/3]" in err and "ETA" in err
    lines = results.read_bytes().splitlines()
    assert all(json.loads(line) for line in lines)  # the torn line was cut off before appending
    latest = RunLog(results).latest()
    assert set(latest) == {A, B, C}
    for name in (A, B, C):
        row = latest[name]
        assert row["status"] == "finished" and row["verdict"] == "ok" and row["correct"], row
        assert row["timing_measured"] is False and row["speedup_vs_eager"] is None  # nothing timed on the CPU
        assert row["tokens"] > 0 and row["device_s"] > 0 and row["device"] == "cpu"
    assert latest[B]["resumed"] is True and latest[C]["resumed"] is False
    for name in (A, B, C):  # row schema 4: the run's dollars over every session (B's too), as its attempts say
        row = latest[name]
        assert row["schema"] == 5 and row["price"]["input"] == 2.0
        # schema 5: the seconds its evaluator judged, within the run's wall time (every session of it)
        # both seconds are rounded to 3 decimals and the share (of the unrounded ones) to 4: the share
        # lies between the ratios of the rounded seconds' extremes, not within a fixed distance of theirs
        judge_s, wall_s, half = row["judge_s"], row["agent_wall_s"], 0.0005
        assert 0 < judge_s <= wall_s
        assert (judge_s - half) / (wall_s + half) - 5e-5 <= row["judge_share"] <= (judge_s + half) / (wall_s - half) + 5e-5
        assert row["cost_usd"] == pytest.approx(row["tokens"] * 2e-6)
        with Workspace(tmp_path / "ws").open_existing(SUITE / f"{name}.py") as repo:
            attempts = repo.attempts()
        assert attempts[-1].run_cost_usd == pytest.approx(row["cost_usd"])
        assert sum(a.cost_usd for a in attempts) == pytest.approx(row["cost_usd"])
    # B's run continued in its workspace: one run, its attempts numbered on from where it stopped
    with Workspace(tmp_path / "ws").open_existing(SUITE / f"{B}.py") as repo:
        attempts = repo.attempts()
        assert {a.run_id for a in attempts} == {latest[B]["run_id"]}
        assert [a.verdict.value for a in attempts][-1] == "ok" and repo.best() is not None
    with Workspace(tmp_path / "ws").open_existing(SUITE / f"{C}.py") as repo:
        assert [a.verdict.value for a in repo.attempts()][:2] == ["compile_error", "ok"]
    assert (run_dir / "logs" / f"{B}.log").read_text().count("resuming run") == 1
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["problems"] == [A, B, C] and len(meta["sessions"]) == 2

    # 3. the report of this CPU run says "not measured", never a number
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert "geomean speedup vs torch.compile: not measured" in text and "3/3 (100.0%)" in text
    total = sum(latest[name]["cost_usd"] for name in (A, B, C))  # the latest row of each problem, once
    assert f"model cost:                       {format_usd(total)} over 3 problem(s) with a price" in text
    assert (run_dir / "report.html").is_file()

    # 4. a finished run resumed again runs nothing
    with SuiteLoopback({}) as server:
        assert main(batch_args(server, tmp_path, "--cpu-workers", "1", "--resume")) == 0
        assert not server.requests
    capsys.readouterr()


# --- the pieces, without processes ---------------------------------------------------------------


def test_discover_takes_kernelbench_names_in_natural_order(tmp_path):
    for name in ("10_Conv.py", "2_Relu.py", "1_Matmul.py", "__init__.py", "_helper.py", "notes.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    assert [p.name for p in discover(tmp_path)] == ["1_Matmul.py", "2_Relu.py", "10_Conv.py"]
    assert [p.name for p in discover(tmp_path, "Relu|Conv")] == ["2_Relu.py", "10_Conv.py"]
    assert len(discover(SUITE)) >= 24


def test_results_file_is_append_only_and_survives_a_torn_line(tmp_path):
    log = RunLog(tmp_path / "results.jsonl")
    assert log.rows() == []
    log.append({"problem": "a", "status": "model_error"})
    log.append({"problem": "b", "status": "finished"})
    with open(log.path, "ab") as f:
        f.write(b'{"problem": "c", "sta')
    assert [r["problem"] for r in log.rows()] == ["a", "b"]
    log.repair()
    log.append({"problem": "a", "status": "finished"})
    assert [json.loads(line)["problem"] for line in log.path.read_bytes().splitlines()] == ["a", "b", "a"]
    assert log.latest()["a"]["status"] == "finished"


def test_resume_retries_unfinished_statuses(tmp_path):
    problems = [tmp_path / f"{n}_p.py" for n in range(1, 6)]
    log = RunLog(tmp_path / "results.jsonl")
    for path, status in zip(problems, ("finished", "invalid_problem", "model_error", "crashed")):
        log.append({"problem": problem_key(path), "status": status})
    todo, done = pending(problems, log, resume=True)
    assert [p.name for p in todo] == ["3_p.py", "4_p.py", "5_p.py"] and done == 2
    assert pending(problems, log, resume=False) == (problems, 0)


def fake_problem(spec: dict) -> dict:
    """A stand-in for run_problem: module level, so any executor can run it."""
    if "boom" in spec["key"]:
        raise RuntimeError("worker died")
    time.sleep(0.05)
    return {"problem": spec["key"], "status": "finished", "verdict": "ok", "correct": True, "device": spec["device"],
            "timing_measured": True, "speedup_vs_eager": 2.0, "speedup_vs_compile": 1.5, "roofline_fraction": 0.5,
            "attempts": 1, "tokens": 10, "device_s": 0.05}


def test_any_executor_is_a_scheduler(tmp_path):
    """The driver needs only submit -> Future: a thread pool here, Dask's or Ray's executor on a cluster."""
    specs = [make_spec(tmp_path / f"{name}.py") for name in ("1_a", "2_b", "3_boom", "4_d")]
    log = RunLog(tmp_path / "results.jsonl")
    lines: list[str] = []
    scheduler = ExecutorScheduler(concurrent.futures.ThreadPoolExecutor(2), slots=2, device="cuda:0")
    rows = run_batch(specs, scheduler, log, total=4, write=lines.append, fn=fake_problem)
    assert sorted(r["problem"] for r in rows) == ["1_a", "2_b", "3_boom", "4_d"]
    latest = log.latest()
    assert latest["3_boom"]["status"] == "crashed" and "worker died" in latest["3_boom"]["error"]
    assert latest["1_a"]["device"] == "cuda:0"
    assert len(lines) == 4 and lines[-1].startswith("[4/4]") and "geomean" in lines[-1] and "ETA 0s" in lines[-1]
    assert crashed_row(specs[0], "x", 1.0)["verdict"] == "crashed"


def test_usage_errors(batch_env, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    base = ["--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--cpu-workers", "1"]
    assert main(["batch", str(empty), *base]) == 2
    assert "no problem files" in capsys.readouterr().err
    assert main(["batch", str(SUITE), *base, "--filter", "(", "--out", str(tmp_path / "r")]) == 2
    assert main(["batch", str(SUITE), *base, "--resume", "--out", str(tmp_path / "none")]) == 2
    assert "holds no batch run" in capsys.readouterr().err
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "results.jsonl").write_text("")
    assert main(["batch", str(SUITE), *base, "--out", str(tmp_path / "old")]) == 2
    assert "--resume" in capsys.readouterr().err
    # a model name with no endpoint is an error; with neither, the built-in policy runs (tests/builtin/test_builtin_e2e.py)
    assert main(["batch", str(SUITE), "--model", "m", "--cpu-workers", "1", "--out", str(tmp_path / "m")]) == 2
    assert "model 'm' (from command line) has no endpoint: pass --model NAME --base-url URL" in capsys.readouterr().err
    assert main(["batch", str(SUITE), *base, "--resume"]) == 2
    assert "--resume needs --out" in capsys.readouterr().err
    assert main(["batch", str(SUITE), *base, "--gpus", "0"]) == 2  # both --gpus and --cpu-workers
    if not torch.cuda.is_available():
        assert main(["batch", str(SUITE), *base[:4], "--gpus", "0", "--out", str(tmp_path / "g")]) == 2
        assert "--gpus 0: no CUDA GPU is available on this machine" in capsys.readouterr().err


def test_cpu_scale_only_for_a_suite_with_the_switch_and_no_scale_chosen(tmp_path):
    from agent.batch.scale import cpu_scale

    bundled = discover(SUITE)
    assert cpu_scale(bundled, {}) == {"SUITE_SCALE": "small"}
    assert cpu_scale(bundled, {"SUITE_SCALE": "full"}) == {}  # the user chose
    plain = tmp_path / "1_Relu.py"
    plain.write_text("import torch\n")
    assert cpu_scale([plain], {}) == {}  # a KernelBench folder runs as it is


def test_the_printed_resume_command_keeps_the_runs_filter(tmp_path):
    """Issue 37: after Ctrl-C in `batch suite --filter '^(03|05|09)_'`, the printed command dropped
    --filter and the resumed run grew to the whole suite. The command keeps it, and a --resume
    given without one takes the run's own (run.json's last session)."""
    from agent.cli.batch import _run_filter, resume_command

    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"suite": str(SUITE), "sessions": [{"filter": "^(03|05|09)_"}]}))
    command = resume_command(SUITE, out, _run_filter(out))
    assert command.endswith("--resume --filter '^(03|05|09)_'"), command
    assert _run_filter(tmp_path / "none") is None
