import math

import torch
import torch.nn as nn

batch_size = 2
seq_len = 40


class Model(nn.Module):
    """minGPT's causal self-attention as written, q, k, v given as [B, T, C]: heads split and merged
    back, the mask a registered tril buffer sliced to T. The width (48) and the heads (3) are read
    at run time: the head count from `self.n_head` (it follows the constructor's argument), the
    head dim as `C // n_head`."""

    def __init__(self, n_embd: int, n_head: int, max_seqlen: int):
        super().__init__()
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, t, c = q.size()
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(b, t, c)


def get_inputs():
    return [torch.randn(batch_size, seq_len, 48) for _ in range(3)]


def get_init_inputs():
    return [48, 3, 64]
