#!/usr/bin/env bash
# One GPU session's checks, in order; each step logs and the next runs even if one fails.
#   OUT=dir bash benchmarks/gpu/run_gpu_checks.sh            (steps 1-3 and 5)
#   OUT=dir RUN_DEMO=0 RUN_NCU=1 bash benchmarks/gpu/run_gpu_checks.sh   (step 4)
#   RUN_PEAKS=0 skips step 5; NCU_TIMEOUT_S bounds step 4 (default 420 s)
# 1. demo_gpu through the no-Ray entry (D4 table, run time);
# 2. signature vs module ranges on that CUDA trace (hand-written template);
# 3. a template learned from steps 0-1 of the trace, checked on the held-out steps;
# 4. Nsight Compute on the engine's top kernels; 5. measured matmul / copy peaks.
set -u
OUT=${OUT:?set OUT to a results directory}
mkdir -p "$OUT/work"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
step() { local name=$1; shift; echo "=== $name: $*"; local t0=$SECONDS
  "$@" > "$OUT/work/$name.log" 2>&1; local rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s"; tail -n 40 "$OUT/work/$name.log"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/work/gpu.txt" 2>&1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' >> "$OUT/work/gpu.txt" 2>&1
cat "$OUT/work/gpu.txt"
if [ "${RUN_DEMO:-1}" = 1 ]; then
step demo_gpu python3 -m harness.engines.embedded.standalone --scenario demo_gpu --out "$OUT/work/runs"
TRACE=$(ls "$OUT"/work/runs/demo_gpu-*/traces/*.trace.json.gz 2>/dev/null | head -1)
if [ -n "$TRACE" ]; then
  step check_hand python3 -m harness.engines.embedded.attribution_check "$TRACE" --signature embedded-hf-deepseek-v3-cuda
  step learn python3 -m harness.cli learn-signature "$TRACE" --base embedded-hf-deepseek-v3-cuda \
    --name embedded-hf-deepseek-v3-cuda --steps 0,1 --out "$OUT/work/learned-cuda.yaml"
  step check_learned python3 benchmarks/gpu/held_out_check.py "$TRACE" "$OUT/work/learned-cuda.yaml" 0,1
fi
fi
if [ "${RUN_PEAKS:-1}" = 1 ]; then
step peaks timeout 120 python3 benchmarks/gpu/measure_peaks.py
fi
if [ "${RUN_NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
  ncu --version > "$OUT/work/ncu_version.txt" 2>&1
  ncu --help 2>&1 | grep -A6 -E -- "--(kernel-name-base|print-kernel-base|nvtx-include)" >> "$OUT/work/ncu_version.txt"
  t=${NCU_TIMEOUT_S:-420}
  step ncu timeout "$t" python3 -m harness.cli ncu --scenario demo_gpu --top 20 --out "$OUT/work/ncu" --timeout-s $((t - 20))
fi
tar -C "$OUT/work" -czf "$OUT/gpu_results.tar.gz" . && ls -la "$OUT"
