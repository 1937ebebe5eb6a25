# Sourced by the calls of this folder on the GPU machine (record_pairs.sh, record_four.sh, two_nodes.sh)
# after they set LOG: what every process they start needs, the log line, and SGLang's unpacked site.
# NVLink multicast stays off in every process (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export STUB_MISSING_MODULES=IPython,xgrammar,loguru,jsonschema,soundfile
log() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$LOG"; }

# unpack_site CARRY: SGLang's packages into /tmp/site once per machine (kept for the next call)
unpack_site() {
  if [ ! -f /tmp/site/sitecustomize.py ]; then
    rm -rf /tmp/site && tar xJf "$1/site.tar.xz" -C /tmp || { log "unpack failed"; return 1; }
    cp benchmarks/gpu/sglang_real/stub_missing.py /tmp/site/sitecustomize.py
  fi
}

# start_two_ray_nodes OUT: a `ray` command from the unpacked Ray (in PYTHONPATH), then a Ray head seeing
# GPUs 0,1 and a worker seeing GPUs 2,3 of this host (their own temp folders: two raylets sharing
# /tmp/ray raced over a job's working directory), until the head's job server answers.
start_two_ray_nodes() {
  mkdir -p /tmp/bin
  printf '#!/bin/sh\nexec python3 -c "import sys; from ray.scripts.scripts import main; sys.argv[0] = \\"ray\\"; sys.exit(main())" "$@"\n' > /tmp/bin/ray
  chmod +x /tmp/bin/ray; export PATH=/tmp/bin:$PATH
  ray stop --force >/dev/null 2>&1
  log "ray start: head on GPUs 0,1, worker on GPUs 2,3"
  CUDA_VISIBLE_DEVICES=0,1 ray start --head --num-gpus 2 --dashboard-host 127.0.0.1 --disable-usage-stats > "$1/ray-head.log" 2>&1
  log "head rc=$?"
  CUDA_VISIBLE_DEVICES=2,3 ray start --address 127.0.0.1:6379 --num-gpus 2 --disable-usage-stats --temp-dir /tmp/ray-node1 > "$1/ray-worker.log" 2>&1
  log "worker rc=$?"
  for i in $(seq 1 30); do ray job list --address http://127.0.0.1:8265 >/dev/null 2>&1 && break; sleep 2; done
}
