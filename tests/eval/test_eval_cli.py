"""`ratchet eval`: one documented exit code per verdict class, the human summary, the --json
record, and one-line usage errors."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from agent.cli import main
from helpers_eval import CANDIDATES, PROBLEMS
from agent.cli.exit_codes import EVAL_EXIT_CODES, EXIT_INTERNAL, EXIT_USAGE
from tools.record import SCHEMA_VERSION, Verdict

REPO = PROBLEMS.parents[1]
ELEMENTWISE = str(PROBLEMS / "elementwise.py")


def cli(*args: str) -> list[str]:
    return ["eval", *args, "--device", "cpu", "--no-timing"]


CODES = [  # (candidate, extra arguments, verdict)
    ("elementwise_ok", [], Verdict.OK),
    ("wrong_dtype", [], Verdict.INCORRECT),
    ("pure_torch", [], Verdict.REJECTED),
    ("syntax_error", [], Verdict.COMPILE_ERROR),
    ("raises", [], Verdict.RUNTIME_ERROR),
    ("hang", ["--timeout", "5"], Verdict.TIMEOUT),
    ("sys_exit", ["--allow", "exit"], Verdict.CRASHED),  # --allow switches a guard rule off
]


@pytest.mark.parametrize("candidate,extra,verdict", CODES, ids=[v.value for _, _, v in CODES])
def test_exit_code_per_verdict(capsys, candidate, extra, verdict):
    code = main(cli(ELEMENTWISE, str(CANDIDATES / f"{candidate}.py"), "--trials", "5", *extra))
    out, _ = capsys.readouterr()
    assert code == EVAL_EXIT_CODES[verdict] == {"ok": 0, "incorrect": 1, "rejected": 4, "compile_error": 5,
                                           "runtime_error": 6, "timeout": 7, "crashed": 8}[verdict.value]
    assert out.splitlines()[0] == f"{candidate}.py: {verdict.value}"
    if verdict is Verdict.OK:
        assert "trials passed: 5" in out and "timing: not measured" in out


def test_json_record():
    """The real command, as a process: stdout is exactly one JSON record with the design's fields."""
    proc = subprocess.run([sys.executable, "-m", "agent.cli", *cli(ELEMENTWISE, str(CANDIDATES / "elementwise_ok.py"), "--json")],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["schema_version"] == SCHEMA_VERSION
    assert record["verdict"] == "ok" and record["message"].startswith("Correct on 5 trials")
    assert record["trials"] == 5
    checks = {c["name"]: c["passed"] for c in record["checks"]}
    assert checks["guard"] and checks["build"] and checks["kernel-launched"]
    assert set(record["errors"]) == {"max_abs", "max_rel", "norm_rel", "float64", "float64_norm_ratio", "float64_max_ratio"}
    assert record["errors"]["float64"].startswith("judged (")
    for name in ("candidate_time", "eager_time", "compile_time"):
        assert record[name]["measured"] is False
    assert record["roofline"]["measured"] is False
    assert {"guard", "build", "correctness", "total"} <= set(record["phases"])
    assert record["source_hash"] == hashlib.sha256((CANDIDATES / "elementwise_ok.py").read_bytes()).hexdigest()
    assert {"torch", "triton"} <= set(record["environment"])
    assert record["kernel_launches"] == 1 and record["torch_ops"] == []


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_an_evaluator_fault_is_one_line_and_exit_9(tmp_path, as_json):
    """An evaluator that cannot start for a reason of ours (here its cache directory is a file, so
    it cannot make the directories its workers write to): no traceback, one line on stderr, exit
    9; with --json a minimal record with verdict error on stdout."""
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the evaluator's cache directory should be")
    env = {**os.environ, "RATCHET_CACHE_DIR": str(blocked)}
    args = cli(ELEMENTWISE, str(CANDIDATES / "elementwise_ok.py")) + (["--json"] if as_json else [])
    proc = subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == EXIT_INTERNAL == EVAL_EXIT_CODES[Verdict.ERROR] == 9
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("ratchet eval: internal error: NotADirectoryError: ")
    if not as_json:
        assert proc.stdout == ""
        return
    record = json.loads(proc.stdout)
    assert record["verdict"] == "error" and record["schema_version"] == SCHEMA_VERSION
    assert "NotADirectoryError" in record["message"] and "nothing about the candidate" in record["message"]
    assert record["source_hash"] == hashlib.sha256((CANDIDATES / "elementwise_ok.py").read_bytes()).hexdigest()


def test_bad_problem_as_a_process():
    proc = subprocess.run([sys.executable, "-m", "agent.cli", *cli(str(PROBLEMS / "bad" / "get_inputs_not_list.py"),
                                                                     str(CANDIDATES / "elementwise_ok.py"))],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == ["ratchet eval: get_inputs_not_list.py: InputError: get_inputs() returned dict, expected a list"]


@pytest.mark.parametrize("args,fragment", [
    (cli(ELEMENTWISE, str(CANDIDATES / "no_such_candidate.py")), "no_such_candidate.py: cannot read the candidate"),
    (cli(ELEMENTWISE, str(CANDIDATES / "elementwise_ok.py"), "--trials", "0"), "--trials must be at least 1"),
    (["eval", ELEMENTWISE, str(CANDIDATES / "elementwise_ok.py"), "--device", "tpu"], "tpu"),
], ids=["missing-candidate", "trials-0", "bad-device"])
def test_usage_errors(capsys, args, fragment):
    assert main(args) == EXIT_USAGE == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("ratchet eval: ") and fragment in err


def test_baseline_before_any_candidate_says_what_it_knows_on_the_cpu():
    """On the CPU nothing is timed: the baseline gives the least bytes and flops, not times."""
    from tools.evaluate import EvalOptions, Evaluator

    with Evaluator(PROBLEMS / "matmul.py", EvalOptions(device="cpu", warm=False, spares=0)) as ev:
        base = ev.baseline()
        info = ev.problem
    assert base["measured"] is False and base["eager_ms"] is None and base["floor_ms"] is None
    assert base["bytes_moved"] == info.input_bytes + info.output_bytes + info.param_bytes > 0
    assert base["flops"] == info.flops > 0  # a matrix product: torch's flop counter sees it


@pytest.mark.parametrize("candidate,verdict", [("no_modelnew", Verdict.COMPILE_ERROR), ("syntax_error", Verdict.COMPILE_ERROR),
                                               ("pure_torch", Verdict.REJECTED), ("cheat_subprocess", Verdict.REJECTED)])
def test_a_file_refused_statically_is_answered_before_any_worker_starts(tmp_path, capsys, candidate, verdict):
    """No class ModelNew, a syntax error, or a file the static guard refuses: the verdict of the
    static checks, and the reference's file is never run (its import would leave a mark)."""
    mark = tmp_path / "reference-ran"
    problem = tmp_path / "marked.py"
    problem.write_text(f"import pathlib\npathlib.Path({str(mark)!r}).write_text('ran')\n"
                       + (PROBLEMS / "elementwise.py").read_text())
    code = main(cli(str(problem), str(CANDIDATES / f"{candidate}.py"), "--json"))
    out, _ = capsys.readouterr()
    record = json.loads(out)
    assert code == EVAL_EXIT_CODES[verdict]
    assert record["verdict"] == verdict.value and "start" not in record["phases"]
    if verdict is Verdict.REJECTED:
        assert any(c["name"].startswith("guard:") and not c["passed"] for c in record["checks"])
    assert not mark.exists()
