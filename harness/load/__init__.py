"""Steady load against an SGLang-compatible server; per-request records; summaries."""
