"""Names a package re-exports, imported from their home module the first time they are asked for (PEP 562).

``servesize``, ``servesize.api`` and ``servesize.resolve`` each re-export names whose modules a command may never
need (``servesize memory`` starts without the planner); their module ``__getattr__`` calls ``load``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def load(namespace: dict[str, Any], homes: Mapping[str, str], name: str) -> Any:
    """``name`` from its home module (``homes``: name -> module), kept in ``namespace`` (a module's globals), so
    a second read finds it there; AttributeError for a name the module does not re-export."""
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    namespace[name] = value
    return value
