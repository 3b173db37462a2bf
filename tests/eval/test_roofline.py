"""Least bytes, flop counts (real and fake tensors: tools/worker/cost.py), the floor's arithmetic,
impossibility (tools/timing/roofline.py)."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from tools.timing.roofline import IMPOSSIBLE_SLACK, Ceilings, achieved_fraction, build_roofline, floor_ms, impossible
from tools.worker.cost import (
    _fp32_matmul_precision,
    analyse_problem,
    count_flops,
    least_bytes,
    measure_ceilings,
    module_tensors,
    problem_dtype,
)

H = Ceilings(
    device_name="Test GPU",
    copy_bytes_per_s=4e12,
    matmul_flops_per_s={"float32": 50e12, "tf32": 400e12, "float16": 800e12, "bfloat16": 790e12},
)


class Add(nn.Module):
    def forward(self, a, b):
        return a + b


class MatMul(nn.Module):
    def forward(self, a, b):
        return a @ b


# ---------------------------------------------------------------------------- least bytes


def test_elementwise_add_moves_12_mb():
    a, b = torch.randn(1_000_000), torch.randn(1_000_000)
    assert least_bytes([a, b], [], Add()(a, b)) == 12_000_000


def test_tensors_sharing_storage_count_once():
    x = torch.randn(100, 100)
    assert least_bytes([x, x.t(), x.view(-1)], [], x) == 40_000
    # An expanded tensor moves only its storage; a half-view counts as the larger tensor.
    y = torch.randn(4).expand(1000, 4)
    assert least_bytes([y, x[:50]], [], None) == 16 + 20_000


def test_non_tensors_count_zero_and_nesting_is_walked():
    x = torch.zeros(10, dtype=torch.int64)
    assert least_bytes([x, 3, 2.5, "s", None], [], (x[:1], {"k": torch.ones(5, dtype=torch.float16)})) == 80 + 10


def test_linear_counts_weight_and_bias_once():
    lin = nn.Linear(512, 128)
    tied = nn.Sequential(lin, nn.ReLU(), nn.Linear(128, 128), nn.ReLU())
    tied.append(tied[2])  # the same layer twice: its parameters are still counted once
    params = module_tensors(tied)
    x = torch.randn(64, 512)
    expected = (512 * 128 + 128 + 128 * 128 + 128) * 4 + x.numel() * 4 + 64 * 128 * 4
    with torch.no_grad():
        assert least_bytes([x], params, tied(x)) == expected


def test_buffers_are_counted():
    bn = nn.BatchNorm1d(32)
    assert least_bytes([], module_tensors(bn), None) == (32 + 32 + 32 + 32) * 4 + 8  # + num_batches_tracked


# ---------------------------------------------------------------------------------- flops


def test_matmul_flops_are_2mnk():
    a, b = torch.randn(256, 512), torch.randn(512, 128)
    assert count_flops(MatMul(), [a, b]) == 2 * 256 * 128 * 512


def test_elementwise_problems_count_no_flops():
    a = torch.randn(1000)
    assert count_flops(Add(), [a, a]) == 0


def test_fake_tensors_size_a_huge_matmul_without_allocating():
    m, k, n = 65536, 65536, 4096  # 16 GiB and 1 GiB of fp32: never allocated
    with FakeTensorMode():
        a, b = torch.empty(m, k), torch.empty(k, n)
        flops = count_flops(MatMul(), [a, b])
        bytes_moved = least_bytes([a, b], [], MatMul()(a, b))
    assert flops == 2 * m * n * k
    assert bytes_moved == (m * k + k * n + m * n) * 4


class Mlp(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_analyse_problem_fake_matches_real():
    build = lambda: Mlp(512, 128)  # noqa: E731
    inputs = lambda: [torch.randn(256, 512, dtype=torch.float32)]  # noqa: E731
    fake = analyse_problem(build, inputs, fake=True)
    real = analyse_problem(build, inputs, fake=False)
    assert fake == real
    assert fake.flops == 2 * 256 * 128 * 512
    assert fake.bytes_moved == (256 * 512 + 512 * 128 + 128 + 256 * 128) * 4
    assert fake.dtype == torch.float32


def test_problem_dtype_is_the_one_holding_most_bytes():
    ts = [torch.zeros(10, dtype=torch.float32), torch.zeros(100, dtype=torch.bfloat16), torch.zeros(999, dtype=torch.int64)]
    assert problem_dtype(ts) == torch.bfloat16
    assert problem_dtype([torch.zeros(3, dtype=torch.int32)]) == torch.float32


# ------------------------------------------------------------------------------ the floor


def test_memory_bound_floor():
    assert floor_ms(12_000_000, 0, torch.float32, H) == pytest.approx(12e6 / 4e12 * 1e3)


def test_compute_bound_floor_per_dtype():
    flops = 2 * 8192**3
    assert floor_ms(3 * 8192**2 * 2, flops, torch.float16, H) == pytest.approx(flops / 800e12 * 1e3)
    assert floor_ms(0, flops, "bfloat16", H) == pytest.approx(flops / 790e12 * 1e3)
    # fp32 may run as TF32 inside a Triton dot, so its floor uses the faster rate by default.
    assert floor_ms(0, flops, torch.float32, H) == pytest.approx(flops / 400e12 * 1e3)
    assert H.rate(torch.float32, fp32_uses_tf32=False) == 50e12
    # Unmeasured dtypes take the fastest rate: the floor stays a lower bound.
    assert H.rate(torch.float64) == 800e12


def test_achieved_fraction_and_impossible():
    floor = 1.0
    assert achieved_fraction(floor, 4.0) == 0.25
    assert impossible(0.5, floor)
    assert impossible(IMPOSSIBLE_SLACK * floor * 0.99, floor)
    assert not impossible(0.95, floor)
    assert not impossible(3.0, floor)
    with pytest.raises(ValueError):
        achieved_fraction(floor, 0.0)


def test_build_roofline_record():
    r = build_roofline(12_000_000, 0, torch.float32, H, candidate_median_ms=0.006)
    assert r.measured and r.bytes_moved == 12_000_000 and r.flops == 0
    assert r.floor_ms == pytest.approx(0.003)
    assert r.achieved_fraction == pytest.approx(0.5)
    assert "memory-bound" in r.note and "no matrix ops" in r.note and "Test GPU" in r.note and r.bound == "memory"
    c = build_roofline(1000, 2 * 8192**3, torch.float16, H)
    assert "compute-bound" in c.note and c.achieved_fraction is None and c.bound == "compute"


def test_ceilings_round_trip():
    assert Ceilings.from_dict(H.to_dict()) == H


# ------------------------------------------------------------------------- measurement


def test_measure_ceilings_needs_cuda():
    with pytest.raises(ValueError):
        measure_ceilings("cpu")


def test_precision_context_restores_the_flag():
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision if hasattr(matmul, "fp32_precision") else matmul.allow_tf32
    with _fp32_matmul_precision(True):
        pass
    with _fp32_matmul_precision(False):
        pass
    after = matmul.fp32_precision if hasattr(matmul, "fp32_precision") else matmul.allow_tf32
    assert after == before
    torch.get_float32_matmul_precision()  # the legacy getter still works (no API mixing error)


@pytest.mark.gpu
def test_measure_ceilings_on_gpu():
    before = torch.get_float32_matmul_precision()
    c = Ceilings.from_dict(measure_ceilings("cuda"))
    assert torch.get_float32_matmul_precision() == before
    assert 1e11 < c.copy_bytes_per_s < 2e13
    assert set(c.matmul_flops_per_s) == {"float32", "tf32", "float16", "bfloat16"}
    assert c.matmul_flops_per_s["float16"] > c.matmul_flops_per_s["float32"]
    assert c.device_name == torch.cuda.get_device_name()
