"""What runs on, or reaches into, each node of a Ray deployment, whatever engine serves there.

A node's processes (process.py: a server in its own process group, its log masked with secrets.py),
its own folder for a run's files (node_dir.py), waiting for its ranks' trace files (trace_files.py),
the Ray actor's engine-agnostic part that starts a process, ships files back and analyses the node's
own ranks where their traces are (actor.py), and the driver combining every node's digested ranks
into one D4 column (node_analysis.py). Nothing here knows SGLang: an engine's own actor (harness/sglang/
server_actor.py) adds what it needs on top, and its plan says what to start.
"""
