#!/usr/bin/env bash
# One device-tool call that runs the GPU stages a session asks for, each under its own time limit,
# writing full logs under $OUT and a short summary last. Stages (environment variables):
#   GPU_TESTS=1 GPU_ARGS=-v          the -m gpu tests (GPU_TEST_FILES below, or as given)
#   PROBE="python3 scripts/x.py" PROBE_T=120   one more command, its output in probe.txt
#   TESTS="tests/test_call_path.py ..." TESTS_T=300   whole test files (CPU tests too) under the image's torch
#   OPINFO=native,complex64 OPINFO_T=300   tests/opinfo_sweep.py --device cuda: the CPU's native set (fp32),
#                                    and/or every op with complex64 samples
#   DYN=llama,bert DYN_DTYPES=fp32,bf16 DYN_T=300    scripts/zoo_dynamic.py, inference
#   TRAIN=gpt2,llama TRAIN_DTYPES=fp32 TRAIN_T=200   scripts/zoo_dynamic.py --mode training
#   MODELS=gpt2,bert MODELS_DTYPE=fp32,bf16 MODES=inference MODELS_T=300   python -m tests.models (timed table;
#     ZOO_ARGS="--no-inductor --mask with" passes more of its options)
#   BENCH=1 BENCH_ONLY=gpt_block BENCH_T=300   python -m compiler_core.bench --device cuda (all workloads by default)
#   PROFILE=gpt_block,mlp_train_step PROFILE_T=200   scripts/profile_workload.py, kernel by kernel
#   DECODE=1 DECODE_T=300 DECODE_ONLY=position_cache_attention   scripts/decode_bench.py --device cuda: one
#                                    generated token, KV caches (all rows by default)
#   DPROF=dynamic DPROF_STEPS=20 DPROF_T=150   scripts/profile_decode_host.py --kernels for ours, then Inductor:
#                                    host profile, synchronized step time and the device's kernels
#   FUZZ=1 FUZZ_SEEDS=0-149 FUZZ_ARGS=--train FUZZ_T=200   tests/fuzz_programs.py --device cuda (random programs)
set -uo pipefail
out=${OUT:-build/gpu}
mkdir -p "$out"
# build/pylib: pure-Python packages the device image lacks (expecttest, which OpInfo imports), carried by the caller.
export PYTHONPATH=$PWD:$PWD/build/pylib PYTHONUNBUFFERED=1 FCOMPILE_CACHE_DIR=/tmp/fcompile-cache
summary="$out/summary.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" > "$summary"
# The device's copy of the tree may carry an old .git: the caller passes COMMIT=$(git rev-parse --short HEAD).
echo "commit ${COMMIT:-unknown (pass COMMIT=...)}" >> "$summary"
stage() {  # stage NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  echo "# $name rc=$? ${SECONDS}s-${t0}s" >> "$out/$name.txt"
  { echo "== $name (rc in log tail)"; grep -E "passed|failed|^[a-z_0-9]+ +(float|bfloat|fp|bf|eager)|ERROR|rc=|MISMATCH|RAISES|ok=[0-9]+$|^fell" "$out/$name.txt" | tail -40; } >> "$summary"
}
GPU_TEST_FILES="${GPU_TEST_FILES:-tests/test_numerics.py tests/test_gpu.py tests/test_views_gpu.py tests/test_symbolic.py tests/test_complex_gpu.py tests/test_model_ops.py tests/test_accumulate.py tests/test_integer_ops.py}"
# shellcheck disable=SC2086
[ -n "${GPU_TESTS:-}" ] && stage gpu-tests "${GPU_T:-300}" python3 -m pytest -m gpu $GPU_TEST_FILES ${GPU_ARGS:--q} -p no:cacheprovider -p no:logging
# shellcheck disable=SC2086
[ -n "${PROBE:-}" ] && stage probe "${PROBE_T:-120}" $PROBE
# shellcheck disable=SC2086
[ -n "${TESTS:-}" ] && stage tests "${TESTS_T:-300}" python3 -m pytest $TESTS -q -p no:cacheprovider -p no:logging
OPINFO=${OPINFO:-}
for set in ${OPINFO//,/ }; do
  case $set in
    native) sweep=(--ops-from tests/opinfo_native.json) ;;
    *) sweep=(--dtype "$set") ;;
  esac
  stage "opinfo-$set" "${OPINFO_T:-300}" python3 tests/opinfo_sweep.py --device cuda "${sweep[@]}" --workers 12 \
    --max-samples 3 --json-out "$out/opinfo-cuda-$set.json"
  grep -v "^{" "$out/opinfo-$set.txt" | tail -8 >> "$summary"
done
[ -n "${DYN:-}" ] && stage dyn "${DYN_T:-300}" python3 scripts/zoo_dynamic.py --device cuda --names "$DYN" --dtypes "${DYN_DTYPES:-fp32,bf16}"
[ -n "${TRAIN:-}" ] && stage train "${TRAIN_T:-200}" python3 scripts/zoo_dynamic.py --device cuda --mode training --names "$TRAIN" --dtypes "${TRAIN_DTYPES:-fp32}"
[ -n "${MODELS:-}" ] && stage zoo "${MODELS_T:-300}" python3 -m tests.models --device cuda --only "$MODELS" --dtype "${MODELS_DTYPE:-fp32,bf16}" --modes "${MODES:-inference}" --repeats "${REPEATS:-5}" --json "$out/zoo.json" ${ZOO_ARGS:-}
[ -n "${BENCH:-}" ] && stage bench "${BENCH_T:-300}" python3 -m compiler_core.bench --device cuda --json "$out/bench-cuda.json" ${BENCH_ONLY:+--only "$BENCH_ONLY"}
[ -n "${FUZZ:-}" ] && stage fuzz "${FUZZ_T:-200}" python3 tests/fuzz_programs.py --device cuda --seeds "${FUZZ_SEEDS:-0-149}" --lines 14 ${FUZZ_ARGS:-}
[ -n "${DECODE:-}" ] && stage decode "${DECODE_T:-300}" python3 scripts/decode_bench.py --device cuda --json "$out/decode-cuda.json" ${DECODE_ONLY:+--only "$DECODE_ONLY"}
for contender in ${DPROF:+ours inductor}; do
  stage "dprof-$DPROF-$contender" "${DPROF_T:-150}" python3 scripts/profile_decode_host.py --device cuda \
    --row "$DPROF" --steps "${DPROF_STEPS:-20}" --contender "$contender" --kernels
  grep -E " ms a step" "$out/dprof-$DPROF-$contender.txt" >> "$summary"
done
if [ -n "${PROFILE:-}" ]; then
  for w in ${PROFILE//,/ }; do
    stage "profile-$w" "${PROFILE_T:-200}" python3 scripts/profile_workload.py "$w" --device cuda
    grep -E "^== " "$out/profile-$w.txt" >> "$summary"
  done
fi
cat "$summary"
