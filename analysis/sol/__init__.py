"""Stage 3, speed of light. In: D4 rows, model shapes, hardware peaks, the deployment (TP, EP,
batch). Out: each row's bytes, FLOPs and lower-bound time (estimate.py), from data files
(sol_module_map.yaml, data/hardware, data/models)."""
