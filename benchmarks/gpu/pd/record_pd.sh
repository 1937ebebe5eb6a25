#!/usr/bin/env bash
# A call on a 4-GPU machine: prefill with DeepEP normal mode, alone or in a prefill/decode pair
# (drive_pd.py), one configuration after the other while enough of the call is left.
#
# SGLang's site travels in parts (it does not fit one transfer beside the repository): each call
# copies what it carries into /tmp/carry; once every part is there they are joined and unpacked into
# /tmp/site (call_env.sh). DeepEP is built from CARRY/deepep-src-*.tar.gz when no earlier call built it.
# mooncake-min.tar.xz (Mooncake's transfer engine and the libraries it loads, nothing else of its
# wheel) is unpacked into /tmp/mooncake; a configuration asking for --transfer mooncake falls back
# to fake when `from mooncake.engine import TransferEngine` fails there (the reason is logged).
# Traces are slimmed (../../accuracy/slim_trace.py); one OUT/<label>.tar.gz per configuration (split
# into 15 MB parts when larger: a file coming back may be at most 16 MiB).
#
# Usage (repository root): LIMIT_S=575 QUEUE="label:args,comma ..." bash benchmarks/gpu/pd/record_pd.sh CARRY OUT
set -u
CARRY=$1; OUTD=$2; LIMIT_S=${LIMIT_S:-575}
mkdir -p "$OUTD" /tmp/carry /tmp/pd-runs
LOG=$OUTD/record_pd.log
. benchmarks/gpu/ep_multi/call_env.sh
QUEUE=${QUEUE:-"pd-fake:--transfer,fake,--fallback"}
COMMON=${COMMON:-"--model-dir,/tmp/moe-harness-model/dsv3-4l"}

cp -n "$CARRY"/* /tmp/carry/ 2>/dev/null
if [ ! -f /tmp/site/sitecustomize.py ] && [ ! -f /tmp/carry/site.tar.xz ]; then
  cat /tmp/carry/site.part-* > /tmp/carry/site.tar.xz
fi
unpack_site /tmp/carry || exit 1
log "site ready"
if [ -f /tmp/carry/mooncake-min.tar.xz ] && [ ! -d /tmp/mooncake ]; then
  mkdir -p /tmp/mooncake && tar xJf /tmp/carry/mooncake-min.tar.xz -C /tmp/mooncake
fi
MC_LIBS=/tmp/mooncake/mooncake_transfer_engine.libs:/tmp/mooncake/mooncake:/tmp/mooncake/cudart12
if [ ! -d /tmp/deepep-site/deep_ep ]; then
  log "building DeepEP"
  MAX_JOBS=48 BUILD_TIMEOUT_S=300 bash benchmarks/gpu/deepep/build_deepep.sh \
    "$(ls /tmp/carry/deepep-src-*.tar.gz | head -1)" "$OUTD/deepep" >/dev/null 2>&1
fi
[ -d /tmp/deepep-site/deep_ep ] || { log "no DeepEP"; exit 1; }
mkdir -p /tmp/moe-harness-model/dsv3-4l
cp benchmarks/gpu/sglang_real/model/config.json /tmp/moe-harness-model/dsv3-4l/

for entry in $QUEUE; do
  label=${entry%%:*}; args=${entry#*:}
  extra_ld=""
  if [[ ",$args," == *",--transfer,mooncake,"* ]]; then
    if LD_LIBRARY_PATH=$MC_LIBS:${LD_LIBRARY_PATH:-} PYTHONPATH=/tmp/mooncake \
        python3 -c "from mooncake.engine import TransferEngine" > "$OUTD/mooncake-import.txt" 2>&1; then
      extra_ld=$MC_LIBS; log "mooncake imports"
    else
      log "mooncake does not import: $(tail -c 400 "$OUTD/mooncake-import.txt" | tr '\n' ' ')"
      args=${args//--transfer,mooncake/--transfer,fake}; label=${label//mooncake/fake}
    fi
  fi
  left=$((LIMIT_S - SECONDS - 40))
  if [ $left -lt 150 ]; then log "$label skipped (${left}s left)"; continue; fi
  log "$label (${left}s left): $args"
  IFS=, read -r -a argv <<< "$COMMON,$args"
  LD_LIBRARY_PATH=${extra_ld:+$extra_ld:}${LD_LIBRARY_PATH:-} PYTHONPATH=/tmp/site:/tmp/deepep-site:/tmp/mooncake:$PWD \
    timeout -k 10 "$left" python3 benchmarks/gpu/pd/drive_pd.py "${argv[@]}" \
      --ready-timeout-s $((left > 460 ? 400 : left - 60)) --out "/tmp/pd-runs/$label" > "/tmp/pd-runs/$label.out" 2>&1
  log "$label rc=$? $(tail -c 400 "/tmp/pd-runs/$label.out" | tr '\n' ' ')"
  for s in /tmp/pd-runs/$label/server-*.log; do
    grep -m 6 -n "Error\|Traceback\|Assert" "$s" 2>/dev/null | cut -c1-300 | tee -a "$LOG"
  done
done
log "slimming"
for f in /tmp/pd-runs/*/traces/*.trace.json.gz; do
  [ -f "$f" ] || continue
  python3 benchmarks/accuracy/slim_trace.py "$f" "$f.slim" >/dev/null 2>&1 && mv "$f.slim" "$f"
done
for d in /tmp/pd-runs/*/; do
  [ -d "$d" ] || continue
  c=$(basename "$d"); cp "/tmp/pd-runs/$c.out" "$d" 2>/dev/null
  tar czf "/tmp/pd-runs/$c.tar.gz" -C /tmp/pd-runs "$c"
  if [ "$(stat -c %s "/tmp/pd-runs/$c.tar.gz")" -gt 15000000 ]; then
    split -b 15000000 "/tmp/pd-runs/$c.tar.gz" "$OUTD/$c.tar.gz.part-"
  else
    cp "/tmp/pd-runs/$c.tar.gz" "$OUTD/"
  fi
  rm -rf "$d" "/tmp/pd-runs/$c.tar.gz"
done
ls -la "$OUTD" | tee -a "$LOG"
