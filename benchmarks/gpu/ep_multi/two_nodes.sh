#!/usr/bin/env bash
# Call B on the same warm 4-GPU machine, right after record_pairs.sh (which left SGLang's packages in
# /tmp/site and DeepEP in /tmp/deepep-site): the README's command across two Ray nodes.
#
# A Ray head seeing GPUs 0,1 and a Ray worker seeing GPUs 2,3 (CUDA_VISIBLE_DEVICES per raylet,
# --num-gpus 2 each) make a two-node cluster on one host; then, for each scenario of JOBS,
#   ray job submit --working-dir . -- python3 harness/run.py --scenario S --runs-dir /tmp/runs --sglang-version 0.5.17
# and, while time is left, the eager twin of the first job (TP4 EP4 DeepEP on all four GPUs, one
# server, module ranges kept: the ground truth of the job's CUDA-graph traces) through drive.py.
# Back: OUT/runs.tar.gz (the run directories; traces slimmed when the whole would not come back),
# OUT/twin.tar.gz, OUT/ray-logs.tar.gz, OUT/two_nodes.log.
#
# Usage (repository root): LIMIT_S=575 bash benchmarks/gpu/ep_multi/two_nodes.sh CARRY OUT
#   CARRY holds ray.tar.xz (../sglang_ray/pack_ray.sh).  TWIN=0 skips the eager twin.
set -u
CARRY=$1; OUTD=$2; LIMIT_S=${LIMIT_S:-575}
mkdir -p "$OUTD"
LOG=$OUTD/two_nodes.log
. benchmarks/gpu/ep_multi/call_env.sh
JOBS=${JOBS:-"benchmarks/gpu/ep_multi/scenario_2x2_deepep.yaml benchmarks/gpu/ep_multi/scenario_2x2_deepep_dpattn.yaml"}
VERSION_ARGS=${VERSION_ARGS---sglang-version 0.5.17}   # empty: the release installed on the nodes
[ -f /tmp/site/sitecustomize.py ] || { log "no /tmp/site: run record_pairs.sh first on this warm machine"; exit 1; }
[ -d /tmp/deepep-site/deep_ep ] || { log "no /tmp/deepep-site: DeepEP was not built on this machine"; exit 1; }
rm -rf /tmp/raysite && tar xJf "$CARRY/ray.tar.xz" -C /tmp || { log "ray unpack failed"; exit 1; }
rm -rf .gpu  # not uploaded with the job's working directory
export PYTHONPATH=/tmp/site:/tmp/deepep-site:/tmp/raysite
mkdir -p /tmp/moe-harness-model/dsv3-4l
cp benchmarks/gpu/sglang_real/model/config.json /tmp/moe-harness-model/dsv3-4l/
start_two_ray_nodes "$OUTD"
python3 -c "import ray; ray.init(address='auto', log_to_driver=False); print('nodes', [(n['NodeManagerAddress'], n['Resources'].get('GPU')) for n in ray.nodes() if n['Alive']])" 2>/dev/null | tee -a "$LOG"
n=0
for scen in $JOBS; do
  n=$((n + 1)); left=$((LIMIT_S - SECONDS - 60))
  [ $left -lt 200 ] && { log "job $n skipped: ${left}s left"; continue; }
  log "ray job submit $n: $scen (${left}s left)"
  timeout -k 10 $left ray job submit --address http://127.0.0.1:8265 --working-dir . -- \
      python3 harness/run.py --scenario "$scen" --runs-dir /tmp/runs $VERSION_ARGS > "$OUTD/job$n.out" 2>&1
  log "job $n rc=$?"; tail -25 "$OUTD/job$n.out"
done
ray stop --force >/dev/null 2>&1
left=$((LIMIT_S - SECONDS - 40))
if [ "${TWIN:-1}" = 1 ] && [ $left -ge 150 ]; then
  log "eager twin: TP4 EP4 DeepEP, no CUDA graph, one server on GPUs 0-3 (${left}s left)"
  PYTHONPATH=/tmp/site:/tmp/deepep-site:$PWD timeout -k 10 $left python3 benchmarks/gpu/sglang_real/drive.py \
      --model-dir /tmp/moe-harness-model/dsv3-4l --tp 4 --ep 4 --a2a deepep --moe-runner deep_gemm --no-cuda-graph \
      --batch 16 --num-steps 5 --output-len 512 --label deepep-ep4-eager --ready-timeout-s $((left - 60)) \
      --out /tmp/twin/deepep-ep4-eager > "$OUTD/twin.out" 2>&1
  log "twin rc=$? $(tail -c 300 "$OUTD/twin.out" | tr '\n' ' ')"
  for f in /tmp/twin/*/traces/*.trace.json.gz; do
    [ -f "$f" ] && python3 benchmarks/accuracy/slim_trace.py "$f" "$f.slim" >/dev/null 2>&1 && mv "$f.slim" "$f"
  done
  tar czf "$OUTD/twin.tar.gz" -C /tmp twin 2>/dev/null
fi
if [ -d /tmp/runs ]; then
  tar czf "$OUTD/runs.tar.gz" -C /tmp runs
  if [ "$(stat -c %s "$OUTD/runs.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
    log "runs.tar.gz over 15 MiB: traces slimmed"
    for f in /tmp/runs/*/traces/*.trace.json.gz; do
      python3 benchmarks/accuracy/slim_trace.py "$f" "$f.slim" >/dev/null 2>&1 && mv "$f.slim" "$f"
    done
    tar czf "$OUTD/runs.tar.gz" -C /tmp runs
  fi
fi
tar czf "$OUTD/ray-logs.tar.gz" -C /tmp/ray/session_latest logs 2>/dev/null
ls -la "$OUTD" | tee -a "$LOG"
