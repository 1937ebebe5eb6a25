"""Documented CSV / Parquet exports of a run's analysis tables (columns in columns.yaml)."""
