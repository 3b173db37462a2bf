"""The on-disk cache of torch.compile baselines and device ceilings."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from tools.timing.baseline_cache import (
    BaselineCache,
    CacheWarning,
    device_fingerprint,
    environment_fingerprint,
)
from tools.options import default_cache_dir
from tools.record import TimeStats
from tools.timing.roofline import Ceilings

ENV = {"gpu": "NVIDIA H200", "driver": "570.86", "cuda": "12.8", "torch": "2.13.0", "triton": "3.9.0", "python": "3.11.7"}
STATS = TimeStats(measured=True, median_ms=1.25, ci_low_ms=1.24, ci_high_ms=1.27, samples=40, note="converged")
CEIL = Ceilings("NVIDIA H200", 4.1e12, {"float32": 5e13, "float16": 7e14}, note="test")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path):
    return BaselineCache(tmp_path / "cache")


def test_default_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RATCHET_CACHE_DIR", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x"
    assert BaselineCache().root == tmp_path / "x"
    monkeypatch.delenv("RATCHET_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "ratchet"


def test_fingerprints_are_stable_and_selective():
    assert environment_fingerprint(ENV) == environment_fingerprint(dict(reversed(list(ENV.items()))))
    assert environment_fingerprint(ENV) == environment_fingerprint({**ENV, "hostname": "other"})
    for key in ENV:
        assert environment_fingerprint({**ENV, key: "changed"}) != environment_fingerprint(ENV)
    assert device_fingerprint({**ENV, "torch": "2.14"}) == device_fingerprint(ENV)
    assert device_fingerprint({**ENV, "gpu": "NVIDIA H100"}) != device_fingerprint(ENV)


def test_compile_time_hit(cache):
    assert cache.get_compile_time("p1", ENV) is None
    cache.put_compile_time("p1", ENV, STATS)
    assert cache.get_compile_time("p1", ENV) == STATS
    assert BaselineCache(cache.root).get_compile_time("p1", dict(ENV)) == STATS  # another instance


def test_miss_on_environment_change(cache):
    cache.put_compile_time("p1", ENV, STATS)
    for key in ("gpu", "driver", "torch", "triton", "cuda", "python"):
        assert cache.get_compile_time("p1", {**ENV, key: "other"}) is None


def test_miss_on_problem_change(cache):
    cache.put_compile_time("p1", ENV, STATS)
    assert cache.get_compile_time("p2", ENV) is None


def test_stored_environment_is_checked(cache):
    """An entry whose stored environment differs (a collision, a hand edit) is not used."""
    path = cache.put_compile_time("p1", ENV, STATS)
    entry = json.loads(path.read_text())
    assert entry["environment"]["gpu"] == "NVIDIA H200"
    entry["environment"]["driver"] = "999"
    path.write_text(json.dumps(entry))
    assert cache.get_compile_time("p1", ENV) is None


def test_ceilings_hit_and_invalidation(cache):
    assert cache.get_ceilings(ENV) is None
    cache.put_ceilings(ENV, CEIL)
    assert cache.get_ceilings({**ENV, "torch": "2.14"}) == CEIL
    assert cache.get_ceilings({**ENV, "driver": "580.1"}) is None


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        "[1, 2, 3]",
        '{"version": 1}',
        None,  # a valid entry whose value has the wrong type
    ],
)
def test_corrupt_entry_is_a_miss_with_a_warning(cache, content):
    path = cache.put_compile_time("p1", ENV, STATS)
    if content is None:
        entry = json.loads(path.read_text())
        entry["value"]["median_ms"] = "fast"
        content = json.dumps(entry)
    path.write_text(content)
    with pytest.warns(CacheWarning):
        assert cache.get_compile_time("p1", ENV) is None
    cache.put_compile_time("p1", ENV, STATS)  # and the next write repairs it
    assert cache.get_compile_time("p1", ENV) == STATS


def test_corrupt_ceilings_are_a_miss(cache):
    path = cache.put_ceilings(ENV, CEIL)
    entry = json.loads(path.read_text())
    del entry["value"]["copy_bytes_per_s"]
    path.write_text(json.dumps(entry))
    with pytest.warns(CacheWarning):
        assert cache.get_ceilings(ENV) is None


def test_writes_leave_no_temporary_files(cache):
    for i in range(5):
        cache.put_compile_time(f"p{i}", ENV, STATS)
    files = sorted(p.name for p in (cache.root / "compile").iterdir())
    assert len(files) == 5 and all(not f.startswith(".") for f in files)


WRITER = textwrap.dedent(
    """
    import sys
    from tools.timing.baseline_cache import BaselineCache
    from tools.record import TimeStats
    root, who, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    env = {"gpu": "G", "driver": "1", "cuda": "12", "torch": "2", "triton": "3", "python": "3.11"}
    cache = BaselineCache(root)
    for i in range(n):
        note = f"writer{who}-" + "x" * (2000 * who)  # different sizes: a torn write would show
        cache.put_compile_time("shared", env, TimeStats(True, float(who), float(who), float(who), i, note))
    """
)


def test_concurrent_writers_leave_valid_json(tmp_path):
    root = tmp_path / "cache"
    env = {"gpu": "G", "driver": "1", "cuda": "12", "torch": "2", "triton": "3", "python": "3.11"}
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(who), "150"], cwd=REPO)
        for who in (1, 2)
    ]
    cache = BaselineCache(root)
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # a torn read would raise here
        while any(p.poll() is None for p in procs):
            stats = cache.get_compile_time("shared", env)
            if stats is not None:
                seen.add(stats.median_ms)
        assert [p.wait() for p in procs] == [0, 0]
        final = cache.get_compile_time("shared", env)
    assert final is not None and final.median_ms in (1.0, 2.0) and final.samples == 149
    assert final.note.startswith(f"writer{int(final.median_ms)}-")
    assert seen <= {1.0, 2.0}
    assert [p.name for p in (root / "compile").iterdir()] == [cache.compile_path("shared", env).name]
