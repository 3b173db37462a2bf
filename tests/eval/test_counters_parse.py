"""The digest of Nsight Compute's raw CSV page (tools/counters/ncu.py), on ncu's own output from an
H100 (tests/eval/data/ncu_raw_h100.csv: two torch kernels, 2025.3.1, units as ncu scales them), and
on what a candidate could print into the same log."""
from __future__ import annotations

import json
from pathlib import Path

from tools.counters import ncu

RAW = (Path(__file__).parent / "data" / "ncu_raw_h100.csv").read_text()


def test_ncu_output_of_an_h100_digests_to_the_kernels_counters():
    kernels = ncu.parse(RAW)
    assert [k.calls for k in kernels] == [1, 1]
    first, second = ncu.digest(kernels, own=["MulFunctor"])
    assert first["name"].startswith("void unnamed>::distribution_elementwise_grid_stride_kernel")
    assert not first["own"] and second["own"]
    assert first["time_us"] == 16.736 and second["time_us"] == 11.264  # ns in the file
    # the fill kernel is compute-bound, the multiply DRAM-bound: what the model is to see
    assert first["sm_pct"] == 63.73 and first["dram_pct"] == 0.1
    assert second["dram_pct"] == 48.7 and second["sm_pct"] == 6.17
    assert first["occupancy_pct"] == 50.57 and first["theoretical_occupancy_pct"] == 62.5
    assert (first["registers"], first["block"], first["grid"], first["shared_kb"]) == (44, 256, 1056, 1)
    assert (second["registers"], second["block"], second["grid"]) == (32, 128, 4096)
    assert first["memory_pct"] == 24.05 and second["occupancy_pct"] == 70.62
    assert not any("__" in key for entry in (first, second) for key in entry)
    assert all(s["reason"] != "selected" for entry in (first, second) for s in entry["top_stalls"])
    assert "dram_gb_s" not in first  # not in this capture (a --metrics of its own: see the GPU test)
    assert [s["reason"] for s in first["top_stalls"]] == ["not_selected", "math_pipe_throttle", "wait"]
    assert second["top_stalls"][0] == {"reason": "long_scoreboard", "cycles_per_issue": 111.68}


def test_lines_that_are_not_ncus_rows_are_skipped_and_nothing_raises():
    lines = RAW.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    noisy = "\n".join(lines[: header + 2] + ['"0","1"', 'not csv at all', '"x",' * 600, '"', *lines[header + 2:]])
    assert [k.name for k in ncu.parse(noisy)] == [k.name for k in ncu.parse(RAW)]
    for junk in ("", '"ID","Kernel Name"\n"0",', '"ID","Kernel Name","gpu__time_duration.sum"\n"","",""\n"1","k","nan"\n',
                 '"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n"1","' + "k" * 10_000 + '","1e400"\n'):
        assert all(len(k.name) <= ncu.NAME_CHARS for k in ncu.parse(junk))


def test_own_kernels_are_whole_names_in_ncus_names():
    kernels = ncu.parse(RAW)
    assert [k["own"] for k in ncu.digest(kernels, own=["kernel"])] == [False, False]  # a word inside others' names
    assert [k["own"] for k in ncu.digest(kernels, own=["vectorized_elementwise_kernel"])] == [False, True]


def test_what_a_candidate_prints_into_the_log_cannot_break_the_digest():
    lines = RAW.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    width = len(lines[header].split('","'))
    huge = '"' + "y" * (200 << 10)  # longer than csv's field limit: csv.Error if read
    forged = '"7",' + ",".join(['"1e308"'] * (width - 1))  # a row of the header's width, numbers past range
    text = "\n".join([*lines, huge, forged])
    digest = ncu.digest(ncu.parse(text), own=[])
    json.dumps(digest, allow_nan=False)  # no NaN or Infinity reaches the model's JSON
    assert len(digest) <= ncu.TOP_KERNELS


def test_a_refusal_reads_as_one_line():
    assert "ERR_NVGPUCTRPERM" in ncu.refusal("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    assert ncu.refusal("==PROF== Disconnected\n==ERROR== The application returned an error code (2).") == \
        "==ERROR== The application returned an error code (2)."
    assert ncu.refusal("ran fine") is None
