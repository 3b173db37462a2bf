"""The RL reward on a Ray cluster (tools/reward/on_ray.py), on a local CPU cluster: the pool scores a
batch of completions over two problems, broken ones included, one number each and in order, as a
local KernelReward does; problems travel as text; actors keep a bounded set of warm evaluators;
an actor that dies is restarted, or its completions score as evaluator faults."""
from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")  # the `ray` extra; absent on the GPU machine's image: skipped, not fatal

from tools.problem import ProblemError
from tools.reward import KernelReward, make_reward
from tools.reward.on_ray import ProblemText, RayKernelReward, route
from tools.reward.score import FORMAT_ERROR, RewardConfig

HERE = Path(__file__).parents[1]
PROBLEM = HERE / "rl_problems" / "scale_add.py"
sys.path.insert(0, str(PROBLEM.parent))
from scale_add_candidates import BROKEN, FAST, WRONG  # noqa: E402

pytestmark = pytest.mark.timeout(300)
CPU = dict(device="cpu", trials=1, spares=1)
SYNTAX_ERROR = FAST.replace("def forward(self, x, y):", "def forward(self, x, y)")


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=3, include_dashboard=False, object_store_memory=80 << 20)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def problems(tmp_path_factory) -> tuple[Path, Path]:
    """Two problems: a copy of scale_add (2x + y), and plain_add (x + y), where WRONG is right."""
    root = tmp_path_factory.mktemp("problems")
    scale, plain = root / "scale_add.py", root / "plain_add.py"
    scale.write_text(PROBLEM.read_text())
    plain.write_text(PROBLEM.read_text().replace("2.0 * x + y", "x + y"))
    return scale, plain


@pytest.fixture(scope="module")
def pool(cluster):
    with make_reward(RewardConfig(executor="ray", actors=2, **CPU)) as r:
        yield r


def _summary(outcome):
    return (outcome.reward, outcome.verdict, outcome.compiled, outcome.correct, outcome.evaluator_fault,
            outcome.problem, outcome.problem_hash, outcome.source_hash,
            outcome.record and (outcome.record["problem"], outcome.record["verdict"]))


def test_a_batch_over_two_problems_scores_like_a_local_reward(pool, problems):
    scale, plain = problems
    completions = [f"```python\n{FAST}```", "no code here", SYNTAX_ERROR, WRONG, BROKEN,
                   FAST, [{"role": "assistant", "content": f"```python\n{WRONG}```"}], FAST]
    columns = [scale, scale, scale, scale, plain, plain, plain, scale]
    assert isinstance(pool, RayKernelReward) and pool.__name__ == "ratchet_kernel_reward"
    rewards = pool(prompts=["p"] * len(completions), completions=completions, problem=[str(p) for p in columns],
                   completion_ids=[[1]] * len(completions))
    assert isinstance(rewards, list) and len(rewards) == len(completions)
    assert all(type(r) is float for r in rewards)
    # a syntax error is refused at extraction, on the driver; a bad import fails the actor's build
    assert [o.verdict for o in pool.last] == ["ok", FORMAT_ERROR, FORMAT_ERROR, "incorrect", "compile_error",
                                              "incorrect", "ok", "ok"]
    assert "SyntaxError" in pool.last[2].reason
    assert pool.last[0].source_hash == pool.last[7].source_hash  # the same job, evaluated once
    with KernelReward(RewardConfig(**CPU)) as local:
        expected = local(prompts=["p"] * len(completions), completions=completions, problem=[str(p) for p in columns])
        assert rewards == expected
        assert [_summary(o) for o in pool.last] == [_summary(o) for o in local.last]
    assert pool.last[0].problem == str(scale.resolve()) and pool.last[0].record["problem"] == str(scale.resolve())


def test_problems_travel_as_text(pool, problems, tmp_path):
    """An actor scores a problem whose only copy is the text it was sent: the driver's path does
    not exist, and it is only named in the outcome."""
    text = problems[1].read_text()
    origin = str(tmp_path / "gone" / "plain_add.py")
    import hashlib

    sent = ProblemText(text=text, name="plain_add.py", entry="Model", origin=origin,
                       digest=hashlib.sha256(text.encode()).hexdigest())
    [outcome] = ray.get(pool.actors[1].score.remote({sent.digest: sent}, [(sent.digest, WRONG)]), timeout=240)
    assert (outcome.verdict, outcome.problem, outcome.record["problem"]) == ("ok", origin, origin)
    # on the driver a copy of the file is read at each call: the copy may go away between calls
    copy = tmp_path / "scale_add.py"
    copy.write_text(PROBLEM.read_text())
    assert pool.score_source(copy, FAST).verdict == "ok"
    copy.unlink()
    with pytest.raises(ProblemError, match="scale_add.py: no such file"):
        pool.score_source(copy, FAST)


