"""What the reference worker keeps of the device's memory between its requests (issue 36: the
parent and the reference take the device memory they need before a candidate runs).

Torch's caching allocator keeps what a request freed. Kept beyond need, it is memory a candidate's
worker lacks: a ResNet block's reference went from 18 to 140 GiB of an H200 during an evaluation,
and the next candidate workers could not make their CUDA context. Given back entirely, it is memory
a candidate may take before the reference's next request, whose out-of-memory is then a fault that
the evaluator retries and charges to the candidate (rule `resource`), even to an honest one that
only used the card. So the reference keeps reserved what its requests have needed at their peak,
at most KEEP_SHARE of the card, and gives back what its allocator caches beyond that (or beyond
what it holds, when more) plus the slack. The peak is measured from its first judging request on:
the evaluator's open (the distributions, the float64 sizes, eager on a quiet device) runs before
any candidate, so what a trial needs is reserved before a candidate can take it.
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
        """Give back what is cached beyond the slack over what is held or kept; then reserve up to
        what is kept, as one cached block the allocator splits for the next request's tensors."""
        import torch

        keep = self.keep()
        slack = max(CACHE_SLACK_BYTES, CACHE_SLACK_TIMES * self.own_bytes)
        reserved, held = torch.cuda.memory_reserved(self.device), torch.cuda.memory_allocated(self.device)
        if reserved - max(keep, held) > slack:
            torch.cuda.empty_cache()
            reserved = torch.cuda.memory_reserved(self.device)
        if reserved < keep:
            try:
                block = torch.empty(keep - reserved, dtype=torch.uint8, device=self.device)
            except torch.OutOfMemoryError:  # the device is short now: a request that needs it will say so
                return
            del block  # freed to torch's cache, which keeps it reserved for this process
