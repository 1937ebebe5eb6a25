"""Engines that serve the model under test (the embedded transformers engine, SGLang), each behind
the stages of base.py's Engine, which harness/run.py calls in order; registry.py names the class of
each `engine.kind`."""