def test_a_bad_problem_is_the_callers_mistake(pool):
    bad = HERE / "problems" / "bad" / "get_inputs_not_list.py"
    with pytest.raises(ProblemError, match="get_inputs_not_list.py") as raised:
        pool([None], [FAST], problem=[str(bad)])
    assert "ratchet-reward-" not in str(raised.value)  # never the actor's scratch path


def test_a_killed_actor_is_restarted_and_answers(pool, problems):
    """Ray restarts a killed actor (max_restarts); the next call on it is answered by the new one."""
    scale, plain = problems
    before = list(pool.pids)
    for actor in pool.actors:
        ray.kill(actor, no_restart=False)
    outcomes = pool.score([FAST, WRONG], [scale, plain])
    assert [o.verdict for o in outcomes] == ["ok", "ok"] and not any(o.evaluator_fault for o in outcomes)
    after = ray.get([a.ready.remote() for a in pool.actors], timeout=60)
    assert set(after).isdisjoint(before)


def test_the_actor_bound_a_silent_actor_and_a_dead_one(cluster, problems, caplog):
    """One actor that keeps one warm evaluator: a second problem closes the first. A batch past
    ray_timeout_s scores as evaluator faults and the actor is killed; with no restarts left it is
    dead for good, and its completions keep scoring as faults; nothing raises."""
    scale, plain = problems
    config = RewardConfig(executor="ray", actors=1, max_problems=1, ray_max_restarts=0, fault_reward=0.25, **CPU)
    with RayKernelReward(config) as r:
        assert r.score_source(scale, FAST).verdict == "ok"
        assert r.warm_problems() == [["scale_add.py"]]
        assert r.score_source(plain, FAST).verdict == "incorrect"
        assert r.warm_problems() == [["plain_add.py"]]
        patient = r.config
        r.config = replace(patient, ray_timeout_s=0.01)  # scale_add's evaluator was closed: it takes seconds to start
        with caplog.at_level(logging.WARNING, logger="ratchet.reward"):
            assert r.score_source(scale, WRONG).evaluator_fault
            assert any("no answer within ray_timeout_s=0.01" in rec.getMessage() for rec in caplog.records)
            r.config = patient
            rewards = r(prompts=["p"] * 3, completions=[FAST, "no code", WRONG], problem=[str(scale)] * 3)
        assert rewards == [0.25, 0.0, 0.25]
        assert [(o.verdict, o.evaluator_fault) for o in r.last] == [("error", True), (FORMAT_ERROR, False), ("error", True)]
        assert r.last[0].problem == str(scale.resolve()) and "Actor" in r.last[0].reason
    assert any("could not answer" in rec.getMessage() for rec in caplog.records)


def test_routing_keeps_a_problem_on_its_actors():
    a, b = "0" * 63 + "1", "f" * 64
    one = route([(a, i) for i in range(4)], 4)
    assert sorted(one) == [0, 1, 2, 3]  # one problem, four actors: spread over all of them
    two = route([(a, 0), (b, 0), (a, 1), (b, 1), (a, 2)], 4)
    assert two == [0, 3, 1, 0, 0]  # two problems, four actors: each on two, from its home (a: 0, b: 3)
    assert route([(a, 0), (b, 0)], 1) == [0, 0]
    assert route([(a, 0), (a, 1)], 4)[0] == route([(a, 0), (b, 0), (b, 1)], 4)[0]  # its home, whatever else is there


def test_without_ray_the_option_says_how_to_install_it():
    code = ("import sys; sys.modules['ray'] = None\n"
            "from tools.reward import make_reward\n"
            "try:\n    make_reward(executor='ray', device='cpu')\n"
            "except ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=HERE.parent, check=True)
    assert "pip install -e '.[ray]'" in out.stdout and len(out.stdout.strip().splitlines()) == 1
    with pytest.raises(ValueError, match="executor"):
        RewardConfig(executor="spark")
