#!/usr/bin/env bash
# One call on a lent GPU machine: unpack the carried packages, then bring up SGLang through drive.py,
# trying the attention setups in order until one serves and profiles; MTP next if time is left.
# Usage (repository root of the carried copy): bash run_device.sh CARRY_DIR OUT_DIR [ATTEMPTS...]
# An attempt is NAME:drive.py-flags-with-commas, e.g. "fm:--decode-attn,flashmla,--capture-trace";
# a NAME starting with '?' runs only when the attempt before it failed (a fallback).
set -u
CARRY=$1; OUTD=$2; shift 2
LIMIT_S=${LIMIT_S:-570}
mkdir -p "$OUTD" /tmp/runs
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUTD/device.log"; }
log "unpack"
tar xJf "$CARRY/site.tar.xz" -C /tmp || { log "unpack failed"; exit 1; }
cp "$CARRY/repo/benchmarks/gpu/sglang_real/stub_missing.py" /tmp/site/sitecustomize.py
export PYTHONPATH=/tmp/site:$CARRY/repo STUB_MISSING_MODULES=IPython,xgrammar,loguru,jsonschema,soundfile
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvcc --version | tail -2;
  python3 -c "import torch, triton, transformers, sglang, sgl_kernel, deep_gemm, flashinfer; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, 'sglang', sglang.__version__, 'sgl_kernel', sgl_kernel.__version__, 'flashinfer', flashinfer.__version__)"; } 2>&1 | tail -8 | tee -a "$OUTD/device.log"
cd "$CARRY/repo"
rc=1
for attempt in "$@"; do
  name=${attempt%%:*}; flags=${attempt#*:}; flags=${flags//,/ }
  if [ "${name:0:1}" = "?" ]; then name=${name:1}; [ $rc -eq 0 ] && { log "skip fallback $name"; continue; }; fi
  left=$((LIMIT_S - SECONDS - 25))
  if [ $left -lt 150 ]; then log "skip $name: ${left}s left"; continue; fi
  log "attempt $name ($flags), ${left}s left"
  timeout -k 5 $left python3 benchmarks/gpu/sglang_real/drive.py --model-dir benchmarks/gpu/sglang_real/model \
      --out /tmp/runs/$name --label $name --ready-timeout-s $((left - 60)) $flags > /tmp/runs/$name.out 2>&1
  rc=$?
  log "attempt $name rc=$rc"; tail -5 /tmp/runs/$name.out | tee -a "$OUTD/device.log"
  grep -n "Error\|error\|Traceback" /tmp/runs/$name/server.log 2>/dev/null | tail -15 | tee -a "$OUTD/device.log"
  tar czf "$OUTD/$name.tar.gz" -C /tmp/runs "$name" "$name.out" || true
done
log "done"
