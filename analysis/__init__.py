"""Kernel traces in, D4 profile tables out: pure functions, no Ray, no network, no torch.

The stages, each a subpackage importing only the ones before it (docs/architecture.md):
ingest -> attribution -> sol -> tables -> report. `analysis.api` is the public entry
(analyze, write_outputs); `errors` and `data_files` are shared by all stages; `data/` holds the
built-in signatures, model shapes and hardware peaks users copy and extend.
"""
