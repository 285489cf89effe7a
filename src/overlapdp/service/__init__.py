"""The multi-analyst query service (DESIGN.md data flow, step 8): HTTP API, tokens, quotas, a durable ledger.

``create_app(QueryService(open_ledger(url)), AdminKey(...))`` builds the FastAPI application;
``overlapdp serve`` runs it on uvicorn; :mod:`overlapdp.service.client` talks to it.
"""

from typing import TYPE_CHECKING

from overlapdp._lazy import lazy_exports

if TYPE_CHECKING:
    from overlapdp.service.app import create_app
    from overlapdp.service.auth import AdminKey, AuthError
    from overlapdp.service.core import QueryService, ServiceError
    from overlapdp.service.ledger import LedgerError, LedgerStore, open_ledger
    from overlapdp.service.limits import Limits

# Public name -> submodule that defines it, imported on first use (overlapdp/_lazy.py).
_EXPORTS = {
    "create_app": "app",
    "AdminKey": "auth",
    "AuthError": "auth",
    "Limits": "limits",
    "QueryService": "core",
    "ServiceError": "core",
    "LedgerError": "ledger",
    "LedgerStore": "ledger",
    "open_ledger": "ledger",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "AdminKey",
    "AuthError",
    "LedgerError",
    "LedgerStore",
    "Limits",
    "QueryService",
    "ServiceError",
    "create_app",
    "open_ledger",
]
