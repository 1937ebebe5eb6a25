"""The keyword under which a transformers model's forward takes its KV cache.

Why: transformers 5.24 renamed the models' `past_key_values` argument to `cache`; there the old name
still works with a FutureWarning and goes in 5.40, while releases before 5.24 know only the old one
(a name a forward does not know lands in its **kwargs and the cache is silently not used). Asking the
forward's signature keeps one code path for every release the embedded extra allows. Standard
library only, so the recording scripts (benchmarks/accuracy) share it without the harness's packages.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable

NEW_NAME = "cache"  # transformers >= 5.24
OLD_NAME = "past_key_values"  # transformers < 5.24 (deprecated from 5.24, removed in 5.40)


def cache_keyword(forward: Callable) -> str:
    """`cache` where the forward (a model's or a layer's, bound or not) has that parameter, else
    `past_key_values`; transformers' deprecation wrappers keep the wrapped signature visible."""
    return NEW_NAME if NEW_NAME in inspect.signature(forward).parameters else OLD_NAME
