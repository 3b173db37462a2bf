"""A non-editable install works: the wheel holds every module of agent/ and tools/ (packages are
found, not listed), their package data and the prompt templates, and `ratchet eval` runs from
it, worker processes and sandbox included, with no source tree in reach. An editable install
(what CI and developers use) would hide a subpackage or a template left out of the wheel."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # the environment's own setuptools when it is what pyproject.toml asks for (no download); else
    # pip's isolated build (a Python 3.11 venv comes with setuptools 65)
    isolation = ["--no-build-isolation"] if _setuptools_major() >= 68 else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=240)
    (found,) = out.glob("*.whl")
    return found


def _setuptools_major() -> int:
    if importlib.util.find_spec("setuptools") is None:
        return 0
    from importlib.metadata import version

    return int(version("setuptools").split(".")[0])


def test_the_wheel_holds_every_module_its_data_and_the_prompts(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {str(p.relative_to(ROOT)) for folder in ("agent", "tools") for p in (ROOT / folder).rglob("*")
              if p.is_file() and p.suffix in (".py", ".j2", ".json") and "__pycache__" not in p.parts}
    assert not sorted(wanted - names), f"left out of the wheel: {sorted(wanted - names)}"
    data = {n.split("/data/", 1)[1] for n in names if ".data/data/" in n}
    prompts = {f"share/ratchet/prompts/{p.name}" for p in (ROOT / "prompts").glob("*.j2")}
    assert prompts and prompts <= data, f"prompts left out of the wheel: {sorted(prompts - data)}"


def test_ratchet_eval_runs_from_the_installed_wheel(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, text=True, timeout=240)
    work = tmp_path / "work"  # no source tree here: only the installed copy can be imported
    work.mkdir()
    for name in ("swish_problem.py", "swish_candidate.py"):
        (work / name).write_text((ROOT / "examples" / name).read_text())
    env = {**os.environ, "PYTHONPATH": str(target), "RATCHET_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("RATCHET_PROMPTS", None)
    code = ("import sys, agent, tools, agent.loop.render as r; "
            "print(agent.__file__, tools.__file__, r.PROMPTS_DIR); "
            "from agent.cli import main; "
            "sys.exit(main(['eval', 'swish_problem.py', 'swish_candidate.py', '--device', 'cpu', '--no-timing']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    where = done.stdout.splitlines()[0].split()
    assert all(p.startswith(str(target)) for p in where), where  # the wheel's copy, its prompts too
    assert "swish_candidate.py: ok" in done.stdout
