"""GPU test problem: relu(x + y) * scale over 8M fp32 elements, whose eager forward needs a
transient 20% of the card (a library's workspace). tests/eval/test_faults_gpu.py: the reference
keeps that reserved from the evaluator's open on (tools/worker/memory.py), so a candidate that takes
all but 8% of the card while it runs leaves the reference its trials."""
import torch
import torch.nn as nn

SHARE = 0.20


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        if x.is_cuda:
            total = torch.cuda.get_device_properties(x.device).total_memory
            workspace = torch.empty(int(total * SHARE), dtype=torch.uint8, device=x.device)
            workspace[:1].zero_()
            del workspace
        return torch.relu(x + y) * self.scale


def get_inputs():
    return [torch.randn(1 << 23), torch.randn(1 << 23)]


def get_init_inputs():
    return [1.5]
