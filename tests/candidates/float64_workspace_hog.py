"""Attack (tests/gpu_problems/float64_workspace.py): an honest kernel whose worker holds the card's
memory down to 15% free from its constructor on, so that the reference's float64 evaluation (50% of
the card, a quarter kept reserved) runs out of memory while the float32 work fits. Left as "does not fit", the sets would be
judged by the float32 tolerance alone (where a TF32 product passes) for this candidate and, cached
per seed, for the next ones (attack50, H1). Sound: rule `resource` (or its own out-of-memory)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

LEAVE = 0.15


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
