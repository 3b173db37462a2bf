"""A small on-disk cache of what is measured once: torch.compile baselines and device ceilings.

Layout under the cache directory ($RATCHET_CACHE_DIR, else ~/.cache/ratchet):

    compile/<sha256(problem hash, environment fingerprint)>.json   one torch.compile TimeStats
    ceilings/<device fingerprint>.json                             one device's Ceilings

One file per entry, so writers never read-modify-write a shared file. Each write goes to a
temporary file in the same directory and is moved into place with os.replace (atomic on
POSIX): two processes writing the same entry at once leave one complete entry (the last
writer's), and a reader sees the old or the new entry, never half of one.

Every entry stores the environment it was measured in, and a lookup compares it with the
caller's: a different GPU, driver, CUDA, torch, triton or Python misses (the key already
differs; the stored copy also guards against a hash collision or a hand-edited file). A file
that does not parse or has the wrong shape is a miss with a CacheWarning, never an exception.

The environment is a dict with the keys of FINGERPRINT_KEYS (missing keys count as None):
"gpu" (device name), "driver" (NVIDIA driver version), "cuda" (torch.version.cuda), "torch",
"triton", "python".
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from tools.options import default_cache_dir
from tools.record import TimeStats
from tools.timing.roofline import Ceilings

CACHE_VERSION = 1
FINGERPRINT_KEYS = ("gpu", "driver", "cuda", "torch", "triton", "python")
DEVICE_KEYS = ("gpu", "driver", "cuda")  # what the ceilings depend on


class CacheWarning(UserWarning):
    """A cache entry could not be used (corrupt, wrong shape); it was treated as a miss."""


def _subset(env: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, str | None]:
    return {k: (None if env.get(k) is None else str(env[k])) for k in keys}


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def environment_fingerprint(env: Mapping[str, Any]) -> str:
    """A stable hex digest of the environment's FINGERPRINT_KEYS (other keys are ignored)."""
    return _digest(_subset(env, FINGERPRINT_KEYS))[:32]


def device_fingerprint(env: Mapping[str, Any]) -> str:
    """A stable hex digest of what the ceilings depend on: GPU, driver and CUDA version."""
    return _digest(_subset(env, DEVICE_KEYS))[:32]


def atomic_write_json(path: Path, data: Any) -> None:
    """Write JSON to `path` atomically (temporary file in the same directory, then os.replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _time_stats(value: Any) -> TimeStats | None:
    """A TimeStats from its dict, or None when the dict has the wrong shape or types."""
    if not isinstance(value, dict) or set(value) - {f.name for f in fields(TimeStats)}:
        return None
    number = (int, float)
    checks = [isinstance(value.get("measured", False), bool), isinstance(value.get("samples", 0), int),
              isinstance(value.get("note", ""), str)]
    checks += [value.get(k) is None or isinstance(value[k], number) for k in ("median_ms", "ci_low_ms", "ci_high_ms")]
    return TimeStats(**value) if all(checks) else None


class BaselineCache:
    """torch.compile baselines keyed by (problem hash, environment); ceilings keyed by device."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    # -- paths

    def compile_path(self, problem_hash: str, env: Mapping[str, Any]) -> Path:
        name = _digest([problem_hash, environment_fingerprint(env)])[:40]
        return self.root / "compile" / f"{name}.json"

    def ceilings_path(self, env: Mapping[str, Any]) -> Path:
        return self.root / "ceilings" / f"{device_fingerprint(env)}.json"

    # -- torch.compile baselines

    def get_compile_time(self, problem_hash: str, env: Mapping[str, Any]) -> TimeStats | None:
        key = {"problem_hash": problem_hash}
        value = self._read(self.compile_path(problem_hash, env), "compile_time", key, _subset(env, FINGERPRINT_KEYS))
        if value is None:
            return None
        stats = _time_stats(value)
        if stats is None:
            return self._bad(self.compile_path(problem_hash, env), "the value is not a TimeStats")
        return stats

    def put_compile_time(self, problem_hash: str, env: Mapping[str, Any], stats: TimeStats) -> Path:
        path = self.compile_path(problem_hash, env)
        key = {"problem_hash": problem_hash}
        self._write(path, "compile_time", key, _subset(env, FINGERPRINT_KEYS), asdict(stats))
        return path

    # -- device ceilings

    def get_ceilings(self, env: Mapping[str, Any]) -> Ceilings | None:
        path = self.ceilings_path(env)
        value = self._read(path, "ceilings", {}, _subset(env, DEVICE_KEYS))
        if value is None:
            return None
        try:
            return Ceilings.from_dict(value)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            return self._bad(path, f"the value is not Ceilings ({e!r})")

    def put_ceilings(self, env: Mapping[str, Any], ceilings: Ceilings) -> Path:
        path = self.ceilings_path(env)
        self._write(path, "ceilings", {}, _subset(env, DEVICE_KEYS), ceilings.to_dict())
        return path

    # -- entries

    def _write(self, path: Path, kind: str, key: dict[str, Any], env: dict[str, Any], value: Any) -> None:
        entry = {
            "version": CACHE_VERSION,
            "kind": kind,
            "key": key,
            "environment": env,
            "created": time.time(),
            "value": value,
        }
        atomic_write_json(path, entry)

    def _read(self, path: Path, kind: str, key: dict[str, Any], env: dict[str, Any]) -> Any:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            return self._bad(path, f"unreadable ({e})")
        try:
            entry = json.loads(text)
        except json.JSONDecodeError as e:
            return self._bad(path, f"not valid JSON ({e})")
        if not isinstance(entry, dict) or "value" not in entry:
            return self._bad(path, "not a cache entry")
        if entry.get("version") != CACHE_VERSION or entry.get("kind") != kind:
            return None  # another version's or kind's entry: a plain miss
        if entry.get("key") != key or entry.get("environment") != env:
            return None  # measured for another problem or environment
        return entry["value"]

    @staticmethod
    def _bad(path: Path, why: str) -> None:
        warnings.warn(f"ignoring cache entry {path}: {why}", CacheWarning, stacklevel=3)
        return None
