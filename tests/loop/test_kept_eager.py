"""Kept eager (issue 15, item 3): when the best kernel is not faster than eager PyTorch beyond
noise, `ratchet best` says so with its own exit code (or writes the reference as ModelNew on
request), the end of a run says "no kernel faster than PyTorch", and `ratchet report` counts the
problem as 1.0x against eager. Faster and untimed bests are unchanged. Real workspaces, records
built as the evaluator builds them (tools.record.Result), no GPU."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from agent.cli import main
from agent.cli.optimize import report as run_report
from agent.loop.kept_eager import reference_as_model_new
from agent.loop.nodes import attempt_summary
from agent.batch.report import headline, load_run
from agent.batch.report_page import render_html
from agent.loop.runner import RunResult, run_summary
from agent.workspace.root import Workspace
from agent.workspace.attempt import Attempt, beats_eager
from helpers_workspace import timed, untimed, write_problem
from helpers_workspace_checks import SRC, commit
from helpers_batch import row, write_run
from agent.cli.exit_codes import EXIT_KEPT_EAGER, EXIT_OK, EXIT_USAGE
from tools.record import Result, TimeStats, Verdict

EAGER = TimeStats(measured=True, median_ms=1.0, ci_low_ms=0.99, ci_high_ms=1.01, samples=30, note="")


def _with_eager(result: Result, eager: TimeStats = EAGER) -> Result:
    """`result` with eager PyTorch timed at 1.0 ms (helpers_workspace.timed's speedups assume 1.0 ms)."""
    result.eager_time = eager
    return result


def _att(median: float | None, low: float | None = None, high: float | None = None,
         verdict: Verdict = Verdict.OK) -> Attempt:
    result = untimed(verdict) if median is None else timed(verdict, median, low, high)
    return Attempt.from_result(1, result, model="m", run_id="r", source="")


# -- the rule ---------------------------------------------------------------------------------

@pytest.mark.parametrize("attempt, eager, says", [
    (_att(0.5), EAGER, True),                                             # 2x, intervals apart
    (_att(9.1), EAGER, False),                                            # 0.11x: kept eager
    (_att(0.99), EAGER, False),                                           # 1.01x, intervals overlap: noise
    (_att(0.97, 0.96, 0.9899), EAGER, False),                             # apart by 0.1 us: within the offset
    (_att(0.97, 0.96, 0.9897), EAGER, True),                              # apart by 0.3 us: beyond it
    (_att(0.97, None, None), TimeStats(measured=True, median_ms=1.0), True),  # no bounds: medians
    (_att(1.0, None, None), TimeStats(measured=True, median_ms=1.0), False),
    (_att(float("nan"), float("nan"), float("nan")), EAGER, False),
    (_att(None), EAGER, None),                                            # untimed attempt: nothing said
    (_att(9.1), TimeStats(), None),                                       # eager not measured (CPU)
    (_att(0.5, verdict=Verdict.INCORRECT), EAGER, None),                  # not correct: nothing said
])
def test_beats_eager_uses_the_best_rules_margin(attempt: Attempt, eager: TimeStats, says: bool | None) -> None:
    assert beats_eager(attempt, eager) is says


# -- ratchet best -----------------------------------------------------------------------------

@pytest.fixture
def problem(tmp_path: Path) -> Path:
    return write_problem(tmp_path / "problems" / "19_ReLU.py", scale=3)


def _workspace(tmp_path: Path, problem: Path, *results: Result) -> Workspace:
    ws = Workspace(tmp_path / "ws", lock_timeout=30)
    with ws.open_problem(problem) as repo:
        for i, result in enumerate(results, start=1):
            commit(repo, result, str(i))
    return ws


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"kept_eager_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_slower_best_is_not_handed_out(tmp_path: Path, problem: Path, capsys) -> None:
    ws = _workspace(tmp_path, problem, _with_eager(timed(Verdict.OK, 9.1)), _with_eager(timed(Verdict.OK, 12.0)))
    out = tmp_path / "kernel.py"
    assert main(["best", str(problem), "--workspace", str(ws.root), "-o", str(out)]) == EXIT_KEPT_EAGER == 14
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("ratchet best: no kernel faster than PyTorch: the best attempt, 1, is 0.11x eager "
                                   "(9.10 ms, 95% interval 8.92-9.28; eager 1.00 ms, 95% interval 0.990-1.01)")
    assert "--reference" in captured.err
    with ws.open_existing("19_ReLU") as repo:  # the best rule is unchanged: the fastest correct attempt
        assert repo.best().number == 1


def test_within_noise_of_eager_is_kept_eager(tmp_path: Path, problem: Path, capsys) -> None:
    ws = _workspace(tmp_path, problem, _with_eager(timed(Verdict.OK, 0.99)))  # 1.01x, intervals overlap
    assert main(["best", "19_ReLU", "--workspace", str(ws.root)]) == EXIT_KEPT_EAGER
    assert "is 1.01x eager" in capsys.readouterr().err


def test_reference_writes_a_drop_in_model_new(tmp_path: Path, problem: Path, capsys) -> None:
    ws = _workspace(tmp_path, problem, _with_eager(timed(Verdict.OK, 9.1)))
    out = tmp_path / "drop_in.py"
    argv = ["best", str(problem), "--workspace", str(ws.root), "--reference"]
    assert main([*argv, "-o", str(out)]) == EXIT_OK
    err = capsys.readouterr().err
    assert err.startswith(f"wrote the reference as ModelNew to {out}: no kernel faster than PyTorch") and err.count("\n") == 1
    module = _load(out)
    torch.manual_seed(0)
    x = module.get_inputs()[0]
    model_new, model = module.ModelNew(*module.get_init_inputs()), module.Model(*module.get_init_inputs())
    assert module.ModelNew.__name__ == "ModelNew" and issubclass(module.ModelNew, module.Model)
    assert torch.equal(model_new(x), model(x)) and torch.equal(model_new(x), torch.relu(x) * 3)
    assert out.read_text().startswith(problem.read_text())  # the reference, verbatim, then ModelNew
    assert main(argv) == EXIT_OK  # to stdout: the same file
    assert capsys.readouterr().out == out.read_text()


def test_reference_names_the_entry_class(tmp_path: Path, capsys) -> None:
    problem = tmp_path / "block.py"
    problem.write_text(write_problem(tmp_path / "plain.py").read_text().replace("class Model(", "class MyBlock("))
    ws = _workspace(tmp_path, problem, _with_eager(timed(Verdict.OK, 4.0)))
    argv = ["best", "block", "--workspace", str(ws.root), "--reference"]
    assert main(argv) == EXIT_USAGE  # no class Model: one line, nothing written
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no top-level class 'Model'" in err and "--entry" in err
    out = tmp_path / "drop_in.py"
    assert main([*argv, "--entry", "MyBlock", "-o", str(out)]) == EXIT_OK
    module = _load(out)
    x = torch.randn(16)
    assert torch.equal(module.ModelNew()(x), module.MyBlock()(x))
    with pytest.raises(ValueError, match="already defines ModelNew"):
        reference_as_model_new(out.read_text(), entry="MyBlock")


def test_a_faster_best_is_unchanged(tmp_path: Path, problem: Path, capsys) -> None:
    ws = _workspace(tmp_path, problem, _with_eager(timed(Verdict.OK, 9.1)), _with_eager(timed(Verdict.OK, 0.5)))
    for extra in ([], ["--reference"]):  # --reference only applies when no kernel is faster
        assert main(["best", str(problem), "--workspace", str(ws.root), *extra]) == EXIT_OK
        captured = capsys.readouterr()
        assert captured.out == SRC.format(2) and "faster than PyTorch" not in captured.err


@pytest.mark.parametrize("result", [untimed(), _with_eager(untimed()), timed(Verdict.OK, 9.1)],
                         ids=["cpu", "candidate-untimed", "eager-untimed"])
def test_an_untimed_best_is_unchanged(tmp_path: Path, problem: Path, result: Result, capsys) -> None:
    ws = _workspace(tmp_path, problem, result)
    assert main(["best", str(problem), "--workspace", str(ws.root), "--reference"]) == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out == SRC.format(1) and "faster than PyTorch" not in captured.err


# -- the end of a run -------------------------------------------------------------------------

def _summary(ws: Workspace, problem: Path) -> dict:
    """run_summary of a run whose best is the workspace's best (as the agent's profile node keeps it)."""
    with ws.open_existing(problem) as repo:
        best = repo.best()
        state = {"problem": str(problem), "run_id": "run-1", "model": "test-model", "stop_reason": "attempt budget spent",
                 "attempts": [], "attempts_used": 1,
                 "best": attempt_summary(best, repo.record(best), reused=False, repeat=False)}
        return run_summary(state, repo)


@pytest.mark.parametrize("median, says", [(9.1, True), (0.5, False), (None, False)])
def test_the_run_ends_saying_no_kernel_faster(tmp_path: Path, problem: Path, median, says, capsys) -> None:
    result = _with_eager(untimed() if median is None else timed(Verdict.OK, median))
    summary = _summary(_workspace(tmp_path, problem, result), problem)
    assert summary["best"]["kept_eager"] is says
    run_report(RunResult(summary, EXIT_OK), as_json=False)
    text = capsys.readouterr().out
    assert ("no kernel faster than PyTorch: attempt 1 is not faster than eager beyond noise" in text) is says
    assert ("best of this run: attempt 1: 0.11x vs eager" in text) is (median == 9.1)  # the honest ratio is still shown
    run_report(RunResult(summary, EXIT_OK), as_json=True)
    assert json.loads(capsys.readouterr().out)["best"]["kept_eager"] is says


# -- the report -------------------------------------------------------------------------------

def test_the_report_counts_kept_eager_as_one(tmp_path: Path, capsys) -> None:
    rows = [
        row("1_fast", eager=2.0, compile=1.5, roofline=0.5, kept_eager=False),
        row("2_kept", eager=0.11, compile=0.05, roofline=0.02, kept_eager=True),
        row("3_noise", eager=1.01, compile=0.8, roofline=0.3, kept_eager=True),  # 1.01x within noise
        row("4_old_row", eager=0.5, compile=0.4, roofline=0.1),  # written before the field: 0.5x can never win
        row("5_untimed", measured=False, kept_eager=False),
    ]
    run = write_run(tmp_path, rows)
    h = headline(load_run(run).rows)
    assert h["kept_eager"] == 3 and h["kept_eager_problems"] == ["2_kept", "3_noise", "4_old_row"]
    assert h["faster_than_eager"] == 1 and h["faster_than_compile"] == 1  # 3_noise's 1.01x is not "faster"
    assert h["geomean_speedup_vs_eager"] == pytest.approx(2.0 ** (1 / 5))  # every other problem 1.0x
    assert h["geomean_speedup_vs_compile"] == pytest.approx(1.5 ** (1 / 5))
    assert h["mean_roofline_fraction"] == pytest.approx((0.5 + 0.02 + 0.3 + 0.1) / 4)  # the kernels' own

    assert main(["report", str(run)]) == EXIT_OK
    text = capsys.readouterr().out
    lines = {line.split()[0]: line for line in text.splitlines()[1:6]}
    assert "1.00x kept eager (best 0.11x)" in lines["2_kept"] and "0.05x" not in lines["2_kept"]
    assert lines["1_fast"].split()[1:4] == ["ok", "2.00x", "1.50x"]
    assert "not measured" in lines["5_untimed"] and "kept eager" not in lines["5_untimed"]
    assert "kept eager:                       3/5 (2_kept, 3_noise, 4_old_row): no kernel faster than PyTorch" in text
    assert "geomean speedup vs eager:         1.15x over all 5 problems" in text

    html = render_html(load_run(run))
    assert "kept eager: no kernel faster than PyTorch (best 0.11x)" in html
    assert "bar loss" not in html and "Kept eager (2_kept, 3_noise, 4_old_row)" in html
    assert main(["report", str(run), "--json", "--no-html"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["headline"]["kept_eager_counts_as"] == 1.0 and any(n.startswith("kept eager") for n in data["notes"])


def test_a_cpu_report_says_nothing_of_eager(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path, [row("1_a", measured=False, device="cpu", kept_eager=False)], device="cpu")
    h = headline(load_run(run).rows)
    assert h["kept_eager"] == 0 and h["geomean_speedup_vs_eager"] is None
    assert main(["report", str(run), "--no-html"]) == EXIT_OK
    assert "kept eager" not in capsys.readouterr().out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
