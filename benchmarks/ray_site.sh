#!/usr/bin/env bash
# Ray for the offline GPU machine, small enough to travel with the working tree.
#
# The GPU image has no Ray, and Ray's CPython 3.12 wheel (about 80 MB) with its dependencies does
# not fit the 64 MiB a device call carries beside .whl/. This installs plain `ray` (no dashboard:
# `--ray local` starts none) for CPython 3.12 x86-64 into a folder, drops the libraries ratchet
# never imports (RLlib, Data, Serve, Train, Tune, the LLM library, the Java jars, the dashboard's
# web client) and packs the rest as OUT (default .device/raysite.tar.xz, about 30 MB).
#
#   bash benchmarks/ray_site.sh [OUT]          # on the CPU machine, from the project root
#   tar -C /tmp -xJf OUT && export PYTHONPATH=/tmp/site:/tmp/raysite:$PWD PATH=/tmp/raysite/bin:$PATH
#                                              # on the GPU machine, with OUT carried along
#
# batch_scale.py's Ray configurations then run there (docs/batch.md, "Throughput").
set -euo pipefail
out=${1:-.device/raysite.tar.xz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip install -q --target "$work/raysite" --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  'ray>=2.9' 2>&1 | grep -v -e "is ignored" -e "Running pip as the 'root' user" || true
rm -rf "$work/raysite/ray/"{rllib,data,serve,train,tune,llm,jars} "$work/raysite/ray/dashboard/client"
find "$work/raysite" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$(dirname "$out")"
tar -C "$work" -cJf "$out" raysite
du -h "$out"
