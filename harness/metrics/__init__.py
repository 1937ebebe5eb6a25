"""Prometheus metrics of the harness: run results (offline, from a run directory), live progress
during a run, and pushing to a Pushgateway. Needs the `metrics` extra (prometheus-client)."""
