#!/usr/bin/env bash
# The README's main command on a lent GPU machine, against a real SGLang server:
#   ray start --head; ray job submit --working-dir . -- python3 harness/run.py --scenario S ...
# Two calls on one warm machine, since the packages are larger than one transfer:
#   A: bash run_device_ray.sh unpack-site OUT   (carries .gpu/a/site.tar.xz; unpacks it to /tmp/site,
#      then warms SGLang's JIT caches with one plain server start through sglang_real/drive.py)
#   B: bash run_device_ray.sh job OUT           (carries .gpu/b/ray.tar.xz; unpacks it to /tmp/raysite,
#      starts a Ray head, submits the job(s) named by JOBS, keeps the run directories and Ray's logs under OUT)
# Run from the root of the carried repository copy.
set -u
MODE=$1; OUTD=$2; LIMIT_S=${LIMIT_S:-570}
SCENARIO=${SCENARIO:-benchmarks/gpu/sglang_ray/scenario_dsv3_4l.yaml}
mkdir -p "$OUTD"
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUTD/device-$MODE.log"; }
export STUB_MISSING_MODULES=IPython,xgrammar,loguru,jsonschema,soundfile
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p /tmp/moe-harness-model/dsv3-4l
cp benchmarks/gpu/sglang_real/model/config.json /tmp/moe-harness-model/dsv3-4l/

if [ "$MODE" = unpack-site ]; then
  log "unpack site"
  rm -rf /tmp/site && tar xJf .gpu/a/site.tar.xz -C /tmp || { log "unpack failed"; exit 1; }
  cp benchmarks/gpu/sglang_real/stub_missing.py /tmp/site/sitecustomize.py
  export PYTHONPATH=/tmp/site:$PWD
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$OUTD/device-$MODE.log"
  log "warm-up server start (JIT caches) through drive.py"
  timeout -k 5 $((LIMIT_S - SECONDS - 20)) python3 benchmarks/gpu/sglang_real/drive.py \
      --model-dir /tmp/moe-harness-model/dsv3-4l --out /tmp/warmup --label warmup --batch 16 --num-steps 2 \
      --ready-timeout-s $((LIMIT_S - SECONDS - 80)) > "$OUTD/warmup.out" 2>&1
  log "warm-up rc=$?"; tail -4 "$OUTD/warmup.out" | tee -a "$OUTD/device-$MODE.log"
  exit 0
fi

# MODE=job
[ -f /tmp/site/sitecustomize.py ] || { log "no /tmp/site: run 'unpack-site' first on this warm machine"; exit 1; }
log "unpack ray"
rm -rf /tmp/raysite && tar xJf .gpu/b/ray.tar.xz -C /tmp || { log "unpack failed"; exit 1; }
rm -rf .gpu  # not uploaded with the job's working directory
export PYTHONPATH=/tmp/site:/tmp/raysite
mkdir -p /tmp/bin && printf '#!/bin/sh\nexec python3 -c "import sys; from ray.scripts.scripts import main; sys.argv[0] = \\"ray\\"; sys.exit(main())" "$@"\n' > /tmp/bin/ray
chmod +x /tmp/bin/ray; export PATH=/tmp/bin:$PATH
log "ray start --head"
ray start --head --num-gpus 1 --dashboard-host 127.0.0.1 --disable-usage-stats > "$OUTD/ray-start.log" 2>&1
log "ray start rc=$?"; tail -3 "$OUTD/ray-start.log"
for i in $(seq 1 30); do ray job list --address http://127.0.0.1:8265 >/dev/null 2>&1 && break; sleep 2; done
# JOBS: one job per entry, "SCENARIO" or "SCENARIO:detect" (no --sglang-version: the node's release is used)
JOBS=${JOBS:-$SCENARIO}
n=0
for job in $JOBS; do
  n=$((n + 1)); scen=${job%%:detect}; version_args="--sglang-version 0.5.17"
  [ "$job" != "$scen" ] && version_args=""
  left=$((LIMIT_S - SECONDS - 45))
  [ $left -lt 120 ] && { log "job $n skipped: ${left}s left"; continue; }
  log "ray job submit $n: $scen $version_args"
  timeout -k 10 $left ray job submit --address http://127.0.0.1:8265 --working-dir . -- \
      python3 harness/run.py --scenario "$scen" --runs-dir /tmp/runs $version_args > "$OUTD/job$n.out" 2>&1
  log "job $n rc=$?"; tail -30 "$OUTD/job$n.out"
done
ls /tmp/runs >/dev/null 2>&1 && tar czf "$OUTD/run.tar.gz" -C /tmp/runs . && log "kept $(ls /tmp/runs | tr '\n' ' ')"
tar czf "$OUTD/ray-logs.tar.gz" -C /tmp/ray/session_latest logs 2>/dev/null
ray stop --force >/dev/null 2>&1
ls -la "$OUTD"
