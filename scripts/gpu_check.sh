#!/usr/bin/env bash
# Run on the GPU machine (device tool): GPU tests, then the benchmark if it exists.
# Writes logs under $OUT (or ./build/gpu when OUT is unset).
set -uo pipefail
out=${OUT:-build/gpu}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FCOMPILE_CACHE_DIR=/tmp/fcompile-cache
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 -m pytest -m gpu tests/test_gpu.py -q -x -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log" | tail -25
if [ "${RUN_BENCH:-1}" = 1 ] && [ -d compiler_core/bench ] && [ -f compiler_core/bench/__main__.py ]; then
  python3 -m compiler_core.bench --device cuda --json "$out/results-cuda.json" 2>&1 | tee "$out/bench.log" | tail -30
fi
