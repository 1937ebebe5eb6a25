"""Demangle Itanium C++ kernel symbols (`_Z...`) with the C++ runtime's own demangler.

Why: `moe-harness ncu` records kernels by mangled symbol (the only name ncu's filter matches
exactly), while torch traces carry the demangled text CUPTI wrote. Demangling with the same
Itanium ABI routine (`__cxa_demangle`, in libstdc++ or libc++abi) gives the text the traces
carry, so the two can be joined. Without a C++ runtime, or for a symbol it rejects, the name
comes back unchanged: callers treat that as "no demangled form", never as an error.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

_LIBRARY_CANDIDATES = ("stdc++", "c++abi", "c++")


@functools.lru_cache(maxsize=1)
def _runtime():
    """(__cxa_demangle, free) from the first C++ runtime found, or None."""
    for stem in _LIBRARY_CANDIDATES:
        path = ctypes.util.find_library(stem)
        for candidate in (path, f"lib{stem}.so.6", f"lib{stem}.so.1", f"lib{stem}.dylib"):
            if not candidate:
                continue
            try:
                lib = ctypes.CDLL(candidate)
                fn = lib.__cxa_demangle
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
            libc = ctypes.CDLL(ctypes.util.find_library("c"))
            libc.free.argtypes = [ctypes.c_void_p]
            return fn, libc.free
    return None


@functools.lru_cache(maxsize=4096)
def demangle(symbol: str) -> str:
    """The demangled text of an Itanium symbol; anything else (or a failure) unchanged."""
    if not symbol.startswith("_Z"):
        return symbol
    runtime = _runtime()
    if runtime is None:
        return symbol
    fn, free = runtime
    status = ctypes.c_int(0)
    pointer = fn(symbol.encode(), None, None, ctypes.byref(status))
    if not pointer or status.value != 0:
        return symbol
    try:
        return ctypes.string_at(pointer).decode(errors="replace")
    finally:
        free(pointer)
