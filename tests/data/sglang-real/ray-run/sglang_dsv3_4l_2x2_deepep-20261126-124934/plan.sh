# SGLang 0.5.17 plan: 2 node(s) x 2 GPU(s), tp=4 pp=1 dp=1 ep=4, profiler v2
# {node0_ip} is node 0's IP, filled in once Ray places the nodes

# node 0
export NCCL_DEBUG=WARN
export NCCL_NVLS_ENABLE=0
export NVSHMEM_DISABLE_NVLS=1
export NVSHMEM_DISABLE_P2P=0
export NVSHMEM_IBGDA_NIC_HANDLER=gpu
export NVSHMEM_IB_ENABLE_IBGDA=1
export PYTHONPATH=/tmp/site:/tmp/deepep-site:/tmp/raysite
export PYTHONUNBUFFERED=1
export SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=128
export SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE=1
export SGLANG_ENABLE_JIT_DEEPGEMM=1
export SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR=/tmp/moe-harness/sglang_dsv3_4l_2x2_deepep-20261126-124934/traces-expert-load
export SGLANG_JIT_DEEPGEMM_PRECOMPILE=0
export SGLANG_PROFILE_V2=1
export SGLANG_TORCH_PROFILER_DIR=/tmp/moe-harness/sglang_dsv3_4l_2x2_deepep-20261126-124934/traces
export STUB_MISSING_MODULES=IPython,xgrammar,loguru,jsonschema,soundfile
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m sglang.launch_server \
    --model-path /tmp/moe-harness-model/dsv3-4l \
    --host 127.0.0.1 \
    --port 30000 \
    --tp-size 4 \
    --ep-size 4 \
    --moe-a2a-backend deepep \
    --deepep-mode low_latency \
    --moe-runner-backend deep_gemm \
    --cuda-graph-max-bs-decode 16 \
    --load-format dummy \
    --max-running-requests 16 \
    --chunked-prefill-size 128 \
    --context-length 4096 \
    --mem-fraction-static 0.8 \
    --trust-remote-code \
    --enable-metrics \
    --enable-profile-cuda-graph \
    --expert-distribution-recorder-mode stat \
    --expert-distribution-recorder-buffer-size -1 \
    --disable-shared-experts-fusion \
    --nnodes 2 \
    --node-rank 0 \
    --dist-init-addr '{node0_ip}:5000' \
    --skip-tokenizer-init \
    --sampling-backend pytorch \
    --grammar-backend none \
    --prefill-attention-backend triton \
    --decode-attention-backend flashmla \
    --disable-radix-cache \
    --log-level info

# node 1
export NCCL_DEBUG=WARN
export NCCL_NVLS_ENABLE=0
export NVSHMEM_DISABLE_NVLS=1
export NVSHMEM_DISABLE_P2P=0
export NVSHMEM_IBGDA_NIC_HANDLER=gpu
export NVSHMEM_IB_ENABLE_IBGDA=1
export PYTHONPATH=/tmp/site:/tmp/deepep-site:/tmp/raysite
export PYTHONUNBUFFERED=1
export SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=128
export SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE=1
export SGLANG_ENABLE_JIT_DEEPGEMM=1
export SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR=/tmp/moe-harness/sglang_dsv3_4l_2x2_deepep-20261126-124934/traces-expert-load
export SGLANG_JIT_DEEPGEMM_PRECOMPILE=0
export SGLANG_PROFILE_V2=1
export SGLANG_TORCH_PROFILER_DIR=/tmp/moe-harness/sglang_dsv3_4l_2x2_deepep-20261126-124934/traces
export STUB_MISSING_MODULES=IPython,xgrammar,loguru,jsonschema,soundfile
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m sglang.launch_server \
    --model-path /tmp/moe-harness-model/dsv3-4l \
    --host 127.0.0.1 \
    --port 30001 \
    --tp-size 4 \
    --ep-size 4 \
    --moe-a2a-backend deepep \
    --deepep-mode low_latency \
    --moe-runner-backend deep_gemm \
    --cuda-graph-max-bs-decode 16 \
    --load-format dummy \
    --max-running-requests 16 \
    --chunked-prefill-size 128 \
    --context-length 4096 \
    --mem-fraction-static 0.8 \
    --trust-remote-code \
    --enable-metrics \
    --enable-profile-cuda-graph \
    --expert-distribution-recorder-mode stat \
    --expert-distribution-recorder-buffer-size -1 \
    --disable-shared-experts-fusion \
    --nnodes 2 \
    --node-rank 1 \
    --dist-init-addr '{node0_ip}:5000' \
    --skip-tokenizer-init \
    --sampling-backend pytorch \
    --grammar-backend none \
    --prefill-attention-backend triton \
    --decode-attention-backend flashmla \
    --disable-radix-cache \
    --log-level info
