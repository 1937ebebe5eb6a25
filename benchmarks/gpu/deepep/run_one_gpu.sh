#!/usr/bin/env bash
# One call on a lent one-GPU machine: build DeepEP (build_deepep.sh), then the one-GPU checks (smoke_one_gpu.py).
# Usage (repository root): bash benchmarks/gpu/deepep/run_one_gpu.sh SRC_TARBALL OUTDIR
# LIMIT_S (default 580) bounds the whole call; the build gets what is left after reserving SMOKE_S (default 170).
# OUTDIR receives build.log, build.json, deepep-site.tar.gz (when built), smoke.json, smoke.log, run.log.
set -u
if [ $# -ne 2 ]; then echo "usage: run_one_gpu.sh SRC_TARBALL OUTDIR" >&2; exit 2; fi
SRC_TARBALL=$1; OUTDIR=$2
HERE=$(cd "$(dirname "$0")" && pwd)
LIMIT_S=${LIMIT_S:-580}; SMOKE_S=${SMOKE_S:-170}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export DEEPEP_SITE=${DEEPEP_SITE:-/tmp/deepep-site} DEEPEP_WORK=${DEEPEP_WORK:-/tmp/deepep-build}
mkdir -p "$OUTDIR"
log() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$OUTDIR/run.log"; }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; echo "cpus: $(nproc)"; } 2>&1 | tee -a "$OUTDIR/run.log"
BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-$((LIMIT_S - SMOKE_S - 20))}
[ "$BUILD_TIMEOUT_S" -lt 60 ] && BUILD_TIMEOUT_S=60
log "build (timeout ${BUILD_TIMEOUT_S}s)"
BUILD_TIMEOUT_S=$BUILD_TIMEOUT_S bash "$HERE/build_deepep.sh" "$SRC_TARBALL" "$OUTDIR"
status=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["status"])' "$OUTDIR/build.json" 2>/dev/null || echo unknown)
log "build status: $status"
if [ "$status" = built ]; then
  left=$((LIMIT_S - SECONDS - 10))
  log "smoke (budget ${left}s)"
  python3 "$HERE/smoke_one_gpu.py" --site "$DEEPEP_SITE" --src "$DEEPEP_WORK/DeepEP" --out "$OUTDIR" --budget-s "$left" 2>&1 \
    | tee -a "$OUTDIR/run.log"
else
  log "smoke skipped: nothing built"
fi
log "done"
exit 0
