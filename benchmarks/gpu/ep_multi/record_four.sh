#!/usr/bin/env bash
# A call on a warm 4-GPU machine after record_pairs.sh (which left SGLang in /tmp/site and DeepEP in
# /tmp/deepep-site): drive.py configurations that need all four GPUs, one after the other.
#
# Made for the full-depth model (model-61l/: DeepSeek-V3 widths, 61 layers of which 3 dense, 64 routed
# experts, the most four H100s hold beside the rest): TP4 EP4 with DP attention over 4 groups, DeepEP
# low-latency, two-batch overlap, CUDA graphs, then its eager twin (module ranges: the truth).
# A configuration whose args hold --tbo drops it (label "tbo" -> "notbo") when TBO_CHECK names a
# status.json of this machine's earlier call that did not end ok (two-batch overlap with DP attention
# failed there): the call is decided here, since the machine is given back 30 s after a call.
# Each trace is slimmed (../../accuracy/slim_trace.py); one OUT/<label>.tar.gz per configuration.
# GPUS (default 0,1,2,3): the GPUs every configuration gets (0,1 on a 2-GPU machine, with a COMMON
# naming the 4-layer model, /tmp/moe-harness-model/dsv3-4l, whose config is put there too).
#
# Usage (repository root): LIMIT_S=575 bash benchmarks/gpu/ep_multi/record_four.sh CARRY OUT
#   QUEUE (default below): "label:drive.py args,comma-separated ..."; COMMON: args every entry gets.
set -u
CARRY=$1; OUTD=$2; LIMIT_S=${LIMIT_S:-575}
mkdir -p "$OUTD" /tmp/ep-runs/four
LOG=$OUTD/record_four.log
. benchmarks/gpu/ep_multi/call_env.sh
COMMON=${COMMON:-"--model-dir,/tmp/moe-harness-model/dsv3-61l,--moe-runner,deep_gemm,--routing,fake,--expert-load,--output-len,1024"}
QUEUE=${QUEUE:-"deep61-tbo-dpattn-graph:--tp,4,--ep,4,--dp,4,--a2a,deepep,--tbo,--batch,32,--num-steps,4 deep61-tbo-dpattn-eager:--tp,4,--ep,4,--dp,4,--a2a,deepep,--tbo,--no-cuda-graph,--batch,32,--num-steps,2"}
TBO_CHECK=${TBO_CHECK:-/tmp/ep-runs/pair1/tbo-dpattn-graph/status.json}
GPUS=${GPUS:-0,1,2,3}

unpack_site "$CARRY" || exit 1
if [ ! -d /tmp/deepep-site/deep_ep ]; then
  log "building DeepEP (no build left by an earlier call)"
  MAX_JOBS=48 BUILD_TIMEOUT_S=300 bash benchmarks/gpu/deepep/build_deepep.sh \
    "$(ls "$CARRY"/deepep-src-*.tar.gz | head -1)" "$OUTD/deepep" >/dev/null 2>&1
fi
[ -d /tmp/deepep-site/deep_ep ] || { log "no DeepEP"; exit 1; }
mkdir -p /tmp/moe-harness-model/dsv3-61l
cp benchmarks/gpu/ep_multi/model-61l/config.json /tmp/moe-harness-model/dsv3-61l/
mkdir -p /tmp/moe-harness-model/dsv3-4l
cp benchmarks/gpu/sglang_real/model/config.json /tmp/moe-harness-model/dsv3-4l/
tbo_ok=1
if [ -n "$TBO_CHECK" ] && [ -f "$TBO_CHECK" ] && ! grep -q '"ok": true' "$TBO_CHECK"; then tbo_ok=0; fi
log "two-batch overlap with DP attention earlier: $([ $tbo_ok = 1 ] && echo 'ok or not tried' || echo failed)"

for entry in $QUEUE; do
  label=${entry%%:*}; args=${entry#*:}
  if [ $tbo_ok = 0 ] && [[ ",$args," == *",--tbo,"* ]]; then
    args=${args//,--tbo/}; label=${label//tbo/notbo}
  fi
  left=$((LIMIT_S - SECONDS - 45))
  if [ $left -lt 150 ]; then log "$label skipped (${left}s left)"; continue; fi
  log "$label on GPUs $GPUS (${left}s left): $args"
  IFS=, read -r -a argv <<< "$COMMON,$args"
  CUDA_VISIBLE_DEVICES=$GPUS PYTHONPATH=/tmp/site:/tmp/deepep-site:$PWD timeout -k 10 "$left" \
    python3 benchmarks/gpu/sglang_real/drive.py "${argv[@]}" --label "$label" --port 30200 \
      --ready-timeout-s $((left - 60)) --out "/tmp/ep-runs/four/$label" > "/tmp/ep-runs/four-$label.out" 2>&1
  log "$label rc=$? $(tail -c 300 "/tmp/ep-runs/four-$label.out" | tr '\n' ' ')"
  grep -m 8 -n "Error\|Traceback\|Assert" "/tmp/ep-runs/four/$label/server.log" 2>/dev/null | tee -a "$LOG"
done
log "slimming"
for f in /tmp/ep-runs/four/*/traces/*.trace.json.gz /tmp/ep-runs/four/*/traces/graph_capture_profile/*.json.gz; do
  [ -f "$f" ] || continue
  python3 benchmarks/accuracy/slim_trace.py "$f" "$f.slim" >/dev/null 2>&1 && mv "$f.slim" "$f"
done
for d in /tmp/ep-runs/four/*/; do
  [ -d "$d" ] || continue
  c=$(basename "$d"); cp "/tmp/ep-runs/four-$c.out" "$d" 2>/dev/null
  tar czf "$OUTD/$c.tar.gz" -C /tmp/ep-runs/four "$c"
done
ls -la "$OUTD" | tee -a "$LOG"
