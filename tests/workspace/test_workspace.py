"""The git workspace: creation, commits and trailers, the best rule, the log/best/show commands.
(Refusals, locking, concurrent writers and crash recovery: tests/workspace/test_workspace_recovery.py.)"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from agent.cli import main
from agent.workspace.root import MAIN, TRAJECTORIES, Workspace, repo_name
from agent.workspace.attempt import Attempt, beats
from helpers_workspace import git, make_result, timed, untimed, write_problem
from helpers_workspace_checks import SRC, assert_consistent, commit
from tools.record import Check, Errors, Result, Verdict


# -- creation and layout ----------------------------------------------------------------------

def test_first_use_creates_repo_with_reference_commit(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        assert repo.path == (ws.root / "19_ReLU").absolute()
        assert (repo.path / "reference.py").read_bytes() == problem.read_bytes()
        marker = json.loads((repo.path / "ratchet.json").read_text())
        assert marker["reference_sha256"] == hashlib.sha256(problem.read_bytes()).hexdigest()
        assert git(repo.path, "symbolic-ref", "HEAD").stdout.strip() == MAIN
        assert git(repo.path, "log", "--format=%s").stdout.splitlines() == ["reference: 19_ReLU.py"]
        assert repo.attempts() == [] and repo.best() is None
        assert_consistent(repo)
    with ws.open_problem(problem) as again:  # second use opens the same repository
        assert again.path == repo.path
    assert ws.problems() == ["19_ReLU"]


def test_root_from_argument_env_or_default(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RATCHET_WORKSPACE", raising=False)
    assert Workspace().root == Path("workspaces")
    monkeypatch.setenv("RATCHET_WORKSPACE", "/env/ws")
    assert Workspace().root == Path("/env/ws") and Workspace("cli").root == Path("cli")


def test_repo_names_are_safe() -> None:
    assert repo_name("a/b/1_Conv 2D+ReLU (v2).py") == "1_Conv_2D_ReLU_v2_"
    assert repo_name(".hidden.py") == "hidden"
    assert repo_name("-rf.py") == "rf"
    assert repo_name("$$$.py") == "problem"


def test_other_version_of_same_file_gets_its_own_repo(ws: Workspace, tmp_path: Path) -> None:
    first = write_problem(tmp_path / "a" / "relu.py", scale=2)
    second = write_problem(tmp_path / "b" / "relu.py", scale=3)
    with ws.open_problem(first) as a, ws.open_problem(second) as b:
        commit(a, untimed())
        digest = hashlib.sha256(second.read_bytes()).hexdigest()
        assert a.name == "relu" and b.name == f"relu-{digest[:8]}"
        assert b.attempts() == []
    with ws.open_existing(str(second)) as again:
        assert again.name == b.name


# -- commits and trailers ---------------------------------------------------------------------

def test_attempt_commit_holds_source_record_extras_and_trailers(ws: Workspace, problem: Path) -> None:
    result = timed(Verdict.OK, 0.412, 0.409, 0.415, trials=5, checks=[Check("trial 1", True)], errors=Errors(1e-6, 2e-5, 3e-7))
    with ws.open_problem(problem) as repo:
        att = repo.commit_attempt(SRC.format(1), result, model="qwen/coder:32b", run_id="r-7",
                                  extra_files={"notes.json": "[1, 2]\n", "replies/1.txt": "hello\n"})
        assert (att.number, att.became_best, att.is_best) == (1, True, True)
        files = git(repo.path, "show", "--name-only", "--format=", att.sha).stdout.split()
        assert sorted(files) == ["best/candidate.py", "best/result.json", "candidate.py", "notes.json",
                                 "replies/1.txt", "result.json"]
        assert git(repo.path, "show", f"{att.sha}:candidate.py").stdout == SRC.format(1)
        assert repo.record(att) == result.to_dict()
        assert Result.from_dict(repo.record(att)) == result
        subject = git(repo.path, "log", "--oneline", "-1", "--format=%s").stdout.strip()
        assert subject == "attempt 1: ok, 2.43x vs eager, 0.412 ms, new best"
        body = git(repo.path, "log", "-1", "--format=%B").stdout
        assert "Ratchet-Verdict: ok\n" in body and "Ratchet-Attempt: 1\n" in body

        parsed = repo.attempt(1)
        assert parsed == Attempt(**{**att.__dict__, "committed_at": parsed.committed_at})
        t = result.candidate_time
        assert (parsed.verdict, parsed.speedup_vs_eager, parsed.speedup_vs_compile) == \
            (result.verdict, result.speedup_vs_eager, result.speedup_vs_compile)
        assert (parsed.median_ms, parsed.ci_low_ms, parsed.ci_high_ms, parsed.timing_measured) == \
            (t.median_ms, t.ci_low_ms, t.ci_high_ms, True)
        assert parsed.roofline_fraction == result.roofline.achieved_fraction
        assert (parsed.model, parsed.run_id) == ("qwen/coder:32b", "r-7")


@pytest.mark.parametrize("seed", range(3))
def test_trailers_parse_back_exactly(ws: Workspace, problem: Path, seed: int) -> None:
    rng = random.Random(seed)
    with ws.open_problem(problem) as repo:
        results = [make_result(rng) for _ in range(6)]
        for r in results:
            commit(repo, r)
        for r, a in zip(results, repo.attempts()):
            assert a.verdict == r.verdict and a.timing_measured == r.candidate_time.measured
            assert a.speedup_vs_eager == r.speedup_vs_eager and a.speedup_vs_compile == r.speedup_vs_compile
            assert (a.median_ms, a.ci_low_ms, a.ci_high_ms) == \
                (r.candidate_time.median_ms, r.candidate_time.ci_low_ms, r.candidate_time.ci_high_ms)
            assert a.roofline_fraction == r.roofline.achieved_fraction
            assert Result.from_dict(repo.record(a)) == r


def test_failed_attempts_are_committed_with_na(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        att = commit(repo, Result(verdict=Verdict.COMPILE_ERROR, message="--- nvcc: error\nmore"))
        body = git(repo.path, "log", "-1", "--format=%B").stdout
        assert "Ratchet-Speedup-Eager: n/a" in body and "Ratchet-Timing: not-measured" in body
        assert "Ratchet-Verdict: compile_error" in body
        parsed = repo.attempt(1)
        assert parsed.verdict is Verdict.COMPILE_ERROR and parsed.median_ms is None and not parsed.is_best
        assert att.subject == "attempt 1: compile_error" and repo.best() is None
        assert_consistent(repo)


def test_extra_file_names_are_checked(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        for bad in ("../x", "/etc/x", "candidate.py", "result.json", "best/candidate.py", ".git/config", "a//b", ""):
            with pytest.raises(ValueError):
                repo.commit_attempt("x", untimed(), model="m", run_id="r", extra_files={bad: "x"})
        assert repo.attempts() == []


def test_attempt_commit_body_says_what_changed_and_what_it_measured(ws: Workspace, problem: Path) -> None:
    failed = Result(verdict=Verdict.INCORRECT, message="Output 0 differs at [3]: got 1.0, expected 2.0\nmore",
                    checks=[Check("guard", True), Check("trial-1", False, "max abs error 1")])
    with ws.open_problem(problem) as repo:
        first = repo.commit_attempt("a\nb\n", untimed(), model="m", run_id="r", summary="a plain copy\nsecond line")
        timed_ok = repo.commit_attempt("a\nB\nc\n", timed(Verdict.OK, 0.412, 0.409, 0.415), model="m", run_id="r")
        wrong = repo.commit_attempt("a\nB\nc\nd\n", failed, model="m", run_id="r", summary="--- unroll by 4")

        def body(att: Attempt) -> list[str]:
            paragraphs = git(repo.path, "log", "-1", "--format=%B", att.sha).stdout.strip().split("\n\n")
            assert paragraphs[0] == att.subject and paragraphs[-1].startswith("Ratchet-Kind: attempt\n")
            return paragraphs[1].splitlines()

        assert body(first) == [
            "Change: a plain copy",
            "Verdict: ok: ok: correctness only, no timing on this machine",
            "Time: none, not measured",
            "Diff: 2 lines, no best attempt before it to compare with"]
        assert body(timed_ok) == [
            "Verdict: ok: ok: timed at 0.412 ms",
            "Time: 0.412 ms (95% interval 0.409-0.415 ms, 30 samples); 2.43x vs eager, 1.70x vs torch.compile; "
            "12.1% of the roofline",
            "Diff: +2 -1 lines against attempt 1, the best before it"]
        assert body(wrong) == [
            "Change: --- unroll by 4",  # behind its label: a '---' cannot start a line and hide the trailers
            "Verdict: incorrect: Output 0 differs at [3]: got 1.0, expected 2.0",
            "Failed check: trial-1: max abs error 1",
            "Time: none, not measured (incorrect before timing)",
            "Diff: +1 -0 lines against attempt 2, the best before it"]
        # the trailers are unchanged and still parse back
        assert [a.verdict for a in repo.attempts()] == [Verdict.OK, Verdict.OK, Verdict.INCORRECT]
        assert repo.attempt(2).median_ms == 0.412 and repo.attempt(3).source_sha256 == wrong.source_sha256
        general = untimed()
        general.generalizes, general.heldout = True, [{"variant": "batch_size=9", "outcome": "ok", "detail": ""}]
        specialized = untimed()
        specialized.generalizes = False
        specialized.heldout = [{"variant": "batch_size=9", "outcome": "refused", "detail": "ValueError: (16, 256) only"}]
        unchecked = untimed()
        unchecked.heldout = [{"variant": "any", "outcome": "not used", "detail": "the problem declares its shapes fixed"}]
        lines = {name: [line for line in body(repo.commit_attempt(f"{name}\n", result, model="m", run_id="r"))
                        if line.startswith("Drop-in:")]
                 for name, result in (("general", general), ("specialized", specialized), ("unchecked", unchecked))}
        assert lines == {"general": ["Drop-in: general, also right on batch_size=9"],
                         "specialized": ["Drop-in: specialized (declared), refuses batch_size=9"],
                         "unchecked": ["Drop-in: unchecked, the problem declares its shapes fixed"]}
        long = repo.commit_attempt("x", untimed(), model="m", run_id="r", summary="y" * 1000)
        assert all(len(line) <= 240 for line in body(long))
        assert_consistent(repo)


def test_trajectories_live_on_their_own_ref_not_on_main(ws: Workspace, problem: Path) -> None:
    with ws.open_problem(problem) as repo:
        head = git(repo.path, "rev-parse", "HEAD").stdout
        attempts = []
        for k in range(1, 4):
            attempts.append(repo.commit_attempt(SRC.format(k), untimed(), model="m", run_id="run-a",
                                                trajectory=f'{{"run_id": "run-a", "turn": {k}}}\n'))
            assert repo.save_trajectory("run-a", f'{{"run_id": "run-a", "turn": {k}, "result": true}}\n')
            assert repo.save_trajectory("run-a", f'{{"run_id": "run-a", "turn": {k}, "result": true}}\n') is None
        other = repo.commit_attempt(SRC.format(9), untimed(), model="m", run_id="run b/odd", trajectory='{"run_id": "b"}\n')
        # main: the reference and one commit per attempt; the work tree, index and HEAD know nothing of trajectories
        subjects = git(repo.path, "log", "--format=%s", MAIN).stdout.splitlines()
        assert subjects == [a.subject for a in reversed([*attempts, other])] + ["reference: 19_ReLU.py"]
        assert git(repo.path, "symbolic-ref", "HEAD").stdout.strip() == MAIN and head != git(repo.path, "rev-parse", "HEAD").stdout
        assert not (repo.path / "trajectory.json").exists()
        assert git(repo.path, "ls-files").stdout.split() == ["best/candidate.py", "best/result.json", "candidate.py",
                                                             "ratchet.json", "reference.py", "result.json"]
        # the trajectory of attempt k is the one saved with its commit
        for k, att in enumerate(attempts, start=1):
            assert repo.trajectory(att) == f'{{"run_id": "run-a", "turn": {k}}}\n'
        # each run's latest save, oldest run first; a run id that is no file name gets a hashed one
        assert [(t.run_id, t.text) for t in repo.trajectories()] == [
            ("run-a", '{"run_id": "run-a", "turn": 3, "result": true}\n'), ("run b/odd", '{"run_id": "b"}\n')]
        files = git(repo.path, "ls-tree", "--name-only", TRAJECTORIES).stdout.split()
        assert files[1] == "run-a.json" and files[0].startswith("run-") and len(files) == 2
        saves = git(repo.path, "log", "--format=%s", TRAJECTORIES).stdout.splitlines()
        assert saves[:2] == ["trajectory: run run b/odd, attempt 4", "trajectory: run run-a"]
        assert len(saves) == 7  # 3 with attempts, 3 between them, 1 of the other run
        assert_consistent(repo)
        for bad in ("", "two\nlines"):  # a run id is a trailer's value: refused before anything is committed
            with pytest.raises(ValueError, match="run id"):
                repo.commit_attempt("y", untimed(), model="m", run_id=bad, trajectory="{}")
            with pytest.raises(ValueError, match="run id"):
                repo.save_trajectory(bad, "{}")
        assert len(repo.attempts()) == 4
    with ws.open_existing("19_ReLU") as reader:  # read-only readers see them too
        assert reader.trajectory(reader.attempt(2)) == '{"run_id": "run-a", "turn": 2}\n'


# -- the best rule ----------------------------------------------------------------------------

def _att(verdict: Verdict = Verdict.OK, median: float | None = None, low=None, high=None) -> Attempt:
    r = untimed(verdict) if median is None else timed(verdict, median, low, high)
    return Attempt.from_result(1, r, model="m", run_id="r", source="")


@pytest.mark.parametrize("new, incumbent, wins", [
    (_att(), None, True),                                         # first correct: best even untimed
    (_att(median=1.0), None, True),
    (_att(Verdict.INCORRECT, 0.01), None, False),                 # incorrect never best
    (_att(Verdict.REJECTED, 0.01), _att(median=1.0), False),      # rejected never best
    (_att(median=0.5), _att(median=1.0), True),                   # intervals apart
    (_att(median=1.0), _att(median=1.0), False),                  # tie keeps incumbent
    (_att(median=0.97), _att(median=1.0), False),                 # overlap (noise) keeps incumbent
    (_att(median=0.9, low=0.89, high=0.95), _att(median=1.0, low=0.95, high=1.1), False),  # touching
    (_att(median=0.9, low=0.89, high=0.9497), _att(median=1.0, low=0.95, high=1.1), True),
    # a 4 us kernel: intervals apart by 0.12 us, within a fresh process's own offset
    (_att(median=0.0042, low=0.00418, high=0.0042), _att(median=0.00435, low=0.00432, high=0.00436), False),
    (_att(median=0.0040, low=0.00398, high=0.0040), _att(median=0.00435, low=0.00432, high=0.00436), True),
    (_att(median=0.5), _att(), True),                             # timed beats untimed
    (_att(), _att(median=9.0), False),                            # untimed never beats
    (_att(), _att(), False),                                      # two untimed: keep incumbent
    (_att(median=float("nan"), low=float("nan"), high=float("nan")), _att(median=1.0), False),
])
def test_best_rule(new: Attempt, incumbent: Attempt | None, wins: bool) -> None:
    assert beats(new, incumbent) is wins


def test_best_moves_only_on_a_clear_win(ws: Workspace, problem: Path) -> None:
    steps = [  # (result, becomes best)
        (Result(verdict=Verdict.COMPILE_ERROR, message="syntax"), False),
        (untimed(Verdict.INCORRECT), False),
        (untimed(), True),
        (untimed(), False),
        (timed(Verdict.OK, 1.0), True),
        (timed(Verdict.OK, 0.99), False),
        (timed(Verdict.OK, 1.0), False),
        (untimed(), False),
        (timed(Verdict.INCORRECT, 0.1), False),
        (timed(Verdict.REJECTED, 0.1), False),
        (timed(Verdict.OK, 0.5), True),
        (Result(verdict=Verdict.CRASHED, message="segfault"), False),
    ]
    with ws.open_problem(problem) as repo:
        best_number = None
        for i, (result, wins) in enumerate(steps, start=1):
            att = commit(repo, result, tag=str(i))
            assert (att.number, att.became_best) == (i, wins)
            best_number = i if wins else best_number
            assert repo.best().number == best_number if best_number else repo.best() is None
        assert repo.best_path == repo.path / "best" / "candidate.py"
        assert repo.best_path.read_text() == SRC.format(best_number)
        assert [a.number for a in repo.attempts() if a.is_best] == [best_number]
        assert_consistent(repo)


# -- the commands -----------------------------------------------------------------------------

@pytest.fixture
def history(ws: Workspace, problem: Path) -> Workspace:
    with ws.open_problem(problem) as repo:
        commit(repo, Result(verdict=Verdict.COMPILE_ERROR, message="nvcc failed"), "1")
        commit(repo, timed(Verdict.OK, 1.0), "2")
        commit(repo, timed(Verdict.OK, 0.5), "3")
        commit(repo, timed(Verdict.OK, 0.49), "4")
    return ws


def test_cli_log_table_marks_best(history: Workspace, problem: Path, capsys) -> None:
    assert main(["log", str(problem), "--workspace", str(history.root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["#", "verdict", "vs"]
    rows = {line.split()[1 if line.startswith("*") else 0]: line for line in lines[1:5]}
    assert rows["3"].startswith("*") and not any(rows[n].startswith("*") for n in "124")
    assert "compile_error" in rows["1"] and "0.500" in rows["3"] and "2.00x" in rows["3"]
    assert "best: attempt 3" in lines[-1]


def test_cli_log_json_by_name_and_env(history: Workspace, monkeypatch, capsys) -> None:
    monkeypatch.setenv("RATCHET_WORKSPACE", str(history.root))
    assert main(["log", "19_ReLU", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["number"] for r in records] == [1, 2, 3, 4]
    assert [r["is_best"] for r in records] == [False, False, True, False]
    assert records[2]["verdict"] == "ok" and records[2]["median_ms"] == 0.5


def test_cli_best_writes_a_drop_in_file(history: Workspace, problem: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "kernel.py"
    assert main(["best", str(problem), "--workspace", str(history.root), "-o", str(out)]) == 0
    assert out.read_text() == SRC.format(3)
    assert main(["best", "19_ReLU", "--workspace", str(history.root)]) == 0
    assert capsys.readouterr().out == SRC.format(3)


def test_cli_show(history: Workspace, problem: Path, capsys) -> None:
    assert main(["show", str(problem), "--best", "--workspace", str(history.root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# attempt 3 (best): ok") and SRC.format(3) in out and '"verdict": "ok"' in out
    assert main(["show", str(problem), "1", "--json", "--workspace", str(history.root)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["attempt"]["verdict"] == "compile_error" and shown["source"] == SRC.format(1)
    assert main(["show", str(problem), "--workspace", str(history.root)]) == 0
    assert capsys.readouterr().out.startswith("# attempt 4: ok")


def test_cli_errors_are_one_line(history: Workspace, problem: Path, tmp_path: Path, capsys) -> None:
    root = str(history.root)
    failing = write_problem(tmp_path / "failing.py", scale=5)
    with history.open_problem(failing) as repo:
        commit(repo, untimed(Verdict.INCORRECT))
    for argv in (["log", "no_such_problem", "--workspace", root],
                 ["log", str(tmp_path / "missing.py"), "--workspace", root],
                 ["show", str(problem), "99", "--workspace", root],
                 ["best", str(write_problem(tmp_path / "new.py")), "--workspace", root],
                 ["best", str(failing), "--workspace", root],
                 ["show", "failing", "--best", "--workspace", root],
                 ["log", str(problem), "--workspace", str(tmp_path / "empty")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"ratchet {argv[0]}: ") and err.count("\n") == 1, err


def test_the_drop_in_check_and_the_library_mark_travel_in_the_trailers():
    from agent.workspace.attempt import Attempt, parse_trailers
    from tools.record import Result, Verdict

    for generalizes, library in ((False, True), (True, False), (None, None)):
        result = Result(verdict=Verdict.OK, message="ok", generalizes=generalizes, library=library)
        made = Attempt.from_result(1, result, model="m", run_id="r", source="src")
        text = "".join(f"{k}: {v}\n" for k, v in made.trailers())
        back = Attempt.from_trailers(parse_trailers(text), sha="")
        assert (back.generalizes, back.library) == (generalizes, library)
    old = parse_trailers("".join(f"{k}: {v}\n" for k, v in made.trailers() if k not in ("Ratchet-Generalizes", "Ratchet-Library")))
    assert Attempt.from_trailers(old, sha="").generalizes is None  # a commit from before these trailers
