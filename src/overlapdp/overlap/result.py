"""The answer of the overlap engine, the composition functions it maximises and its input errors.

MATH.md 1.8: $\\gamma_w(Q)=\\max_{x\\in\\mathbb D}\\mathrm{comp}(\\{q : x\\in C_q\\})$ for a monotone
``comp``. Section 7: the closed forms ``count``, ``sum`` and ``l2`` are $g(\\sum_q f(w_q))$ with an
increasing $g$, so they reduce to a maximum weighted depth with per-query loads $f(w_q)$:

- ``count``: $f=1$, $g=\\mathrm{id}$ (the plain maximum overlap $\\gamma$);
- ``sum``: $f(w)=w$, $g=\\mathrm{id}$ (pure DP epsilon, zCDP rho, RDP at one order);
- ``l2``: $f(w)=w^2$, $g=\\sqrt{\\cdot}$ (Gaussian DP mu);
- ``vector``: one ``sum`` per component of the weight vectors, each maximised on its own (RDP orders);
- :class:`SetComp`: any monotone set function with a cheap upper bound (approximate DP through PLDs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

import numpy as np
import numpy.typing as npt

from overlapdp import validation
from overlapdp.errors import CompError as CompError
from overlapdp.errors import DomainTooLargeError as DomainTooLargeError
from overlapdp.errors import DuplicateQueryError as DuplicateQueryError
from overlapdp.errors import OverlapInputError as OverlapInputError
from overlapdp.errors import SchemaMismatchError as SchemaMismatchError
from overlapdp.errors import UnknownQueryError as UnknownQueryError
from overlapdp.errors import WeightError as WeightError

FloatArray = npt.NDArray[np.float64]
CompName = Literal["count", "sum", "l2", "vector"]


@dataclass(frozen=True)
class SetComp:
    """A user-supplied monotone composition over sets of queries.

    ``value(indices)`` is the composed loss of the queries at those indices (of the list given to
    :func:`max_overlap`); ``upper(indices)`` must be a cheap upper bound of ``value`` over EVERY subset of
    ``indices`` (for a monotone ``value``, ``value`` itself is one). Both must be monotone: adding a
    query never lowers them (MATH.md 2.2: only maximal overlapping sets matter).
    """

    value: Callable[[Sequence[int]], float]
    upper: Callable[[Sequence[int]], float]


Comp = CompName | SetComp

T = TypeVar("T")


class LazyTuple(Sequence[T]):
    """A tuple whose items are computed on first read (its length is known at once).

    The engine's witness is covered by up to every query of the workload; listing their ids is per-query
    Python work, so it is done only if the caller reads them. It compares, hashes, prints and pickles as
    the plain tuple it stands for. Until then it keeps what it is made from (the workload's ids).
    """

    __slots__ = ("_items", "_make", "_size")

    def __init__(self, size: int, make: Callable[[], tuple[T, ...]]) -> None:
        self._size = size
        self._make: Callable[[], tuple[T, ...]] | None = make
        self._items: tuple[T, ...] | None = None

    def materialise(self) -> tuple[T, ...]:
        """The items, computed (once) now. Safe from several threads: the items are stored before
        the recipe is dropped, so a thread that finds no recipe finds the items."""
        items = self._items
        if items is None:
            make = self._make
            if make is None:
                items = self._items
                assert items is not None
                return items
            items = make()
            if len(items) != self._size:
                raise AssertionError("lazy tuple: computed length differs from the declared one")
            self._items = items
            self._make = None  # drop the references it held (the workload)
        return items

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        return self.materialise()[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self.materialise())

    def __contains__(self, item: object) -> bool:
        return item in self.materialise()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyTuple):
            return len(self) == len(other) and self.materialise() == other.materialise()
        if isinstance(other, tuple):
            return len(self) == len(other) and self.materialise() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.materialise())

    def __add__(self, other: tuple[T, ...]) -> tuple[T, ...]:
        return self.materialise() + tuple(other)

    def __radd__(self, other: tuple[T, ...]) -> tuple[T, ...]:
        return tuple(other) + self.materialise()

    def __repr__(self) -> str:
        return repr(self.materialise())

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (self.materialise(),))


@dataclass(frozen=True)
class OverlapResult:
    """The maximum (weighted) overlap of a workload and the row that attains it.

    ``lower`` is attained: the witness row is covered by exactly the queries in ``queries`` and their
    composed weight is ``lower`` (computed exactly from the weights and rounded up to a float, MATH.md 7.8).
    ``upper`` is a safe upper bound of the true maximum. When ``exact`` they are equal and ``value`` is
    the smallest float >= the exact maximum (MATH.md 7.8: float ties are resolved exactly or
    the answer is not called exact; for ``l2`` compared squared); otherwise ``value`` is
    the SAFE UPPER BOUND ``upper`` (DESIGN.md: never under-report privacy loss). For the vector comp
    ``value``, ``upper`` and ``lower`` are arrays, ``components`` holds one result per component (each
    with its own witness), and the top-level witness is None.

    ``queries`` (the covering queries' ids; ``"#i"`` for a query without one) and ``query_indices``
    (their positions in the workload, or rows of the arrays of :func:`~overlapdp.overlap.arrays.max_overlap_boxes`)
    are tuples, or :class:`LazyTuple` s that list them only when read (``len`` is free).
    """

    value: float | FloatArray
    exact: bool
    upper: float | FloatArray
    lower: float | FloatArray
    witness: dict[str, Any] | None
    witness_row: tuple[int, ...] | None
    queries: Sequence[str]
    algorithm: str
    components: tuple[OverlapResult, ...] = ()
    query_indices: Sequence[int] = field(default=(), compare=False)

    def to_json(self) -> dict[str, Any]:
        """The CLI's JSON form: value, exact, upper, lower, witness, queries, algorithm."""

        def num(x: float | FloatArray) -> float | list[float]:
            if isinstance(x, np.ndarray):
                return [float(v) for v in x]
            return float(x)

        out: dict[str, Any] = {
            "value": num(self.value),
            "exact": self.exact,
            "upper": num(self.upper),
            "lower": num(self.lower),
            "witness": self.witness,
            "queries": list(self.queries),
            "algorithm": self.algorithm,
        }
        if self.components:
            out["components"] = [c.to_json() for c in self.components]
        return out


def load_of(name: str, weight: float) -> float:
    """``f(w)`` of one weight for a scalar comp."""
    if name == "count":
        return 1.0
    if name == "l2":
        return weight * weight
    return weight


def check_weight(weight: Any, what: str) -> float:
    """A finite non-negative float, or :class:`WeightError` naming ``what``
    (:func:`overlapdp.validation.check_weight`)."""
    return validation.check_weight(weight, f"{what}: weight")


def check_weights(values: Any, t: int, ids: Sequence[str | None]) -> FloatArray:
    """``t`` finite non-negative weights as an array; the first bad one is named by its query
    (:func:`overlapdp.validation.check_weights`)."""

    def field(i: int) -> str:
        return f"query {ids[i] if i < len(ids) else None!r} (#{i}): weight"

    return validation.check_weights(values, t, field)


def check_vectors(values: Any, t: int, ids: Sequence[str | None]) -> FloatArray:
    """``t`` weight vectors of one common length as a ``(t, k)`` array."""
    if values is None:
        raise CompError("the vector comp needs weights: one vector per query")
    rows = list(values)
    if len(rows) != t:
        raise WeightError(f"expected one weight vector per query ({t}), got {len(rows)}")
    if t == 0:
        return np.zeros((0, 0), dtype=np.float64)
    lengths = []
    for i, r in enumerate(rows):
        try:
            lengths.append(len(r))
        except TypeError:
            raise WeightError(f"query {ids[i]!r} (#{i}): a vector weight must be a sequence") from None
    if len(set(lengths)) != 1:
        i = next(i for i, n in enumerate(lengths) if n != lengths[0])
        raise WeightError(
            f"query {ids[i]!r} (#{i}): weight vector has length {lengths[i]}, the first has {lengths[0]}"
        )
    if lengths[0] == 0:
        raise WeightError("weight vectors must have at least one component")
    try:
        arr = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        for i, r in enumerate(rows):  # name the first component that is not a weight
            for k, v in enumerate(r):
                validation.check_weight(v, f"query {ids[i]!r} (#{i}): component {k} of the weight")
        raise WeightError("weight vectors must hold numbers") from None
    bad = np.argwhere(~np.isfinite(arr) | (arr < 0))
    if bad.size:
        i, k = (int(v) for v in bad[0])
        raise WeightError(
            f"query {ids[i]!r} (#{i}): component {k} of the weight must be a finite non-negative "
            f"number, got {float(arr[i, k])!r}"
        )
    return arr


def comp_name(comp: Any) -> str:
    """Validate ``comp``: one of the names or a :class:`SetComp`."""
    if isinstance(comp, SetComp):
        return "set"
    if comp in ("count", "sum", "l2", "vector"):
        return str(comp)
    raise CompError(f"unknown comp {comp!r}: use 'count', 'sum', 'l2', 'vector' or a SetComp")


def combine_components(parts: Sequence[OverlapResult]) -> OverlapResult:
    """The vector comp's result: one scalar result per component, each with its own witness."""
    return OverlapResult(
        value=np.array([float(p.value) for p in parts]),
        exact=all(p.exact for p in parts),
        upper=np.array([float(p.upper) for p in parts]),
        lower=np.array([float(p.lower) for p in parts]),
        witness=None,
        witness_row=None,
        queries=(),
        algorithm="vector:" + "/".join(sorted({p.algorithm for p in parts})),
        components=tuple(parts),
    )
