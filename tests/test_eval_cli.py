"""`ratchet eval`: one documented exit code per verdict class, the human summary, the --json
record, and one-line usage errors."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from agent.cli import main
from helpers_eval import CANDIDATES, PROBLEMS
from tools.record import EXIT_CODES, EXIT_USAGE, SCHEMA_VERSION, Verdict

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
    assert code == EXIT_CODES[verdict] == {"ok": 0, "incorrect": 1, "rejected": 4, "compile_error": 5,
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
    assert set(record["errors"]) == {"max_abs", "max_rel", "norm_rel"}
    for name in ("candidate_time", "eager_time", "compile_time"):
        assert record[name]["measured"] is False
    assert record["roofline"]["measured"] is False
    assert {"guard", "build", "correctness", "total"} <= set(record["phases"])
    assert record["source_hash"] == hashlib.sha256((CANDIDATES / "elementwise_ok.py").read_bytes()).hexdigest()
    assert {"torch", "triton"} <= set(record["environment"])
    assert record["kernel_launches"] == 1 and record["torch_ops"] == []


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
