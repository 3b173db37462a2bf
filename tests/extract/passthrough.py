"""Pass-through candidates for an extracted problem file: its own `Model` renamed and wrapped as
`ModelNew`, with or without one small Triton kernel (a copy of the output)."""
from __future__ import annotations

import re

COPY_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class ModelNew(_Reference):
    def forward(self, *xs):
        y = super().forward(*xs).contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        _copy_kernel[(triton.cdiv(n, 1024),)](y, out, n, BLOCK=1024)
        return out
'''

PLAIN = '''

class ModelNew(_Reference):
    pass
'''


def passthrough(problem_source: str, kernel: bool) -> str:
    """The problem's module as ModelNew (the reference class renamed; get_inputs and
    get_init_inputs left out), its output copied by a Triton kernel when `kernel`."""
    body = problem_source.split("\nbatch_size =")[0].split("\n\ndef get_inputs")[0]
    body = re.sub(r"^class Model\(", "class _Reference(", body, flags=re.M)
    return body + (COPY_KERNEL if kernel else PLAIN)
