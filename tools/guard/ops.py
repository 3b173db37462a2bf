"""Which aten ops compute something: the parent's policy for single-op problems and the
problem's description. GLUE_OPS allocate, view, copy or read back; everything else computes.
docs/evaluator.md ("Evaluator policy") lists them for users.
"""
from __future__ import annotations

# aten ops that move or allocate memory but compute nothing: allowed to be left to torch even in
# single-op problems.
GLUE_OPS = frozenset({
    # allocation
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "scalar_tensor",
    "zero_", "fill_", "arange", "lift_fresh", "lift_fresh_copy", "resize_", "set_",
    # views and reshapes
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "permute", "transpose", "t",
    "expand", "expand_as", "squeeze", "unsqueeze", "flatten", "unflatten", "slice", "select",
    "narrow", "split", "split_with_sizes", "chunk", "unbind", "alias", "detach", "view_as",
    "movedim", "contiguous", "view_as_real", "view_as_complex", "unfold",
    # copies and moves between dtypes, layouts and devices
    "clone", "copy_", "_to_copy", "to", "_copy_from", "_copy_from_and_resize",
    # reading a scalar back
    "item", "_local_scalar_dense", "is_nonzero", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "size", "stride", "dim",
})



def compute_ops(ops: dict[str, int]) -> dict[str, int]:
    """The ops that compute something (not allocation, views or copies)."""
    return {k: v for k, v in ops.items() if k.split("::")[-1] not in GLUE_OPS}
