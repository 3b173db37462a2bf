"""Build products kept between evaluations, one namespace per source and toolchain.

What a candidate's build compiled (a load_inline extension, Triton's compiled kernels and
launchers) is worth keeping: a CUDA build takes tens of seconds, a Triton JIT half a second per
kernel, and the same source is evaluated again (a resubmission, the head-to-head against the
best, identical completions in RL). But a candidate must not be able to plant files where
another source, the reference or the torch.compile baseline reads. So:

- only the parent writes here, and only what a worker of that very source handed over, to the
  namespace sha256(kind, source hash, toolchain fingerprint); a worker of another source is
  never given it;
- names are checked (relative, plain components, below `cuda/` or `triton/`) and sizes capped;
  a namespace is published whole (written aside, then renamed into place) and never rewritten;
- the whole cache is capped (`cap_bytes`); the least recently used namespaces go first.

Files travel as a manifest [{"path", "offset", "length"}] plus one payload (tools/wire/protocol.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

PART = re.compile(r"^[A-Za-z0-9_.+=-]{1,160}$")
ROOTS = ("cuda", "triton")
MAX_FILES = 4096
MAX_DEPTH = 4


class ArtifactError(Exception):
    """A manifest or a file that the cache refuses."""


class ArtifactCache:
    def __init__(self, root: Path, cap_bytes: int = 4 << 30, namespace_cap_bytes: int = 512 << 20) -> None:
        self.root = root
        self.cap_bytes = cap_bytes
        self.namespace_cap_bytes = namespace_cap_bytes
        self._lock = threading.Lock()
        root.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def namespace(kind: str, source_hash: str, toolchain: dict[str, Any]) -> str:
        blob = json.dumps([kind, source_hash, toolchain], sort_keys=True, default=str)
        return f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:32]}"

    def get(self, namespace: str) -> tuple[list[dict[str, Any]], bytes] | None:
        """(manifest, payload) of a published namespace, or None. Marks it recently used."""
        directory = self.root / namespace
        if not (directory / ".complete").exists():
            return None
        files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != ".complete")
        manifest, chunks, offset = [], [], 0
        for path in files:
            data = path.read_bytes()
            manifest.append({"path": str(path.relative_to(directory)), "offset": offset, "length": len(data)})
            chunks.append(data)
            offset += len(data)
        os.utime(directory / ".complete")
        return manifest, b"".join(chunks)

    def published(self, namespace: str) -> bool:
        return (self.root / namespace / ".complete").exists()

    def put(self, namespace: str, manifest: Any, payload: bytes) -> int:
        """Publish what a worker handed over; returns the number of files kept. Raises
        ArtifactError (nothing is written) on a name, a size or a count the cache refuses."""
        entries = check_manifest(manifest, len(payload), self.namespace_cap_bytes)
        with self._lock:
            if self.published(namespace):
                return 0
            staging = Path(tempfile.mkdtemp(prefix=f".{namespace}.", dir=self.root))
            try:
                for rel, start, length in entries:
                    target = staging.joinpath(*rel)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with open(target, "xb") as f:
                        f.write(payload[start:start + length])
                (staging / ".complete").touch()
                final = self.root / namespace
                if final.exists():  # a half-published leftover of a crash
                    shutil.rmtree(final)
                os.rename(staging, final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            self._evict()
        return len(entries)

    def _evict(self) -> None:
        spaces = []
        for d in self.root.iterdir():
            marker = d / ".complete"
            if d.is_dir() and marker.exists():
                size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
                spaces.append((marker.stat().st_mtime, size, d))
        total = sum(size for _, size, _ in spaces)
        for _, size, d in sorted(spaces):
            if total <= self.cap_bytes:
                break
            shutil.rmtree(d, ignore_errors=True)
            total -= size


def check_manifest(manifest: Any, payload_bytes: int, cap: int) -> list[tuple[tuple[str, ...], int, int]]:
    if not isinstance(manifest, list) or len(manifest) > MAX_FILES:
        raise ArtifactError("the manifest is not a list of at most 4096 files")
    out, total, seen = [], 0, set()
    for entry in manifest:
        if not isinstance(entry, dict):
            raise ArtifactError("a manifest entry is not an object")
        path, start, length = entry.get("path"), entry.get("offset"), entry.get("length")
        if not (isinstance(path, str) and isinstance(start, int) and isinstance(length, int) and start >= 0 and length >= 0):
            raise ArtifactError("a manifest entry has a bad path, offset or length")
        parts = tuple(path.split("/"))
        if (len(parts) > MAX_DEPTH or parts[0] not in ROOTS or not all(PART.match(p) and p not in (".", "..") for p in parts)
                or parts in seen):
            raise ArtifactError(f"refusing the file name {path!r}")
        if start + length > payload_bytes:
            raise ArtifactError(f"{path!r} lies outside the payload")
        total += length
        if total > cap:
            raise ArtifactError(f"more than {cap >> 20} MiB of build products")
        seen.add(parts)
        out.append((parts, start, length))
    return out
