#!/usr/bin/env bash
# The README's command for a prefill/decode (PD) pair, on one 4-GPU machine run as two Ray nodes: a Ray
# head seeing GPUs 0,1 and a worker seeing GPUs 2,3 (CUDA_VISIBLE_DEVICES per raylet), then
#   ray job submit --working-dir . -- python3 harness/run.py --scenario benchmarks/gpu/pd/scenario_pd_ray.yaml \
#       --runs-dir /tmp/runs --sglang-version 0.5.17
# What the machine needs does not fit one transfer beside the repository: SGLang's site (site.tar.xz,
# ../sglang_real/pack_site.sh), Mooncake's cut-down transfer engine (mooncake-min.tar.xz, as record_pd.sh
# uses it), Ray (ray.tar.xz, ../sglang_ray/pack_ray.sh) and SGLang's router (router.tar.xz: the
# sglang-router wheel and setproctitle for Python 3.12, unpacked) travel as one tar cut into parts
# (bundle.part-*), one part a call, with BUNDLE_PARTS saying how many there are; DeepEP's source travels
# with the first. Each call keeps what it carries in /tmp/carry (kept on a warm machine); the first builds
# DeepEP; the call that completes the parts unpacks them and runs the job.
# Back: OUT/runs.tar.gz (the run directory, traces slimmed when the whole would not come back),
# OUT/ray-logs.tar.gz, OUT/pd_ray.log, OUT/job.out.
#
# Usage (repository root): BUNDLE_PARTS=N LIMIT_S=575 bash benchmarks/gpu/pd/pd_ray.sh CARRY OUT
set -u
CARRY=$1; OUTD=$2; LIMIT_S=${LIMIT_S:-575}
mkdir -p "$OUTD" /tmp/carry
LOG=$OUTD/pd_ray.log
. benchmarks/gpu/ep_multi/call_env.sh
cp -n "$CARRY"/* /tmp/carry/ 2>/dev/null
have=$(ls /tmp/carry/bundle.part-* 2>/dev/null | wc -l)
log "bundle parts here: $have of ${BUNDLE_PARTS:?}"
if [ ! -d /tmp/deepep-site/deep_ep ] && ls /tmp/carry/deepep-src-*.tar.gz >/dev/null 2>&1; then
  log "building DeepEP"
  MAX_JOBS=48 BUILD_TIMEOUT_S=300 bash benchmarks/gpu/deepep/build_deepep.sh \
    "$(ls /tmp/carry/deepep-src-*.tar.gz | head -1)" "$OUTD/deepep" >/dev/null 2>&1
  log "DeepEP built: $([ -d /tmp/deepep-site/deep_ep ] && echo yes || echo no)"
fi
[ "$have" -lt "$BUNDLE_PARTS" ] && { log "waiting for the other parts"; exit 0; }
[ -d /tmp/deepep-site/deep_ep ] || { log "no DeepEP"; exit 1; }
if [ ! -f /tmp/carry/ray.tar.xz ]; then
  cat /tmp/carry/bundle.part-* | tar xf - -C /tmp/carry || { log "bundle unpack failed"; exit 1; }
fi
unpack_site /tmp/carry || exit 1
[ -d /tmp/mooncake ] || { mkdir -p /tmp/mooncake && tar xJf /tmp/carry/mooncake-min.tar.xz -C /tmp/mooncake; }
[ -d /tmp/raysite ] || tar xJf /tmp/carry/ray.tar.xz -C /tmp
[ -d /tmp/routersite ] || tar xJf /tmp/carry/router.tar.xz -C /tmp
log "unpacked: $(ls -d /tmp/site /tmp/mooncake /tmp/raysite /tmp/routersite | tr '\n' ' ')"
export PYTHONPATH=/tmp/site:/tmp/deepep-site:/tmp/raysite:/tmp/mooncake:/tmp/routersite
export LD_LIBRARY_PATH=/tmp/mooncake/mooncake_transfer_engine.libs:/tmp/mooncake/mooncake:/tmp/mooncake/cudart12${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
python3 -c "from mooncake.engine import TransferEngine; import sglang_router.launch_router" > "$OUTD/imports.txt" 2>&1
log "mooncake and router import: rc=$? $(tail -c 300 "$OUTD/imports.txt" | tr '\n' ' ')"
mkdir -p /tmp/moe-harness-model/dsv3-4l
cp benchmarks/gpu/sglang_real/model/config.json /tmp/moe-harness-model/dsv3-4l/
rm -rf .gpu  # not uploaded with the job's working directory
start_two_ray_nodes "$OUTD"
SCENARIO=${SCENARIO:-benchmarks/gpu/pd/scenario_pd_ray.yaml}
left=$((LIMIT_S - SECONDS - 45))
log "ray job submit: $SCENARIO (${left}s left)"
timeout -k 10 $left ray job submit --address http://127.0.0.1:8265 --working-dir . -- \
    python3 harness/run.py --scenario "$SCENARIO" --runs-dir /tmp/runs --sglang-version 0.5.17 > "$OUTD/job.out" 2>&1
log "job rc=$?"; tail -40 "$OUTD/job.out"
ray stop --force >/dev/null 2>&1
if [ -d /tmp/runs ]; then
  tar czf "$OUTD/runs.tar.gz" -C /tmp runs
  if [ "$(stat -c %s "$OUTD/runs.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
    log "runs.tar.gz over 15 MiB: traces slimmed"
    for f in /tmp/runs/*/*/traces/*.trace.json.gz; do
      python3 benchmarks/accuracy/slim_trace.py "$f" "$f.slim" >/dev/null 2>&1 && mv "$f.slim" "$f"
    done
    tar czf "$OUTD/runs.tar.gz" -C /tmp runs
  fi
fi
tar czf "$OUTD/ray-logs.tar.gz" -C /tmp/ray/session_latest logs 2>/dev/null
ls -la "$OUTD" | tee -a "$LOG"
