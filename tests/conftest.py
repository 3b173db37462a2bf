"""Shared test set-up: kernels run in Triton's interpreter when there is no GPU; the tests, in a
folder per role, import the helpers beside this file (helpers_*.py, loopback.py)."""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Every Ray cluster the tests start is a throwaway one on this host, without token authentication.
# Set for the whole session, before any test connects: a driver process keeps the mode of its first
# ray.init, and one that first joined a cluster with tokens then had every actor of a cluster without
# them cancelled before it ran (ActorDiedError: tests/learn/test_reward_ray.py, then a Ray test in the
# same xdist worker)
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def pytest_collection_modifyitems(config, items):
    """RATCHET_TEST_SHARD=i/n keeps every n-th test from the i-th (0-based): n pytest processes
    share one GPU machine's cards and cores (`pytest -m gpu` takes about 25 s per built-in problem)."""
    shard = os.environ.get("RATCHET_TEST_SHARD")
    if not shard:
        return
    index, _, count = shard.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise ValueError(f"RATCHET_TEST_SHARD={shard!r}: expected i/n with 0 <= i < n")
    mine = [n % int(count) == int(index) for n in range(len(items))]
    config.hook.pytest_deselected(items=[item for item, keep in zip(items, mine) if not keep])
    items[:] = [item for item, keep in zip(items, mine) if keep]
