"""Malformed: does not parse."""
import torch


class Model(torch.nn.Module:
    pass
