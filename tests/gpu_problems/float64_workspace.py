"""GPU test problem: relu(x + y) * scale over 8M fp32 elements, whose float64 evaluation (the
reference's, tools/worker/float64.py) needs a transient 50% of the card and whose float32 one needs
nothing extra. The reference keeps at most a quarter of the card reserved (tools/worker/memory.py),
so a candidate that holds the card down to 15% free makes that float64 evaluation run out of
memory (tests/eval/test_faults_gpu.py); it must not be left unjudged in float64."""
import torch
import torch.nn as nn

SHARE = 0.50


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        if x.is_cuda and x.dtype == torch.float64:
            total = torch.cuda.get_device_properties(x.device).total_memory
            workspace = torch.empty(int(total * SHARE), dtype=torch.uint8, device=x.device)
            workspace[:1].zero_()
            del workspace
        return torch.relu(x + y) * self.scale


def get_inputs():
    return [torch.randn(1 << 23), torch.randn(1 << 23)]


def get_init_inputs():
    return [1.5]
