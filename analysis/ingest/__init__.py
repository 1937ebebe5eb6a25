"""Stage 1, ingest. In: trace files (.json / .json.gz Chrome traces from the PyTorch profiler) and
model files. Out: one RankTrace per file (kernels, CPU operators, annotations, nn.Module and
python-function ranges, launches, capture windows), its rank identity, readable kernel names and
families, and the model's expected layer counts."""
