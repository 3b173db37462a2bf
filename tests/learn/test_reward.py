"""The evaluator as an RL reward: known candidates on the CPU, the formula, extraction, and the
reward called the way TRL's GRPOTrainer calls reward functions."""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from tools.record import Result, TimeStats, Verdict
from tools.reward import KernelReward
from tools.reward.extract import extract_source
from tools.reward.score import FORMAT_ERROR, RewardConfig, score_record
from tools.toolcalls import FormatError, Submission

HERE = Path(__file__).parents[1]
PROBLEM = HERE / "rl_problems" / "scale_add.py"
sys.path.insert(0, str(PROBLEM.parent))
from scale_add_candidates import BROKEN, CHEAT_GUARD, CHEAT_UNLAUNCHED, FAST, SLOW, WRONG  # noqa: E402

pytestmark = pytest.mark.timeout(180)
A, B = RewardConfig().compiled, RewardConfig().correct


@pytest.fixture(scope="module")
def reward():
    with KernelReward(RewardConfig(device="cpu", trials=2, spares=2)) as r:
        yield r


def test_known_candidates_on_the_cpu(reward):
    names = ["fast", "slow", "wrong", "broken", "cheat_guard", "cheat_unlaunched"]
    outcomes = dict(zip(names, reward.score([FAST, SLOW, WRONG, BROKEN, CHEAT_GUARD, CHEAT_UNLAUNCHED], [PROBLEM] * 6)))
    # honest fast and honest slow: both correct; nothing is timed on the CPU, so the speedup term is 0 and says why
    for name in ("fast", "slow"):
        o = outcomes[name]
        assert (o.verdict, o.compiled, o.correct, o.timing_measured) == ("ok", True, True, False)
        assert o.speedup is None and o.speedup_term == 0.0
        assert o.note.startswith("speedup term 0: timing unavailable: no GPU")
        assert o.reward == pytest.approx(A + B)
        assert o.record["verdict"] == "ok" and o.source_hash == o.record["source_hash"]
        assert o.precision == "fp32" == o.record["precision"]  # the baselines' arithmetic, for the trainer's metadata
    assert outcomes["fast"].reward == outcomes["slow"].reward
    wrong = outcomes["wrong"]
    assert (wrong.verdict, wrong.compiled, wrong.correct, wrong.reward) == ("incorrect", True, False, pytest.approx(A))
    assert "differs" in wrong.reason
    broken = outcomes["broken"]
    assert (broken.verdict, broken.compiled, broken.reward) == ("compile_error", False, 0.0)
    # cheating scores zero, with the rule that caught it: a guard rule, and a run-time integrity check
    for name, rule in (("cheat_guard", "guard:try-except"), ("cheat_unlaunched", "kernel-launched")):
        o = outcomes[name]
        assert o.verdict == "rejected" and o.reward == 0.0 and not o.correct
        assert o.reason.startswith(rule), o.reason
        assert "violation" in o.note


def _record(verdict="ok", *, eager=None, compile=None, measured=True, build=True, compile_note="not measured"):
    result = Result(verdict=Verdict(verdict), message="msg")
    result.checks = []
    if build:
        from tools.record import Check
        result.checks.append(Check("build", True))
    result.candidate_time = TimeStats(measured=measured, median_ms=1.0 if measured else None,
                                      note="measured" if measured else "unavailable: no GPU")
    result.compile_time = TimeStats(measured=compile is not None, note=compile_note)
    result.speedup_vs_eager, result.speedup_vs_compile = eager, compile
    return result


