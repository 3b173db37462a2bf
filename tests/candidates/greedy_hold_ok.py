"""Honest but greedy (tests/gpu_problems/reference_workspace.py): one Triton kernel, and a worker
that holds all of the card but 8% from its constructor on. The reference's own 20% workspace was
reserved before this candidate ran (tools/worker/memory.py), so its trials still run: `ok`. Without
the reservation the reference ran out of memory while this candidate held the card, and an honest
kernel was charged (rule resource)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

LEAVE = 0.08


@triton.jit
def relu_add_scale_kernel(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.held = []
        if torch.cuda.is_available():
            total = torch.cuda.get_device_properties(0).total_memory
            free = torch.cuda.mem_get_info()[0]
            while free > LEAVE * total + (256 << 20):
                self.held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
                free = torch.cuda.mem_get_info()[0]

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        relu_add_scale_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, self.scale, BLOCK=1024)
        return out
