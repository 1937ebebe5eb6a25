"""Stage 2, steps, layers and attribution. In: a RankTrace, a signature, a model spec, capture
traces. Out: KernelRow (every kernel's step, layer, group, module and the `source` that named it)
and StepRow tables (rows.py), plus the tools that check attribution: agreement with module ranges,
calibration, signatures learned from ranges."""
