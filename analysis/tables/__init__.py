"""Stage 4, tables and exports. In: KernelRow and StepRow tables (and SOL estimates). Out: the D4
column and its markdown rendering (en / zh), its optional SOL columns, the long kernel CSV, and what
changed between two columns (the noise rule)."""
