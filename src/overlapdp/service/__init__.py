"""The multi-analyst query service (DESIGN.md data flow, step 7): HTTP API, tokens, quotas, a durable ledger.

``create_app(QueryService(open_ledger(url)), AdminKey(...))`` builds the FastAPI application;
``overlapdp serve`` runs it on uvicorn; :mod:`overlapdp.client` talks to it.
"""

from overlapdp.service.app import create_app
from overlapdp.service.auth import AdminKey, AuthError
from overlapdp.service.core import Limits, QueryService, ServiceError
from overlapdp.service.ledger import LedgerError, LedgerStore, open_ledger

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
