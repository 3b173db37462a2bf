"""Every family of the built-in policy, imported so each registers itself (agent.builtin.registry).
A new family is its module (recognize, render, space, `FAMILY = register(...)`), its template in
kernels/, and its line here."""
from agent.builtin import (argreduce, attention, batchnorm, colwise, conv, conv_reduce, cross_entropy,  # noqa: F401
                           fallback, gemv, matmul, mm_reduce, pointwise, pooling, rowwise, scans, twolevel)
