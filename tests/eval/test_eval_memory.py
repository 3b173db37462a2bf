"""What keeps the evaluator's GPU memory near one problem's own (three processes share the card:
the parent, the reference worker, the candidate's worker), checked on the CPU where it can be:
the reference's timing pool holds one set per slot, never two, and one slot for multi-GB sets; a
candidate names its inputs after forward() without copying them, and the parent refuses a
tensor whose values were not sent. The GPU side (per-process peaks at KernelBench's sizes) is
measured by benchmarks/eval_memory.py; docs/evaluator.md has the numbers.
"""
from __future__ import annotations

import weakref

import pytest
import torch

from tools.timing.plan import KEEP_BYTES, pool_slots
from tools.wire.transport import TransportError, decode, encode
from tools.worker.timing import InputPool


def test_a_pool_slot_lets_its_old_set_go_before_making_the_new_one():
    alive: weakref.WeakSet = weakref.WeakSet()
    seen: list[int] = []

    def make(seed: int) -> list[torch.Tensor]:
        seen.append(len(alive))  # sets still held while a new one is made
        t = torch.full((4,), float(seed))
        alive.add(t)
        return [t]

    pool = InputPool(make)
    first = pool.get(0, 1)
    assert pool.get(0, 1) is first  # the same seed: the same set, not made again
    del first
    second = pool.get(0, 2)
    assert seen == [0, 0] and float(second[0][0]) == 2.0
    pool.get(1, 3)
    assert seen == [0, 0, 1]  # another slot's set stays
    assert pool.held_bytes() == 2 * 4 * 4


def test_multi_gigabyte_sets_take_one_pool_slot():
    l2 = 50 << 20
    assert pool_slots(l2, KEEP_BYTES + 1) == 1
    assert pool_slots(l2, KEEP_BYTES) == 2  # a block of two calls and two-clocks' slope keep their sets
    assert pool_slots(l2, 1 << 20) == 64  # small sets: together more than twice L2, at most MAX_POOL


def test_held_inputs_carry_no_values_and_cannot_be_read_as_outputs():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    tree, payload = encode([x], hold=True)
    node = tree["items"][0]
    assert node["held"] is True and payload == b"" and "bytes" not in node and "arena" not in node
    assert node["ptr"][0] == x.untyped_storage().data_ptr()  # still says where it lies (the aliasing check)
    with pytest.raises(TransportError, match="not sent"):
        decode(tree, payload)


def test_both_workers_keep_large_cached_blocks_whole(tmp_path, monkeypatch):
    """torch's allocator setting is the same in the reference's and the candidate's workers: ours
    (large cached blocks never split, so a multi-GB output finds its block again), or the user's."""
    from tools.processes.spawner import worker_env
    from tools.sandbox.env import ALLOCATOR_CONF, candidate_env

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert "max_split_size_mb" in ALLOCATOR_CONF
    assert worker_env("cuda:0", {})["PYTORCH_CUDA_ALLOC_CONF"] == ALLOCATOR_CONF
    assert candidate_env("cuda:0", tmp_path, "run", {})["PYTORCH_CUDA_ALLOC_CONF"] == ALLOCATOR_CONF
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert worker_env("cuda:0", {})["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert candidate_env("cuda:0", tmp_path, "run", {})["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
