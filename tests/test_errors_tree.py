"""One exception tree (overlapdp.errors) and one module of parameter checks (overlapdp.validation).

The tree is checked against the source itself: every ``class`` statement under src/overlapdp whose bases
resolve to an exception must be in errors.py (other modules only re-export), every such class derives
from OverlapDPError, and no two distinct exception classes share a name (two ``QuotaExceeded``, one in
the service and one in the client, made ``except QuotaExceeded`` catch one or the other depending on
the import). The HTTP mapping is checked by raising each class inside the real application.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import math
import pkgutil
from collections import defaultdict
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import overlapdp
from overlapdp import errors, validation
from overlapdp.errors import OverlapDPError

SRC = Path(overlapdp.__file__).parent
# A private control-flow signal of the ASGI body-size middleware: raised inside the receive callable and
# caught by the same middleware, which answers 413 itself; never reaches a caller or a handler.
PRIVATE_SIGNALS = {("overlapdp.service.middleware", "_BodyTooLarge")}


def _modules() -> Iterator[tuple[str, Any, Path]]:
    for info in pkgutil.walk_packages(overlapdp.__path__, "overlapdp."):
        module = importlib.import_module(info.name)
        path = Path(inspect.getfile(module))
        yield info.name, module, path


def _base_object(node: ast.expr, namespace: dict[str, Any]) -> Any:
    """The object a base-class expression names (``Name`` or dotted ``Attribute``), or None."""
    if isinstance(node, ast.Name):
        return namespace.get(node.id, getattr(builtins, node.id, None))
    if isinstance(node, ast.Attribute):
        owner = _base_object(node.value, namespace)
        return getattr(owner, node.attr, None)
    return None


def _exception_class_statements() -> list[tuple[str, str]]:
    """(module, class name) of every ``class`` statement, at any depth, whose bases include an exception."""
    found = []
    for name, module, path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        namespace = vars(module)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [_base_object(b, namespace) for b in node.bases]
            if any(inspect.isclass(b) and issubclass(b, BaseException) for b in bases):
                found.append((name, node.name))
    return found


def _exception_classes() -> set[type[BaseException]]:
    """Every distinct exception class defined in overlapdp and reachable from one of its modules."""
    out: set[type[BaseException]] = set()
    for _, module, _ in _modules():
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__.startswith("overlapdp")
            ):
                out.add(obj)
    return out


def test_every_exception_class_is_defined_in_errors() -> None:
    statements = _exception_class_statements()
    assert ("overlapdp.errors", "OverlapDPError") in statements  # the walk sees errors.py itself
    elsewhere = [s for s in statements if s[0] != "overlapdp.errors" and s not in PRIVATE_SIGNALS]
    assert elsewhere == []


def test_every_exception_class_is_an_overlapdp_error() -> None:
    classes = {c for c in _exception_classes() if (c.__module__, c.__name__) not in PRIVATE_SIGNALS}
    assert all(c.__module__ == "overlapdp.errors" for c in classes), sorted(
        f"{c.__module__}.{c.__name__}" for c in classes if c.__module__ != "overlapdp.errors"
    )
    assert [c.__name__ for c in classes if not issubclass(c, OverlapDPError)] == []
    defined = {o for o in vars(errors).values() if inspect.isclass(o) and issubclass(o, BaseException)}
    assert all(issubclass(c, OverlapDPError) for c in defined)


def test_no_two_exception_classes_share_a_name() -> None:
    by_name: dict[str, set[type[BaseException]]] = defaultdict(set)
    for c in _exception_classes():
        by_name[c.__name__].add(c)
    assert {n: len(cs) for n, cs in by_name.items() if len(cs) > 1} == {}


def test_old_import_paths_still_give_the_same_classes() -> None:
    from overlapdp.mechanisms import errors as mech_errors
    from overlapdp.overlap import magnitude, result
    from overlapdp.privacy import definitions, measures
    from overlapdp.service import auth, client, core
    from overlapdp.service.ledger import base

    assert (
        definitions.BudgetError is errors.BudgetError and measures.AdaptivityError is errors.AdaptivityError
    )
    assert mech_errors.MechanismError is errors.MechanismError and result.WeightError is errors.WeightError
    assert magnitude.MagnitudeError is errors.MagnitudeError and base.LedgerError is errors.LedgerError
    assert core.QuotaExceeded is errors.QuotaExceeded and auth.AuthError is errors.AuthError
    # The client's class has its own name now; its old name is an alias of it, not of the server's class.
    assert client.QuotaExceeded is errors.QuotaRefused is not errors.QuotaExceeded
    assert issubclass(errors.QuotaRefused, errors.ServiceRefused)
    # Multiple inheritance is kept: these are caught by code that expects the builtin classes.
    assert issubclass(errors.MissingExtraError, ImportError) and issubclass(
        errors.UnsupportedDataError, TypeError
    )
    assert issubclass(errors.WeightError, errors.WorkloadError) and issubclass(
        errors.SchemaMismatchError, errors.QueryError
    )


# -- the HTTP service's mapping ------------------------------------------------------------------------------
def _instance(cls: type[OverlapDPError]) -> OverlapDPError:
    if issubclass(cls, errors.FieldRefused):
        return cls("epsilon", "boom")  # type: ignore[call-arg]
    if issubclass(cls, errors.ServiceRefused):
        return cls(403, {"error": "X", "detail": "boom"})  # type: ignore[call-arg]
    return cls("boom")


def _expected_status(cls: type[OverlapDPError]) -> int:
    if issubclass(cls, errors.FieldRefused):
        return 422
    if issubclass(cls, errors.ServiceError):
        return int(cls.status)
    if issubclass(cls, errors.AuthError):
        return 401
    if issubclass(cls, errors.LedgerError):
        return 409
    return 400


def test_every_error_maps_to_the_status_the_service_intends(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from overlapdp.service import AdminKey, QueryService, create_app, open_ledger

    classes = {
        o.__name__: o for o in vars(errors).values() if inspect.isclass(o) and issubclass(o, OverlapDPError)
    }
    service = QueryService(open_ledger(tmp_path / "l.sqlite"))
    app = create_app(service, AdminKey("x" * 40))

    def boom(name: str) -> None:
        raise _instance(classes[name])

    app.add_api_route("/raise/{name}", boom)
    # The intended statuses, as the OpenAPI description declares them (app._ERRORS).
    declared = {400, 401, 403, 404, 405, 409, 413, 422, 429, 503}
    try:
        client = TestClient(app, raise_server_exceptions=False)
        for name, cls in classes.items():
            response = client.get(f"/raise/{name}")
            assert response.status_code == _expected_status(cls), name
            assert response.status_code in declared, name
            want = "ValidationError" if issubclass(cls, errors.FieldRefused) else name
            assert response.json()["error"] == want, name  # the class name is the wire's error field
        assert client.get("/raise/QuotaExceeded").status_code == 403
        assert client.get("/raise/BadRequest").status_code == 400
        assert client.get("/raise/BudgetError").status_code == 400
    finally:
        service.store.close()


# -- validation ----------------------------------------------------------------------------------------------
FIELDS = st.from_regex(r"[a-z][a-z_ ]{0,15}", fullmatch=True)
NON_NUMBERS = st.one_of(st.booleans(), st.text(max_size=5), st.none(), st.just([1.0]), st.just({}))
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
NEGATIVE = st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=False) | st.integers(max_value=-1)

# Each check with values it must refuse: (check, bad values).
CHECKS: dict[str, tuple[Callable[[Any, str], Any], st.SearchStrategy[Any]]] = {
    "check_finite": (validation.check_finite, NON_NUMBERS | NON_FINITE),
    "check_positive": (validation.check_positive, NON_NUMBERS | NON_FINITE | NEGATIVE | st.just(0)),
    "check_probability": (
        validation.check_probability,
        NON_NUMBERS | NON_FINITE | NEGATIVE | st.sampled_from([0, 0.0, 1, 1.0, 1.5]),
    ),
    "check_level": (
        validation.check_level,
        NON_NUMBERS | NON_FINITE | NEGATIVE | st.sampled_from([0, 1, 2.5]),
    ),
    "check_int": (
        validation.check_int,
        NON_NUMBERS | NON_FINITE | NEGATIVE | st.sampled_from([0, 1.0, 2.0, 0.5]),
    ),
}


@pytest.mark.parametrize("name", sorted(CHECKS))
@settings(max_examples=60)
@given(data=st.data(), field=FIELDS)
def test_validation_names_the_field_and_the_value(name: str, data: st.DataObject, field: str) -> None:
    check, bad = CHECKS[name]
    value = data.draw(bad)
    with pytest.raises(OverlapDPError) as info:
        check(value, field)
    assert field in str(info.value) and repr(value) in str(info.value)


@settings(max_examples=60)
@given(x=st.floats(min_value=5e-324, max_value=1e300), field=FIELDS)
def test_validation_returns_good_values_unchanged(x: float, field: str) -> None:
    assert validation.check_positive(x, field) == x and validation.check_finite(-x, field) == -x
    assert validation.check_positive(0, field, allow_zero=True) == 0.0
    if x < 1:
        assert validation.check_probability(x, field) == x and validation.check_level(x, field) == x


def test_validation_keeps_each_areas_error_type() -> None:
    from overlapdp.mechanisms.calibration import check_sensitivity
    from overlapdp.mechanisms.noise import DiscreteLaplaceNoise
    from overlapdp.privacy.definitions import PureDP, check_delta

    # one level check, whose error is each area's: workloads catch AnswerError, mechanisms MechanismError
    with pytest.raises(errors.AnswerError, match="confidence level"):
        validation.check_level(1.5)
    with pytest.raises(errors.MechanismError, match="confidence level"):
        DiscreteLaplaceNoise(Fraction(1)).half_width(0)
    with pytest.raises(errors.MechanismError, match="sensitivity"):
        check_sensitivity(True)
    with pytest.raises(errors.BudgetError, match="delta"):
        check_delta(0.0)
    with pytest.raises(errors.BudgetError, match="epsilon"):
        PureDP(math.nan)
    # A bool was taken as 1.0 by the definitions and the mechanisms' cost objects (float(True)); now refused.
    from overlapdp.privacy.mechanisms import Laplace

    with pytest.raises(errors.BudgetError, match="epsilon"):
        PureDP(True)  # type: ignore[arg-type]
    with pytest.raises(errors.BudgetError, match="sensitivity"):
        Laplace(scale=1.0, sensitivity=True)  # type: ignore[arg-type]
    assert validation.check_int(3, "c") == 3 and validation.check_int(0, "c", minimum=0) == 0


def test_an_integer_beyond_the_float_range_is_a_named_error() -> None:
    # float(10**400) raises a bare OverflowError: max_overlap and OverlapIndex.add let it through while
    # parse_where named it; every weight, bound and parameter now goes through overlapdp.validation.
    from overlapdp import OverlapIndex, Schema, max_overlap
    from overlapdp.privacy.definitions import PureDP
    from overlapdp.query import parse_where
    from overlapdp.query.aggregate import Clipping

    schema = Schema.from_json({"attributes": [{"name": "a", "type": "int", "min": 0, "max": 9}]})
    qs = [parse_where(schema, "a < 5", id="x"), parse_where(schema, "a > 2", id="y")]
    huge = 10**400
    cases: list[tuple[Callable[[], Any], type[OverlapDPError]]] = [
        (lambda: max_overlap(qs, comp="sum", weights=[huge, 1]), errors.WeightError),
        (lambda: max_overlap(qs, comp="vector", weights=[[huge], [1]]), errors.WeightError),
        (lambda: OverlapIndex(schema, comp="sum").add(qs[0], weight=huge), errors.WeightError),
        (lambda: OverlapIndex(schema, comp="vector").add(qs[0], weight=[huge]), errors.WeightError),
        (lambda: parse_where(schema, "a < 5", weight=huge), errors.QueryError),
        (lambda: Clipping("a", 0, huge), errors.QueryError),
        (lambda: PureDP(huge), errors.BudgetError),  # type: ignore[arg-type]
    ]
    for call, kind in cases:
        with pytest.raises(kind, match="401 digits"):
            call()
    # a weight is part of a query: the engine's refusal is a QueryError as parse_where's is
    for call, _ in cases[:5]:
        with pytest.raises(errors.QueryError, match="401 digits"):
            call()


def test_one_level_check_for_workloads_and_mechanisms() -> None:
    # answering and the noise each had a level check, raising AnswerError and MechanismError; the one
    # check's LevelError is both, so either area's callers still catch it
    assert issubclass(errors.LevelError, errors.AnswerError)
    assert issubclass(errors.LevelError, errors.MechanismError)
    with pytest.raises(errors.LevelError, match="confidence level"):
        validation.check_level(0)
