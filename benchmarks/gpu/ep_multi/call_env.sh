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
