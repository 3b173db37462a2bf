#!/usr/bin/env bash
# Issue 39's measurement on a GPU: extract -> batch (built-in policy) -> apply, for the GPT-2-small
# block and the ResNet-18 of models.py. Usage: benchmarks/your_model/run.sh OUT [gpt2|resnet18]...
# Environment: TOP (problems per model, default 6), WALL (seconds per problem, default 60).
set -u -o pipefail
out=${1:?an output folder}; shift
here=$(cd "$(dirname "$0")" && pwd)
TOP=${TOP:-6}; WALL=${WALL:-60}
[ $# -gt 0 ] || set -- gpt2 resnet18
for name in "$@"; do
  case $name in
    gpt2) model=$here/models.py:GPT2Block; shape=(--shape 8x1024x768) ;;
    resnet18) model=$here/models.py:ResNet18; shape=(--shape 64x3x224x224) ;;
    *) echo "unknown model $name" >&2; exit 2 ;;
  esac
  dir=$out/$name
  mkdir -p "$dir"
  echo "== $name: extract"
  ratchet extract "$model" "${shape[@]}" --out "$dir/problems" --top "$TOP" || continue
  echo "== $name: batch (built-in policy, $WALL s per problem)"
  ratchet batch "$dir/problems" --model builtin --max-attempts 4 --max-wall-s "$WALL" \
    --workspace "$dir/ws" --out "$dir/run" 2>&1 | tail -25
  echo "== $name: apply"
  ratchet apply "$model" "${shape[@]}" --from "$dir/problems" --workspace "$dir/ws" --out "$dir/applied"
done
