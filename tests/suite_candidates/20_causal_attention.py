"""Known-correct: causal attention in one Triton kernel, skipping key blocks past the diagonal. Dots
in IEEE fp32: with TF32 a few outputs exceeded the fp32 bound on an H200."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq, scale, CAUSAL: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    # one program per (batch*head, block of queries); online softmax over key blocks
    bh = tl.program_id(0)
    start_m = tl.program_id(1) * BLOCK_M
    rm = start_m + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)  # the head dimension, padded to a power of two and masked
    d_ok = rd[None, :] < DIM
    base = bh * seq * DIM
    q = tl.load(q_ptr + base + rm[:, None] * DIM + rd[None, :], mask=(rm[:, None] < seq) & d_ok, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    end = seq
    if CAUSAL:  # keys past this block's last query are all masked: skip them
        end = tl.minimum(seq, start_m + BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        rn = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + base + rn[:, None] * DIM + rd[None, :], mask=(rn[:, None] < seq) & d_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        valid = rn[None, :] < seq
        if CAUSAL:
            valid = valid & (rn[None, :] <= rm[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + rn[:, None] * DIM + rd[None, :], mask=(rn[:, None] < seq) & d_ok, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + base + rm[:, None] * DIM + rd[None, :], acc / l_i[:, None], mask=(rm[:, None] < seq) & d_ok)


def attention(q, k, v, causal):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    *lead, seq, dim = q.shape
    bh = q.numel() // (seq * dim)
    o = torch.empty_like(q)
    block = 64 if seq >= 64 else 16
    attention_kernel[(bh, triton.cdiv(seq, block))](q, k, v, o, seq, dim ** -0.5, CAUSAL=causal,
                                                     BLOCK_M=block, BLOCK_N=block, DIM=dim,
                                                     BLOCK_D=max(16, triton.next_power_of_2(dim)))
    return o


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return attention(q, k, v, causal=True)