def test_the_formula_on_timed_records():
    cfg = RewardConfig()
    fast, slow = score_record(_record(eager=2.0, compile=1.5), cfg), score_record(_record(eager=0.5, compile=0.4), cfg)
    assert fast.reward == pytest.approx(0.1 + 0.3 + 1.0 * 2.0) and fast.speedup == 2.0 and fast.timing_measured
    assert slow.reward == pytest.approx(0.1 + 0.3 + 0.5) and fast.reward > slow.reward
    assert score_record(_record(eager=50.0), cfg).reward == pytest.approx(0.4 + cfg.cap)  # capped
    vs_compile = score_record(_record(eager=2.0, compile=1.5), RewardConfig(baseline="compile", compiled=0, correct=1, speedup=2))
    assert vs_compile.reward == pytest.approx(1 + 2 * 1.5) and vs_compile.baseline == "compile"
    no_compile = score_record(_record(eager=2.0, compile=None, compile_note="torch.compile failed: x"), RewardConfig(baseline="compile"))
    assert no_compile.speedup_term == 0.0 and "torch.compile failed" in no_compile.note
    # a rejected record scores 0 even when it carries a speedup (e.g. faster than the roofline allows)
    rejected = _record("rejected", eager=100.0)
    from tools.record import Check
    rejected.checks.append(Check("roofline", False, "impossible"))
    out = score_record(rejected.to_dict(), cfg)
    assert out.reward == 0.0 and out.reason.startswith("roofline") and out.correct is False
    with pytest.raises(ValueError):
        RewardConfig(baseline="fastest")


def test_extracting_the_candidate():
    fenced = f"Here is my kernel.\n\n```python\n{FAST}```\nIt should be fast."
    assert isinstance(extract_source(fenced), Submission) and extract_source(fenced).source.strip() == FAST.strip()
    call = json.dumps({"name": "submit_kernel", "arguments": {"source": SLOW}})
    assert extract_source(f"<tool_call>\n{call}\n</tool_call>").source == SLOW
    assert extract_source(f"I will submit: {call}").source == SLOW
    assert extract_source(FAST).source == FAST
    messages = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_best", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "submit_kernel", "arguments": json.dumps({"source": WRONG})}}]}]
    assert extract_source(messages).source == WRONG
    assert isinstance(extract_source("I could not do it."), FormatError)
    assert "not valid JSON" in extract_source([{"role": "assistant", "tool_calls": [
        {"function": {"name": "submit_kernel", "arguments": "{\"source\": "}}]}]).reason
    # the last candidate fence wins; fences in other languages are not candidates
    two = f"```cpp\nint x;\n```\n```python\n{WRONG}```\nbetter:\n```python\n{FAST}```"
    assert extract_source(two).source.strip() == FAST.strip()


def test_called_the_way_grpo_trainer_calls_it(reward):
    """GRPOTrainer: reward_func(prompts=..., completions=..., completion_ids=..., **dataset columns)."""
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    call = {"id": "c", "type": "function", "function": {"name": "submit_kernel", "arguments": json.dumps({"source": FAST})}}
    completions = [
        f"```python\n{FAST}```",                                                        # standard format
        [{"role": "assistant", "content": f"Fixed:\n```python\n{WRONG}```"}],            # conversational
        [{"role": "assistant", "content": None, "tool_calls": [call]}],                   # conversational, tool call
        "no code here",
        CHEAT_GUARD,
    ]
    n = len(completions)
    reward(prompts=[prompt], completions=[FAST], problem=[str(PROBLEM)])  # scored once before, whatever ran first
    rewards = reward(prompts=[prompt] * n, completions=completions, completion_ids=[[1, 2, 3]] * n,
                     problem=[str(PROBLEM)] * n, level=[1] * n, trainer_state=None)
    assert isinstance(rewards, list) and len(rewards) == n and all(isinstance(r, float) for r in rewards)
    assert rewards == pytest.approx([A + B, A, A + B, 0.0, 0.0])
    assert [o.verdict for o in reward.last] == ["ok", "incorrect", "ok", FORMAT_ERROR, "rejected"]
    assert reward.last[0].cached and reward.last[2].cached  # scored before: the same problem and source
    assert reward.__name__ == "ratchet_kernel_reward"
    # positional, as older TRL versions call it, and a missing problem column
    assert reward([prompt], [FAST], problem=[str(PROBLEM)]) == pytest.approx([A + B])
    with pytest.raises(KeyError, match="problem"):
        reward(prompts=[prompt], completions=[FAST])


