"""Stage 5, kernel report. In: traces or kernel rows, SOL estimates, Nsight Compute exports. Out:
top kernels, what-if savings, ncu classification and roofline plots, one markdown/HTML report."""
