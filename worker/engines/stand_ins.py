"""Inert stand-ins for modules a model package imports but never uses on Tome's path (a GUI, a recorder,
a codec library whose wheel does not load with this torch), present only while that package is imported."""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def stand_ins(names: Sequence[str]) -> Iterator[None]:
    """Put inert modules (each with a real ``__spec__``) in ``sys.modules`` for the names that are not
    importable, and take them out again afterwards (other libraries' checks still see them absent)."""
    installed: list[str] = []
    for name in names:
        if name in sys.modules:
            continue
        try:
            present = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            present = False
        if present:
            continue
        module = types.ModuleType(name)
        is_package = any(other.startswith(name + ".") for other in names)
        module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, is_package=is_package)
        if is_package:
            module.__path__ = []
        sys.modules[name] = module
        installed.append(name)
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, module)
    try:
        yield
    finally:
        for name in installed:
            sys.modules.pop(name, None)
