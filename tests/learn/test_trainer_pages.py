"""Each trainer page of docs/trainers/ (linked from docs/learning.md) has a block marked
`<!-- cpu-check -->`: it is run here, as written, from the repository root on the CPU (the
`ratchet` on PATH is this interpreter's; a fixed port in a page becomes a free one)."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs" / "trainers").glob("*.md"))
BLOCK = re.compile(r"<!-- cpu-check -->\n```bash\n(.*?)\n```", re.S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_trainer_path_has_a_page_linked_from_learning_md():
    assert [p.name for p in PAGES] == ["harbor.md", "openenv.md", "trl-reward.md"]
    learning = (ROOT / "docs" / "learning.md").read_text()
    for page in PAGES:
        assert f"trainers/{page.name}" in learning, page.name
        assert len(BLOCK.findall(page.read_text())) == 1, f"{page.name}: one cpu-check block"


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_a_pages_cpu_check_runs_as_written(page):
    script = BLOCK.findall(page.read_text())[0].replace("8765", str(free_port()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RATCHET_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", "-e", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, f"{page.name}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
