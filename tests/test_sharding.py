"""RATCHET_TEST_SHARD=i/n (tests/conftest.py): n shards of a run are disjoint and together the whole run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collected(shard: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "RATCHET_TEST_SHARD"}
    if shard:
        env["RATCHET_TEST_SHARD"] = shard
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/eval/test_eval_memory.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_shards_split_a_run_without_overlap():
    whole = collected(None)
    first, second = collected("0/2"), collected("1/2")
    assert len(whole) >= 2 and first and second
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(whole)
