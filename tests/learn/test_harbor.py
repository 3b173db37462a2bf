"""`ratchet export --format harbor`: the bundled suite as Harbor task folders, and one task's
verifier (its tests/test.sh, run as Harbor runs it, its paths moved to temporary folders and the
device to the CPU) against a correct, a wrong and a missing ModelNew: the reward files say what
tools/reward's policy gives the same record. Every run is also an attack: the agent's folder, the
verifier's working directory and PYTHONPATH, holds packages named agent, tools and torch that
exit when imported; the judge never imports them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from agent.cli import main
from agent.cli.exit_codes import EXIT_BAD_PROBLEM, EXIT_OK, EXIT_USAGE
from tools.reward.score import RewardConfig, score_record

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suite"
CANDIDATES = ROOT / "tests" / "suite_candidates"
# the candidate's own kernel, and not swish: builds, runs, is incorrect
WRONG = (CANDIDATES / "01_swish_scale.py").read_text().replace("x * tl.sigmoid(x) * scale", "tl.maximum(x, 0.0) * scale")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    out = tmp_path_factory.mktemp("harbor") / "tasks"
    assert main(["export", str(SUITE), "--format", "harbor", "--out", str(out)]) == EXIT_OK
    return out


def test_every_suite_problem_is_a_task_folder_in_harbors_layout(tasks):
    problems = sorted(p for p in SUITE.glob("*.py") if not p.name.startswith("_"))
    folders = sorted(p.name for p in tasks.iterdir())
    assert len(folders) == len(problems) and "01-swish-scale" in folders
    for problem in problems:
        task = tasks / problem.stem.lower().replace("_", "-")
        config = tomllib.loads((task / "task.toml").read_text())
        assert config["verifier"]["timeout_sec"] > 0 and config["agent"]["timeout_sec"] > 0
        assert config["environment"]["gpus"] == 1 and config["environment"]["allow_internet"] is False
        assert config["metadata"]["problem"] == problem.name and config["metadata"]["reward"]["precision"] == "fp32"
        instruction = (task / "instruction.md").read_text()
        assert problem.read_text().strip() in instruction and "/app/model_new.py" in instruction
        assert (task / "tests" / "reference.py").read_text() == problem.read_text()
        assert (task / "environment" / "problem.py").read_text() == problem.read_text()
        assert os.access(task / "tests" / "test.sh", os.X_OK)
        dockerfile = (task / "environment" / "Dockerfile").read_text()
        assert dockerfile.startswith("FROM ") and "pip install" in dockerfile and "ratchet-src.tar.gz" in dockerfile
    with tarfile.open(tasks / "01-swish-scale" / "tests" / "ratchet-src.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"ratchet/pyproject.toml", "ratchet/agent/learn/harbor.py", "ratchet/tools/reward/score.py",
            "ratchet/prompts/harbor_instruction.j2"} <= names
    assert not any("__pycache__" in n for n in names)


def verify(task: Path, tmp_path: Path, candidate: str | None, keep: bool = False) -> tuple[float, dict, dict | None]:
    """Run the task's tests/test.sh as Harbor would; the reward, outcome.json and the record.
    `keep`: the app folder is already there, as the test left it."""
    app, logs = tmp_path / "app", tmp_path / "logs" / "verifier"
    app.mkdir(parents=True, exist_ok=keep)
    if candidate is not None:
        (app / "model_new.py").write_text(candidate, encoding="utf-8")
    for package in ("agent", "tools", "torch"):  # what an agent might leave beside its kernel to be imported instead
        (app / package).mkdir()
        (app / package / "__init__.py").write_text("import sys\nsys.exit('hijacked: the judge imported the agent\\'s module')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RATCHET_"))}
    env.update(RATCHET_HARBOR_TESTS=str(task / "tests"), RATCHET_HARBOR_APP=str(app), RATCHET_HARBOR_LOGS=str(logs),
               RATCHET_HARBOR_PYTHON=sys.executable, RATCHET_HARBOR_DEVICE="cpu", SUITE_SCALE="small")
    env["PYTHONPATH"] = str(app)  # ignored: the judge runs isolated
    done = subprocess.run(["bash", str(task / "tests" / "test.sh")], cwd=app, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    reward = float((logs / "reward.txt").read_text())
    assert json.loads((logs / "reward.json").read_text()) == {"reward": reward}  # the reward alone: Harbor sums numbers
    outcome = json.loads((logs / "outcome.json").read_text())
    record = json.loads((logs / "record.json").read_text()) if (logs / "record.json").exists() else None
    return reward, outcome, record


def test_the_verifier_pays_a_correct_modelnew_as_the_reward_does(tasks, tmp_path):
    task = tasks / "01-swish-scale"
    reward, outcome, record = verify(task, tmp_path, (CANDIDATES / "01_swish_scale.py").read_text())
    assert outcome["verdict"] == "ok" and outcome["correct"] and outcome["compiled"]
    assert record is not None and record["verdict"] == "ok"
    assert reward == outcome["reward"] == score_record(record, RewardConfig()).reward == 0.4  # no timing on a CPU
    # the judge ran its own copy of ratchet (unpacked from tests/ into a temporary folder), not this checkout
    assert outcome["judge"]["source"] != str(ROOT) and outcome["judge"]["source"].endswith("/ratchet")


def test_the_verifier_pays_a_wrong_or_missing_modelnew_as_the_reward_does(tasks, tmp_path):
    task = tasks / "01-swish-scale"
    assert "tl.maximum" in WRONG  # the replacement took
    reward, outcome, record = verify(task, tmp_path / "wrong", WRONG)
    assert outcome["verdict"] == "incorrect" and not outcome["correct"] and outcome["compiled"]
    assert reward == score_record(record, RewardConfig()).reward == 0.1
    reward, outcome, record = verify(task, tmp_path / "missing", None)
    assert (reward, outcome["verdict"], record) == (0.0, "format_error", None)
    assert "model_new.py" in outcome["reason"]


def test_what_an_agent_leaves_cannot_raise_or_keep_a_reward(tasks, tmp_path):
    """An attacker's finds: a forged reward left in the logs folder with a candidate too large to
    read (the verifier kept the forgery when it failed), and a correct kernel saved with a BOM."""
    task = tasks / "01-swish-scale"
    app, logs = tmp_path / "huge" / "app", tmp_path / "huge" / "logs" / "verifier"
    logs.mkdir(parents=True)
    (logs / "reward.txt").write_text("1.0\n")
    (logs / "reward.json").write_text('{"reward": 1.0, "verdict": "ok"}\n')
    app.mkdir(parents=True)
    with open(app / "model_new.py", "wb") as f:
        f.truncate(1 << 40)  # sparse: a terabyte read would never end
    reward, outcome, record = verify(task, tmp_path / "huge", None, keep=True)
    assert (reward, outcome["verdict"], record) == (0.0, "format_error", None) and "larger than" in outcome["reason"]
    bom = "\ufeff" + (CANDIDATES / "01_swish_scale.py").read_text()
    reward, outcome, _ = verify(task, tmp_path / "bom", bom)
    assert (reward, outcome["verdict"]) == (0.4, "ok")


def test_a_bad_export_is_one_line(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\n")  # no Model, no get_inputs
    assert main(["export", str(broken), "--format", "harbor", "--out", str(tmp_path / "t")]) == EXIT_BAD_PROBLEM
    assert not (tmp_path / "t" / "broken").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(broken) in err[0]
    assert main(["export", str(SUITE / "01_swish_scale.py"), "--format", "harbor"]) == EXIT_USAGE  # no --out
    assert "needs --out DIR" in capsys.readouterr().err
    assert main(["export", str(SUITE / "01_swish_scale.py"), "--format", "harbor", "--out", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    # the folder is there now: never written over
    assert main(["export", str(SUITE / "01_swish_scale.py"), "--format", "harbor", "--out", str(tmp_path / "t")]) == EXIT_USAGE
    assert "already exists" in capsys.readouterr().err
