"""Speed benchmarks (not tests): run them by hand, record figures in docs/performance.md."""
