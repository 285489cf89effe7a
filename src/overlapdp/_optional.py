"""Optional dependencies: the extra that installs each, and one clear error when one is missing.

The base install is the library's core (schema to engine, DuckDB and pandas, the command line).
The service, Spark, plots, solvers and the PostgreSQL ledger are extras (pyproject.toml); their
modules import them where used (DESIGN.md, "heavy dependencies are imported where used").
"""

from __future__ import annotations

from overlapdp.errors import MissingExtraError

#: Top-level module -> the extra of pyproject.toml that installs it.
EXTRA_OF: dict[str, str] = {
    "fastapi": "service",
    "starlette": "service",
    "uvicorn": "service",
    "httpx": "service",
    "matplotlib": "plots",
    "pyspark": "spark",
    "py4j": "spark",
    "pytoulbar2": "solvers",
    "psycopg": "postgres",
    "polars": "polars",
    "networkx": "reference",
}


def missing_extra(extra: str, what: str, module: str | None = None) -> MissingExtraError:
    """``what needs the 'extra' extra: pip install 'overlapdp[extra]'`` (naming the missing module)."""
    missing = f" ({module} is not installed)" if module else ""
    return MissingExtraError(
        f"{what} needs the {extra!r} extra{missing}: pip install 'overlapdp[{extra}]'",
        extra=extra,
        module=module,
    )


def extra_for(exc: ModuleNotFoundError, what: str) -> MissingExtraError | None:
    """The clear error for ``exc`` when the module it misses belongs to an extra, else None."""
    root = (exc.name or "").split(".")[0]
    extra = EXTRA_OF.get(root)
    return None if extra is None else missing_extra(extra, what, root)


def missing_extras(extras: tuple[str, ...]) -> list[str]:
    """The extras among ``extras`` with a module that is not installed (looked up, not imported)."""
    from importlib.util import find_spec

    return [
        extra
        for extra in extras
        if any(find_spec(module) is None for module, of in EXTRA_OF.items() if of == extra)
    ]


def require(extras: tuple[str, ...], what: str) -> None:
    """Raise one :class:`MissingExtraError` naming every extra of ``extras`` that is not installed.

    Called before work starts (``overlapdp demo`` would otherwise fail after minutes, at its report).
    """
    missing = missing_extras(extras)
    if not missing:
        return
    names = " and ".join(repr(e) for e in missing)
    plural = "s" if len(missing) > 1 else ""
    raise MissingExtraError(
        f"{what} needs the {names} extra{plural}: pip install 'overlapdp[{','.join(missing)}]'",
        extra=",".join(missing),
    )
