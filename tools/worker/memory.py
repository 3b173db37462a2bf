"""What the reference worker keeps of the device's memory between its requests (issue 36: the
parent and the reference take the device memory they need before a candidate runs).

Torch's caching allocator keeps what a request freed. Kept beyond need, it is memory a candidate's
worker lacks: a ResNet block's reference went from 18 to 140 GiB of an H200 during an evaluation,
and the next candidate workers could not make their CUDA context. Given back entirely, it is memory
a candidate may take before the reference's next request, whose out-of-memory is then a fault that
the evaluator retries and charges to the candidate (rule `resource`), even to an honest one that
only used the card. So the reference keeps what its allocator caches while that is at most what
its requests have needed at their peak (at most KEEP_SHARE of the card) plus the slack, and gives
all of it back (torch's empty_cache is all or nothing) when more is cached. The cached segments are
the ones its requests allocated, so the next request of the same sizes reuses them (the workers
run with max_split_size_mb:256: a cached segment of 256 MB or more serves only a request within
20 MB of its size, so a single block set aside ahead would not serve a request's tensors). The
peak is measured from the first judging request on: the evaluator's open (the distributions, the
float64 sizes, eager on a quiet device) runs before any candidate, and a worker restarted after a
death redoes that work before the next candidate runs (Evaluator._revive_reference).
"""
from __future__ import annotations

from typing import Any

# cached beyond what is held or kept, at most, around a judging request: this, or this many times the
# problem's own inputs, outputs and parameters. With 1 GiB alone, a 1 GiB problem's eager outputs were
# freed before every timed block, and honest candidates' second clock read slower (an H200, session 49)
CACHE_SLACK_BYTES = 1 << 30
CACHE_SLACK_TIMES = 4
KEEP_SHARE = 0.25  # of the card, at most, kept reserved for the reference's requests


class DeviceKeep:
    """The reference worker's device memory around its judging requests: before() and after() each."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.own_bytes = 0  # the problem's inputs, outputs and parameters (set when the problem is built)
        self.need = 0  # the most any judging request has held at once, so far (bytes)

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def before(self) -> None:
        if not self.on_gpu:
            return
        import torch

        self.settle()
        torch.cuda.reset_peak_memory_stats(self.device)

    def after(self) -> None:
        if not self.on_gpu:
            return
        import torch

        self.need = max(self.need, torch.cuda.max_memory_allocated(self.device))
        self.settle()

    def keep(self) -> int:
        """Bytes kept reserved between requests: the peak need, at most KEEP_SHARE of the card."""
        import torch

        return min(self.need, int(KEEP_SHARE * torch.cuda.get_device_properties(self.device).total_memory))

    def settle(self) -> None:
        """Give back what is cached when it is more than the slack over what is held or kept."""
        import torch

        slack = max(CACHE_SLACK_BYTES, CACHE_SLACK_TIMES * self.own_bytes)
        reserved, held = torch.cuda.memory_reserved(self.device), torch.cuda.memory_allocated(self.device)
        if reserved - max(self.keep(), held) > slack:
            torch.cuda.empty_cache()
