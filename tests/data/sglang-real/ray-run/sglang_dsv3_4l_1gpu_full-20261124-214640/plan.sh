# SGLang 0.5.17 plan: 1 node(s) x 1 GPU(s), tp=1 pp=1 dp=1 ep=1, profiler v2

# node 0
export NCCL_NVLS_ENABLE=0
export NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=/tmp/site:/tmp/raysite
export PYTHONUNBUFFERED=1
export SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE=1
export SGLANG_ENABLE_JIT_DEEPGEMM=1
export SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR=/tmp/moe-harness/sglang_dsv3_4l_1gpu_full-20261124-214640/traces-expert-load
export SGLANG_JIT_DEEPGEMM_PRECOMPILE=0
export SGLANG_PROFILE_V2=1
export SGLANG_TORCH_PROFILER_DIR=/tmp/moe-harness/sglang_dsv3_4l_1gpu_full-20261124-214640/traces
export STUB_MISSING_MODULES=IPython,xgrammar,loguru,jsonschema,soundfile
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m sglang.launch_server \
    --model-path /tmp/moe-harness-model/dsv3-4l \
    --host 127.0.0.1 \
    --port 30000 \
    --tp-size 1 \
    --cuda-graph-max-bs-decode 16 \
    --load-format dummy \
    --max-running-requests 16 \
    --context-length 4096 \
    --mem-fraction-static 0.8 \
    --trust-remote-code \
    --enable-metrics \
    --enable-profile-cuda-graph \
    --expert-distribution-recorder-mode stat \
    --expert-distribution-recorder-buffer-size -1 \
    --disable-shared-experts-fusion \
    --skip-tokenizer-init \
    --sampling-backend pytorch \
    --grammar-backend none \
    --prefill-attention-backend triton \
    --decode-attention-backend flashmla \
    --disable-radix-cache \
    --log-level info
