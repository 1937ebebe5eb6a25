"""The analysis pipeline, one module per verb: trace files in, each rank attributed
(attribute_ranks.py: `attribute`, `learn_signature_from`), the rows combined into the D4 column and
its checks (combine.py: `combine_rows`, `combine_nodes`), both in turn for `analyze`
(analyze_traces.py), the analysis written and read back (outputs.py), and what `report` reads
(report_inputs.py). The harness reaches these through analysis/api.py.
"""
from __future__ import annotations

from analysis.analysis_options import AnalysisOptions
from analysis.errors import AnalysisError
from analysis.ingest.trace_loader import load_trace
from analysis.pipeline.analyze_traces import analyze
from analysis.pipeline.attribute_ranks import attribute, learn_signature_from
from analysis.pipeline.combine import combine_nodes, combine_rows
from analysis.pipeline.outputs import ANALYSIS_FILE, load_column, saved_rows, write_kernel_table_file, write_outputs
from analysis.pipeline.report_inputs import report_reads, report_source
from analysis.tables.d4 import render_markdown
from analysis.tables.kernel_table import KERNEL_TABLE

__all__ = ["ANALYSIS_FILE", "KERNEL_TABLE", "AnalysisError", "AnalysisOptions", "analyze", "attribute", "combine_nodes",
           "combine_rows", "learn_signature_from", "load_column", "load_trace", "render_markdown", "report_reads",
           "report_source", "saved_rows", "write_kernel_table_file", "write_outputs"]
