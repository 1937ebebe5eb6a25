"""How analysis/ and the harness read and write files: every input read within a bound
(input_files.py), every output written aside and moved in (atomic_files.py), YAML parsed one way
(data_files.py), Parquet written and read by the project's own writer and bounded reader
(parquet_writer.py, parquet_reader.py, over thrift_compact.py). No analysis step lives here; every
stage may use it, and the harness reaches it through analysis.api.
"""
