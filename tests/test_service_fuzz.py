"""Schemathesis against the service's OpenAPI description: no input makes it answer 5xx.

Bounded: about 40 examples per operation (positive and negative data), the whole module well under two
minutes. Admin operations are called with the admin token, analyst operations with an analyst's token,
so the fuzzer reaches the code behind authentication.

Marked slow (16 s of CPU): the quick run keeps the no-5xx claim through tests/test_query_limits.py
(``test_http_never_answers_500`` and the hostile-input tests). Schemathesis builds the cases of
``schema.parametrize`` at collection (2.8 s of CPU; its fixture-based schema fails under pytest 9), so
tests/conftest.py does not collect this module in a run that leaves slow tests out.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from overlapdp.service import AdminKey, QueryService, create_app, open_ledger
from support.service import ADMIN_TOKEN, write_adult

_STATE: dict[str, Any] = {}


def _build_schema() -> Any:
    folder = Path(tempfile.mkdtemp(prefix="overlapdp-fuzz-"))
    # built at collection, so no fixture can remove it: removed when the test run's process exits
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    service = QueryService(open_ledger(folder / "l.sqlite"))
    path, data_schema = write_adult(folder, rows=500)
    service.register_dataset("adult", str(path), data_schema, "pandas", "pure", 1e6)
    _STATE["analyst"] = service.create_analyst("alice", {"adult": 1e6}).token
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(service, AdminKey(ADMIN_TOKEN)))


schema = _build_schema()


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_gets_a_server_error(case: Any) -> None:
    token = ADMIN_TOKEN if case.path.startswith("/v1/admin") else _STATE["analyst"]
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=[not_a_server_error])