def test_close_stops_the_workers(tmp_path):
    log = tmp_path / "rewards.jsonl"
    r = KernelReward(RewardConfig(device="cpu", trials=1, spares=1, log_path=str(log)))
    assert r(prompts=["p"], completions=["no kernel"], problem=[str(PROBLEM)]) == [0.0]
    ev = r.evaluator(PROBLEM)  # started with the batch, though nothing needed it
    workers = [ev.reference, *ev._spares]
    assert all(w.alive() for w in workers)
    r.close()
    assert not any(w.alive() for w in workers)
    assert json.loads(log.read_text().splitlines()[0])["verdict"] == "format_error"
    with pytest.raises(RuntimeError):
        r(prompts=["p"], completions=[FAST], problem=[str(PROBLEM)])


@pytest.mark.gpu
def test_timed_rewards_on_a_gpu():
    """On a GPU both honest kernels are timed: the speedup term is positive and follows the formula."""
    with KernelReward(RewardConfig(device="cuda:0", trials=2, spares=2, eval_options={"timing_budget_s": 0.5})) as r:
        fast, slow, cheat = r.score([FAST, SLOW, CHEAT_GUARD], [PROBLEM] * 3)
    for o in (fast, slow):
        assert o.correct and o.timing_measured and o.speedup is not None and o.speedup > 0
        assert o.reward == pytest.approx(A + B + min(o.speedup, 10.0))
    assert cheat.reward == 0.0


@pytest.mark.gpu
def test_a_problem_opens_alone_on_the_device_while_another_problems_completion_is_judged(tmp_path):
    """An evaluator times eager on a quiet device and decides where float64 fits when it opens:
    opened while another problem's completion is being judged on the same card, both would read
    that completion's work. So the open waits for the judging to end (and the next judging for the
    open)."""
    other = tmp_path / "scale_add_other.py"
    other.write_text(PROBLEM.read_text())
    with KernelReward(RewardConfig(device="cuda:0", trials=2, spares=1, eval_options={"timing_budget_s": 1.0})) as r:
        r.evaluator(PROBLEM)
        judged: dict[str, float] = {}

        def judge() -> None:
            r.score_source(PROBLEM, SLOW)
            judged["end"] = time.monotonic()

        thread = threading.Thread(target=judge)
        thread.start()
        time.sleep(0.5)  # the judging holds the device by now
        started = time.monotonic()
        r.evaluator(other)
        opened = time.monotonic()
        thread.join()
    assert "end" in judged and judged["end"] - started > 0.5, judged  # the judging outlasted the wait's start
    assert opened >= judged["end"], (opened - started, judged["end"] - started)


def test_an_error_record_scores_the_neutral_fault_reward():
    fault = Result(verdict=Verdict.ERROR, message="ratchet's evaluator failed (ReferenceLost: died twice)\nmore")
    out = score_record(fault, RewardConfig())
    assert (out.reward, out.verdict, out.evaluator_fault, out.correct, out.compiled) == (0.0, "error", True, False, False)
    assert out.reason == "evaluator fault: ratchet's evaluator failed (ReferenceLost: died twice)"
    assert "mask" in out.note and out.to_dict(record=False)["evaluator_fault"] is True
    assert score_record(fault.to_dict(), RewardConfig(fault_reward=0.25)).reward == 0.25
    assert score_record(_record("incorrect"), RewardConfig()).evaluator_fault is False


