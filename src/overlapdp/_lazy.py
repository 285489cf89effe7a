"""Lazy public names of a package (PEP 562), so that importing a package costs only what is used.

``import overlapdp.mechanisms`` used to import every submodule and, through them, SciPy's signal
module, pandas, Polars and DuckDB (6.4 s of CPU) before one name was used. A package now lists its
public names with the submodule that defines each; the submodule is imported on first access and the
name is then a plain module attribute. ``from overlapdp.engine import DuckDBEngine`` works as before.

Each package repeats its names in an ``if TYPE_CHECKING:`` block of ordinary imports, so that mypy
sees real types (not ``Any`` from a module ``__getattr__``); tests/test_startup.py checks that the two
lists agree and that every name resolves. No public name may equal its submodule's name: importing the
submodule would bind that name on the package to the module (hence ``mechanisms/_noisy_counts.py``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from overlapdp._optional import extra_for


def lazy_exports(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose public ``name`` lives in ``package.names[name]``."""

    def __getattr__(name: str) -> Any:
        submodule = names.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            module = importlib.import_module(f"{package}.{submodule}")
        except ModuleNotFoundError as exc:
            # A name of an optional part (the service, plots, ...): say which extra installs it.
            clear = extra_for(exc, f"{package}.{name}")
            if clear is None:
                raise
            raise clear from None
        value = getattr(module, name)
        # Later lookups find the attribute directly, without this function.
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
