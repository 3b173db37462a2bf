"""Candidate sources for tests/rl_problems/scale_add.py (reward, environment and export tests)."""

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, out, n, BLOCK=BLOCK_SIZE)
        return out
'''

# honest, large blocks (the fast one on a GPU)
FAST = KERNEL + "\nBLOCK_SIZE = 1024\n"
# honest, tiny blocks (slow on a GPU: 64 launches' worth of programs)
SLOW = KERNEL + "\nBLOCK_SIZE = 16\n"
# builds and runs, but forgets the scale
WRONG = KERNEL.replace("2.0 * x + y", "x + y") + "\nBLOCK_SIZE = 1024\n"
# does not build: imports a name triton does not have
BROKEN = KERNEL.replace("import triton.language as tl", "import triton.language as tl\nfrom triton import no_such_name") + "\nBLOCK_SIZE = 1024\n"
# a guard violation: a try/except fallback to torch
CHEAT_GUARD = KERNEL.replace(
    "        out = torch.empty_like(x)\n",
    "        try:\n            return 2.0 * x + y\n        except Exception:\n            pass\n        out = torch.empty_like(x)\n",
) + "\nBLOCK_SIZE = 1024\n"
# a run-time integrity violation: correct outputs from torch, its own kernel defined but never launched
CHEAT_UNLAUNCHED = KERNEL.replace(
    "        out = torch.empty_like(x)\n",
    "        return 2.0 * x + y\n        out = torch.empty_like(x)\n",
) + "\nBLOCK_SIZE = 1024\n"
