"""The built-in offline policy (`ratchet optimize --model builtin`, the default with no endpoint).

- `recognize`: trace the problem's forward (torch.fx make_fx on meta tensors) into a small IR
  and pick a template (pointwise, rowwise, colwise, matmul), or say why not;
- `codegen`: draft the candidate module from the Jinja templates in `kernels/`;
- `search`: the kernel configurations and the choice of the next one from the feedback;
- `policy`: `BuiltinPolicy`, the `ModelClient` tying them together.
"""
from agent.builtin.policy import NAME, BuiltinPolicy, NothingRecognized

EXIT_UNRECOGNIZED = 12  # `ratchet optimize`: the built-in policy recognized nothing; nothing attempted

__all__ = ["BuiltinPolicy", "NothingRecognized", "NAME", "EXIT_UNRECOGNIZED"]
