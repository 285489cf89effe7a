"""The Python client charges exactly what the HTTP API would: a boolean or a string amount is refused by
the service (422) with nothing spent, never turned into a charge of 1.0 or 0.5 (issue 24, item 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from overlapdp.errors import ServiceRefused
from overlapdp.schema import IntAttribute, Schema


@pytest.mark.parametrize("amount", [True, "0.5", "1", [0.5]])
def test_the_client_refuses_what_http_refuses(tmp_path: Path, amount: object) -> None:
    from overlapdp.service.client import AdminClient, Client
    from overlapdp.service.embedded import embedded_service

    schema = Schema((IntAttribute("age", 0, 9),))
    pd.DataFrame({"age": [1, 2, 3, 4]}).to_csv(tmp_path / "d.csv", index=False)
    with embedded_service(tmp_path / "l.sqlite") as (url, admin_token):
        admin = AdminClient(url, admin_token)
        admin.register_dataset("t", str(tmp_path / "d.csv"), schema.to_json(), engine="pandas", budget=10.0)
        ann = Client(url, admin.create_analyst("ann", {"t": 5.0}))
        before = ann.me()
        for call in (
            lambda: ann.query("t", "age < 5", epsilon=amount),  # type: ignore[arg-type]
            lambda: ann.batch("t", ["age < 5", "age >= 5"], epsilon=amount),  # type: ignore[arg-type]
        ):
            with pytest.raises(ServiceRefused) as err:
                call()
            assert err.value.status == 422
        assert ann.me().equals(before)  # nothing was spent
        # numpy's numbers are numbers: charged as the float they hold
        frame = ann.query("t", "age < 5", epsilon=np.float64(0.25))
        assert len(frame) == 1
        ann.close()
        admin.close()