def test_an_evaluator_that_cannot_start_is_a_fault_never_an_exception(tmp_path, caplog):
    """The evaluator cannot start for a reason of ours (its cache directory is a file): every
    completion still gets a number, marked evaluator_fault, logged, and not cached."""
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache directory should be")
    log = tmp_path / "rewards.jsonl"
    config = RewardConfig(device="cpu", trials=1, spares=1, fault_reward=0.25, log_path=str(log),
                          eval_options={"cache_dir": blocked})
    with KernelReward(config) as r:
        rewards = r(prompts=["p", "p"], completions=[FAST, "no kernel here"], problem=[str(PROBLEM)] * 2)
        assert rewards == [0.25, 0.0]
        fault, no_kernel = r.last
        assert fault.evaluator_fault and fault.verdict == "error" and fault.record["verdict"] == "error"
        assert "NotADirectoryError" in fault.reason and fault.problem == str(PROBLEM.resolve())
        assert not no_kernel.evaluator_fault and no_kernel.verdict == FORMAT_ERROR
        again = r.score([FAST], [PROBLEM])[0]
        assert again.evaluator_fault and not again.cached  # a fault is not the source's: tried again
    assert any("could not start" in rec.getMessage() for rec in caplog.records if rec.name == "ratchet.reward")
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(o["verdict"], o["evaluator_fault"]) for o in logged] == [("error", True), (FORMAT_ERROR, False), ("error", True)]


def test_what_raises_is_the_callers_mistake():
    """A bad problem file is the dataset's error (ProblemError, naming the file); a bad device or
    evaluator option fails when the reward is made, not as a fault on every completion."""
    from tools.problem import ProblemError

    bad = HERE / "problems" / "bad" / "get_inputs_not_list.py"
    with KernelReward(RewardConfig(device="cpu", trials=1, spares=1)) as r:
        with pytest.raises(ProblemError, match="get_inputs_not_list.py"):
            r([None], [FAST], problem=[str(bad)])
    with pytest.raises(ValueError, match="tpu"):
        KernelReward(RewardConfig(device="tpu"))
    with pytest.raises(TypeError, match="no_such_option"):
        KernelReward(RewardConfig(device="cpu", eval_options={"no_such_option": 1}))
    with pytest.raises(ValueError, match="'fp8' is not one of"):
        RewardConfig(precision="fp8")


@pytest.mark.parametrize("completion", [
    [{"role": "assistant", "content": [{"type": "text", "text": None}]}],
    [{"role": "assistant", "tool_calls": [{"function": "submit_kernel"}]}],
    [{"role": "assistant", "tool_calls": {"function": {"name": "submit_kernel"}}}],
    [{"role": "assistant", "tool_calls": [{"function": {"name": "submit_kernel", "arguments": 5}}]}],
    '{"name": "submit_kernel", "arguments": [1, 2]}',
    b"class ModelNew: pass",
    # nested past what the parsers hold (an attacker's find: RecursionError / MemoryError out of the reward)
    "x = " + "a." * 50000 + "b\nclass ModelNew: pass\n",
    "-" * 100000 + "1\nclass ModelNew: pass\n",
    [{"role": "assistant", "tool_calls": [{"function": {"name": "submit_kernel", "arguments": "[" * 100000}}]}],
], ids=["null-text-part", "function-a-string", "tool-calls-a-dict", "arguments-an-int", "arguments-a-list", "bytes",
        "deep-attribute-chain", "deep-unary", "deep-json-arguments"])
def test_a_malformed_completion_is_a_format_error_never_an_exception(completion):
    assert isinstance(extract_source(completion), FormatError)


def test_a_problems_baselines_are_taken_before_any_completion_runs():
    """The evaluator is asked for its baselines when it is made, so that on a GPU the eager and
    torch.compile times (the latter kept on disk) are measured before any completion's worker
    exists, not beside one (docs/integrity.md, residual risks)."""
    with KernelReward(RewardConfig(device="cpu", trials=1, spares=1)) as r:
        ev = r.evaluator(PROBLEM)
        assert ev._baseline is not None  # measured already (on the CPU: bytes and flops only)
        assert r.score_source(PROBLEM, FAST).verdict == "ok"


