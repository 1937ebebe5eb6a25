#!/usr/bin/env bash
# Call A on a 4-GPU machine: SGLang 0.5.17 with expert parallelism on two GPU pairs side by side.
#
# Unpacks SGLang's packages (CARRY/site.tar.xz, ../sglang_real/pack_site.sh), builds DeepEP from
# CARRY/deepep-src-*.tar.gz (../deepep/build_deepep.sh) while the second pair already records a
# configuration without DeepEP, then runs each pair's queue of drive.py configurations one after the
# other (GPUs 0,1 on port 30000; GPUs 2,3 on port 30100), each only while enough of the call is left.
# Every trace is slimmed (../../accuracy/slim_trace.py keeps kernels, launches, annotations and
# nn.Module ranges); each configuration's run folder comes back as OUT/<label>.tar.gz, the logs as
# OUT/logs.tar.gz.
#
# Usage (repository root): LIMIT_S=575 bash benchmarks/gpu/ep_multi/record_pairs.sh CARRY OUT
# Queues (each entry "label:drive.py args, comma-separated"; "deepep" in the label waits for the build):
#   QUEUE0, QUEUE1 (defaults below). /tmp/site and /tmp/deepep-site stay for the next call on a warm machine.
set -u
CARRY=$1; OUTD=$2; LIMIT_S=${LIMIT_S:-575}
mkdir -p "$OUTD"
LOG=$OUTD/record.log
. benchmarks/gpu/ep_multi/call_env.sh
COMMON=${COMMON:-"--model-dir,/tmp/moe-harness-model/dsv3-4l,--moe-runner,deep_gemm,--batch,16,--num-steps,5,--output-len,1024"}
QUEUE0=${QUEUE0:-"deepep-graph:--tp,2,--ep,2,--a2a,deepep,--capture-trace deepep-dpattn-graph:--tp,2,--ep,2,--dp,2,--a2a,deepep deepep-mtp-graph:--tp,2,--ep,2,--a2a,deepep,--mtp"}
QUEUE1=${QUEUE1:-"ep-noa2a-eager:--tp,2,--ep,2,--no-cuda-graph,--moe-runner,triton deepep-eager:--tp,2,--ep,2,--a2a,deepep,--no-cuda-graph"}

nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > "$OUTD/gpus.csv" 2>&1
nvidia-smi topo -m > "$OUTD/topo.txt" 2>&1
log "gpus: $(tail -n +2 "$OUTD/gpus.csv" | wc -l), cores: $(nproc)"
unpack_site "$CARRY" || exit 1
log "site unpacked"
mkdir -p /tmp/moe-harness-model/dsv3-4l
cp benchmarks/gpu/sglang_real/model/config.json /tmp/moe-harness-model/dsv3-4l/

build_deepep() {
  if [ -d /tmp/deepep-site/deep_ep ]; then echo built > /tmp/deepep.status; return; fi
  MAX_JOBS=${MAX_JOBS:-48} BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-300} \
    bash benchmarks/gpu/deepep/build_deepep.sh "$(ls "$CARRY"/deepep-src-*.tar.gz | head -1)" "$OUTD/deepep" >/dev/null 2>&1
  grep -o '"status": "[a-z_]*"' "$OUTD/deepep/build.json" | cut -d'"' -f4 > /tmp/deepep.status
}
rm -f /tmp/deepep.status
build_deepep &
BUILD_PID=$!

run_queue() {  # run_queue PAIR GPUS PORT QUEUE
  local pair=$1 gpus=$2 port=$3 queue=$4 entry label args left
  for entry in $queue; do
    label=${entry%%:*}; args=${entry#*:}
    if [[ $label == *deepep* ]]; then
      while [ ! -f /tmp/deepep.status ]; do sleep 2; done
      [ "$(cat /tmp/deepep.status)" = built ] || { log "pair $pair: $label skipped (DeepEP $(cat /tmp/deepep.status))"; continue; }
    fi
    left=$((LIMIT_S - SECONDS - 40))
    if [ $left -lt 150 ]; then log "pair $pair: $label skipped (${left}s left)"; continue; fi
    log "pair $pair: $label on GPUs $gpus (${left}s left)"
    IFS=, read -r -a argv <<< "$COMMON,$args"
    CUDA_VISIBLE_DEVICES=$gpus PYTHONPATH=/tmp/site:/tmp/deepep-site:$PWD timeout -k 10 "$left" \
      python3 benchmarks/gpu/sglang_real/drive.py "${argv[@]}" --label "$label" --port "$port" \
        --ready-timeout-s $((left - 60)) --out "/tmp/ep-runs/pair$pair/$label" > "/tmp/ep-runs/pair$pair-$label.out" 2>&1
    log "pair $pair: $label rc=$? $(tail -c 300 "/tmp/ep-runs/pair$pair-$label.out" | tr '\n' ' ')"
  done
}
mkdir -p /tmp/ep-runs
run_queue 0 0,1 30000 "$QUEUE0" &
P0=$!
run_queue 1 2,3 30100 "$QUEUE1" &
P1=$!
wait $P0 $P1 $BUILD_PID
log "queues done; slimming"
for f in /tmp/ep-runs/pair*/*/traces/*.trace.json.gz; do
  [ -f "$f" ] || continue
  python3 benchmarks/accuracy/slim_trace.py "$f" "$f.slim" >/dev/null 2>&1 && mv "$f.slim" "$f"
done
# One file per configuration (each at most 16 MiB comes back), logs in one more.
for d in /tmp/ep-runs/pair*/*/; do
  [ -d "$d" ] || continue
  c=$(basename "$d"); cp /tmp/ep-runs/pair*-"$c".out "$d" 2>/dev/null
  tar czf "$OUTD/$c.tar.gz" -C "$(dirname "$d")" "$c"
done
cp /tmp/ep-runs/*.out "$OUTD/" 2>/dev/null
ls -la "$OUTD" | tee -a "$LOG"
tar czf "$OUTD/logs.tar.gz" -C "$OUTD" --exclude '*.tar.gz' --exclude deepep-site.tar.gz . 2>/dev/null
find "$OUTD" -maxdepth 1 -type f ! -name '*.tar.gz' -delete; rm -rf "$OUTD/deepep"; rm -f "$OUTD/deepep-site.tar.gz"
