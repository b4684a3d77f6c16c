#!/usr/bin/env bash
# Our Transformer's training step on a lent H200, under JAX (the machine has no TensorFlow).
#
# The lent GPU machine has Python 3.12 with JAX + CUDA,
# numpy, h5py, absl-py, ml-dtypes, rich, pyyaml, but not Keras and two of its small needs.
# Their wheels (~3 MB) travel with the working tree through the device tool's `carry`:
#
#   1. here, once (tools/bench/wheels_cache/ is git-ignored; never commit wheels):
#        python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#          --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#          -d tools/bench/wheels_cache keras==3.15.1 optree namex
#      (the platform flags matter: optree is compiled, and a plain `pip download` here would
#      fetch this machine's cp311 build, which the device's Python 3.12 cannot load)
#   2. device tool: run(command="bash tools/bench/gpu_step.sh", carry=["tools/bench/wheels_cache"],
#                       timeout_s=480)
#
# What it does: installs the carried wheels into /tmp/site (no index, no deps), prints the
# GPU, then runs tools/bench/gpu_step.py with KERAS_BACKEND=jax: paper base config (vocab 37,000),
# 500 x 50 = 25,000 source + 25,000 target tokens per step, mixed_bfloat16, the whole step one
# jax.jit (XLA) program; then the same in float32 for comparison. Results go to stdout and, on
# the device machine, to $OUT/gpu_step_*.json. Extra arguments go to gpu_step.py, e.g.
#   bash tools/bench/gpu_step.sh --smoke        # tiny shapes, runs on any CPU with jax + keras
# Expected cost: first-step compilation ~1 minute per policy, then seconds per policy.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUTDIR=${OUT:-/tmp}
export KERAS_BACKEND=jax

if ! "$PY" -c "import keras" 2>/dev/null; then
  if ! ls tools/bench/wheels_cache/*.whl >/dev/null 2>&1; then
    echo "keras is not importable and tools/bench/wheels_cache/ has no wheels: see the header of $0" >&2
    exit 2
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site tools/bench/wheels_cache/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
# let XLA take memory as it needs instead of preallocating 75% (keeps peak memory honest)
export XLA_PYTHON_CLIENT_PREALLOCATE=false

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm \
  --format=csv,noheader || true

if [[ " $* " == *" --smoke "* ]]; then
  "$PY" tools/bench/gpu_step.py "$@" --json "$OUTDIR/gpu_step_smoke.json"
  exit 0
fi
echo "== mixed_bfloat16 (the benchmark) =="
"$PY" tools/bench/gpu_step.py --policy mixed_bfloat16 --json "$OUTDIR/gpu_step_bf16.json" "$@"
echo "== float32 (for comparison; no matmul-rate check) =="
"$PY" tools/bench/gpu_step.py --policy float32 --matmul-n 0 --steps 10 --json "$OUTDIR/gpu_step_fp32.json" "$@"
