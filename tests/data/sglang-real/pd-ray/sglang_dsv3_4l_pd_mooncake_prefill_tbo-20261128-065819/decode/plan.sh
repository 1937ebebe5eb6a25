# SGLang 0.5.17 plan: 1 node(s) x 2 GPU(s), tp=2 pp=1 dp=1 ep=2, profiler plain

# node 0
export MOONCAKE_PROTOCOL=tcp
export NCCL_NVLS_ENABLE=0
export NVSHMEM_DISABLE_NVLS=1
export NVSHMEM_DISABLE_P2P=0
export NVSHMEM_IBGDA_NIC_HANDLER=gpu
export NVSHMEM_IB_ENABLE_IBGDA=1
export PYTHONPATH=/tmp/site:/tmp/deepep-site:/tmp/raysite:/tmp/mooncake:/tmp/routersite
export PYTHONUNBUFFERED=1
export SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=128
export SGLANG_ENABLE_JIT_DEEPGEMM=1
export SGLANG_JIT_DEEPGEMM_PRECOMPILE=0
export SGLANG_TORCH_PROFILER_DIR=/tmp/moe-harness/sglang_dsv3_4l_pd_mooncake_prefill_tbo-20261128-065819-decode/traces
export STUB_MISSING_MODULES=IPython,xgrammar,loguru,jsonschema,soundfile
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m sglang.launch_server \
    --model-path /tmp/moe-harness-model/dsv3-4l \
    --host 127.0.0.1 \
    --port 30100 \
    --tp-size 2 \
    --ep-size 2 \
    --moe-a2a-backend deepep \
    --deepep-mode low_latency \
    --moe-runner-backend deep_gemm \
    --cuda-graph-max-bs-decode 16 \
    --load-format dummy \
    --max-running-requests 16 \
    --chunked-prefill-size 128 \
    --context-length 8192 \
    --mem-fraction-static 0.75 \
    --trust-remote-code \
    --enable-metrics \
    --skip-tokenizer-init \
    --sampling-backend pytorch \
    --grammar-backend none \
    --prefill-attention-backend triton \
    --decode-attention-backend flashmla \
    --disable-radix-cache \
    --log-level info \
    --ep-dispatch-algorithm fake \
    --nccl-port 31100 \
    --disaggregation-mode decode \
    --disaggregation-transfer-backend mooncake
