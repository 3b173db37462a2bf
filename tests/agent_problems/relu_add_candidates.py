"""Candidate sources the scripted model sends in the agent's end-to-end tests (relu_add.py)."""

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        relu_add_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, out, n, BLOCK=BLOCK_SIZE)
        return out
'''

# a build error: the module does not load
BROKEN = KERNEL.replace("import triton.language as tl", "import triton.language as tl\nfrom triton import no_such_name") + "\nBLOCK_SIZE = 256\n"
# correct, small blocks
FIXED = KERNEL + "\nBLOCK_SIZE = 256\n"
# correct, bigger blocks (faster on a GPU)
FASTER = KERNEL + "\nBLOCK_SIZE = 1024\n"
# wrong: forgets the relu
WRONG = KERNEL.replace("tl.maximum(x + y, 0.0)", "x + y") + "\nBLOCK_SIZE = 1024\n"
# a cheat: defines a kernel but falls back to torch inside try/except
CHEAT = KERNEL.replace(
    "        out = torch.empty_like(x)\n",
    "        try:\n            return torch.relu(x + y)\n        except Exception:\n            pass\n        out = torch.empty_like(x)\n",
) + "\nBLOCK_SIZE = 1024\n"
