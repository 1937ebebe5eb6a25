"""Stage 5, reports. In: traces or kernel rows, SOL estimates, Nsight Compute exports, D4 columns.
Out: top kernels, what-if savings, ncu classification and roofline plots, one markdown/HTML kernel
report; the page of `view` (page/: inline SVG, no script); the trace annotated with its attribution."""
