"""The query service without HTTP (:class:`QueryService`): one object over the rooms of the service.

- :mod:`~overlapdp.service.administration`: data sets, analysts, tokens, the ledger's pages;
- :mod:`~overlapdp.service.queries`: batches parsed, counted and noised, dry runs, plans;
- :mod:`~overlapdp.service.sessions`: sparse-vector and guess-and-check sessions;
- :mod:`~overlapdp.service.admission`: pending requests, group commit and decisions (its docstring
  holds the rules that keep the service sound);
- :mod:`~overlapdp.service.shared`: what they share (the store, the limits, each data set's filters);
  the filters themselves are :mod:`~overlapdp.service.filters`.
"""

from __future__ import annotations

import threading
import weakref

from overlapdp.errors import Conflict as Conflict
from overlapdp.errors import FieldRefused as FieldRefused
from overlapdp.errors import NotFound as NotFound
from overlapdp.errors import QuotaExceeded as QuotaExceeded
from overlapdp.errors import ServiceError as ServiceError
from overlapdp.errors import TimeBudgetExceeded as TimeBudgetExceeded
from overlapdp.errors import TooLarge as TooLarge
from overlapdp.errors import Unavailable as Unavailable
from overlapdp.service._dryrun import DryRunPool
from overlapdp.service._projection import ProjectionPool
from overlapdp.service.administration import Administration
from overlapdp.service.auth import TokenCache
from overlapdp.service.ledger import LedgerStore
from overlapdp.service.limits import Limits
from overlapdp.service.sessions import Sessions
from overlapdp.service.shared import DatasetState


class QueryService(Administration, Sessions):
    """Data sets, analysts and admission over one ledger store: the rooms put together (each method
    is defined in its room; this class only builds the shared state and stops it)."""

    def __init__(self, store: LedgerStore, *, limits: Limits | None = None) -> None:
        self.store = store
        self.limits = limits or Limits()
        self._states: dict[str, DatasetState] = {}
        self._states_lock = threading.Lock()
        self._tokens = TokenCache()
        #: Consistent answers are projected in these worker processes (none runs until one is asked).
        self.projections = ProjectionPool(self.limits.projection_workers)
        # A service dropped without close() stops its workers too (they also exit with the process).
        weakref.finalize(self, self.projections.close)
        for record in store.list_datasets():
            self._install(record)
        #: ``/cost`` dry runs in worker processes (None: in this process).
        self.dry_runs: DryRunPool | None = None
        url = getattr(store, "url", None)
        if self.limits.cost_workers > 0 and isinstance(url, str):
            self.dry_runs = DryRunPool(url, self.limits.cost_workers, self.limits)
            weakref.finalize(self, self.dry_runs.close)
            self.dry_runs.start()

    def close(self) -> None:
        """Stop the worker processes and close the ledger."""
        self.projections.close()
        if self.dry_runs is not None:
            self.dry_runs.close()
        self.store.close()
