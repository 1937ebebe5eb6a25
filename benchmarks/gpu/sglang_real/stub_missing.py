"""Import-time stand-ins for packages SGLang imports but a decode benchmark never calls.

Loaded as `sitecustomize` (copied under that name onto PYTHONPATH) so that every process SGLang
spawns gets it too. Only the top-level names in STUB_MISSING_MODULES (comma-separated) are stubbed, and
only when the real package cannot be found. Every attribute of a stub is a stub class; calling one
gives a MagicMock, so a stub that is really used fails where it is used, not silently. The GPU image
lacks these packages and has no network; carrying them (xgrammar alone is 44 MB) would not fit.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from unittest import mock


class _StubMeta(type):
    """Any attribute of a stub class is another stub class (xgrammar.structural_tag.X.Y...)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__qualname__}.{name}")


class _Stub(metaclass=_StubMeta):
    """Stands in for any class or function: usable as a base class, a type hint in pydantic models
    (any value), a decorator; calling it gives a MagicMock, so real use fails where it happens."""

    def __new__(cls, *args, **kwargs):
        return mock.MagicMock(name=cls.__qualname__)

    def __class_getitem__(cls, item):
        return cls

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema
        return core_schema.any_schema()


def _stub_class(name: str) -> type:
    return _StubMeta(name.rsplit(".", 1)[-1], (_Stub,), {"__qualname__": name})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        # Appended last to sys.meta_path: only asked once every real finder has failed.
        if fullname.split(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__spec__, m.__path__, m.__file__, m.__version__ = spec, [], f"<stub {spec.name}>", "0.0.0"
        return m

    def exec_module(self, module):
        sys.stderr.write(f"[stub_missing] stubbed {module.__name__}\n") if os.environ.get("STUB_MISSING_VERBOSE") else None


_names = {n.strip() for n in os.environ.get("STUB_MISSING_MODULES", "").split(",") if n.strip()}
if _names:
    sys.meta_path.append(_StubFinder(_names))
