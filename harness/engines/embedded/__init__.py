"""The embedded engine: transformers' DeepseekV3ForCausalLM with random weights, decoded in-process.

Why: the whole pipeline (launch, steady load, bounded profile, collect, analyse) runs on a laptop
with no GPU and no SGLang, on a real DeepSeek-V3 implementation rather than a mock.
"""