def test_max_problems_bounds_the_warm_evaluators(tmp_path):
    """With max_problems=1, a second problem closes the first one's evaluator (its workers stop);
    the first problem, asked for again, gets a fresh evaluator and the same verdict."""
    other = tmp_path / "plain_add.py"
    other.write_text(PROBLEM.read_text().replace("2.0 * x + y", "x + y"))
    with KernelReward(RewardConfig(device="cpu", trials=1, spares=1, max_problems=1, cache_size=0)) as r:
        first = r.score_source(PROBLEM, FAST)
        ev = r.evaluator(PROBLEM)
        workers = [ev.reference, *ev._spares]
        assert first.verdict == "ok" and all(w.alive() for w in workers)
        assert [o.verdict for o in r.score([FAST, WRONG], [other] * 2)] == ["incorrect", "ok"]
        assert r.warm_problems() == [(str(other.resolve()), "Model")]
        assert not any(w.alive() for w in workers)  # the evicted evaluator was closed
        assert r.score_source(PROBLEM, FAST).verdict == "ok" and r.evaluator(PROBLEM) is not ev
        assert r.warm_problems() == [(str(PROBLEM.resolve()), "Model")]
    with pytest.raises(ValueError, match="max_problems"):
        RewardConfig(max_problems=0)
    with pytest.raises(ValueError, match="make_reward"):
        KernelReward(RewardConfig(device="cpu", executor="ray"))


def test_a_kernel_that_is_not_general_earns_less_by_default():
    def record(generalizes):
        return Result(verdict=Verdict.OK, message="ok", generalizes=generalizes, speedup_vs_eager=3.0,
                      candidate_time=TimeStats(measured=True, median_ms=1.0))

    general, specialized, untested = (score_record(record(g)) for g in (True, False, None))
    assert general.speedup_term == 3.0 and untested.speedup_term == 3.0
    assert specialized.speedup_term == 1.5 and specialized.generalizes is False and "not general" in specialized.note
    assert score_record(record(False), RewardConfig(not_general=1.0)).speedup_term == 3.0
    with pytest.raises(ValueError, match="not_general"):
        RewardConfig(not_general=2.0)


def test_library_work_is_paid_no_speedup_by_default():
    record = Result(verdict=Verdict.OK, message="ok", speedup_vs_eager=1.6, library=True, library_share=0.93,
                    candidate_time=TimeStats(measured=True, median_ms=1.0))
    outcome = score_record(record)
    assert outcome.correct and outcome.speedup_term == 0.0 and outcome.library is True
    assert outcome.reward == pytest.approx(0.3) and "library kernels" in outcome.note  # no build check in this record
    assert score_record(record, RewardConfig(library=1.0)).speedup_term == pytest.approx(1.6)


def test_a_stalled_evaluation_and_a_fault_the_candidate_caused_earn_the_minimum():
    """A `timeout` on the whole evaluation's deadline, unlike one request past its own limit, earns
    nothing for having built; a fault the candidate caused on the evaluator's side (rule resource)
    is rejected: both 0, neither masked as an evaluator fault."""
    from tools.record import Check

    built = Check("build", True, "")
    stalled = Result(verdict=Verdict.TIMEOUT, message="deadline passed", checks=[built, Check("deadline", False, "")])
    hung = Result(verdict=Verdict.TIMEOUT, message="no answer", checks=[built, Check("worker", False, "")])
    resource = Result(verdict=Verdict.REJECTED, message="Rejected (rule resource)", checks=[built, Check("resource", False, "")])
    assert score_record(stalled).reward == 0.0 and score_record(resource).reward == 0.0
    assert not score_record(stalled).evaluator_fault and not score_record(resource).evaluator_fault
    assert score_record(hung).reward == pytest.approx(A)
