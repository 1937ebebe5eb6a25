"""Engines that serve the model under test: the embedded transformers engine, SGLang."""
