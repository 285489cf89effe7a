"""The maximum (weighted) overlap engine (DESIGN.md data flow, step 3; MATH.md 1, 2, 7).

- :func:`max_overlap`: the worst row of a workload, the value there, the queries covering it;
- :func:`max_overlap_boxes`: the same for boxes given as numpy arrays (no query objects);
- :class:`OverlapIndex`: the same kept up to date under add / peek / remove (the accountant's filter);
- references: :func:`brute_force_overlap`, :func:`subset_overlap`, :func:`graph_overlap`.
"""

from typing import TYPE_CHECKING

from overlapdp._lazy import lazy_exports

if TYPE_CHECKING:
    from overlapdp.overlap.arrays import max_overlap_boxes
    from overlapdp.overlap.atoms import Atoms, AttributeAtoms, compute_atoms
    from overlapdp.overlap.engine import max_overlap
    from overlapdp.overlap.index import OverlapIndex
    from overlapdp.overlap.magnitude import MagnitudeError
    from overlapdp.overlap.reference import brute_force_overlap, graph_overlap, overlap_graph, subset_overlap
    from overlapdp.overlap.result import (
        CompError,
        DomainTooLargeError,
        DuplicateQueryError,
        OverlapInputError,
        OverlapResult,
        SchemaMismatchError,
        SetComp,
        UnknownQueryError,
        WeightError,
    )

# Public name -> submodule that defines it, imported on first use (overlapdp/_lazy.py).
_EXPORTS = {
    "Atoms": "atoms",
    "AttributeAtoms": "atoms",
    "compute_atoms": "atoms",
    "max_overlap": "engine",
    "max_overlap_boxes": "arrays",
    "OverlapIndex": "index",
    "MagnitudeError": "magnitude",
    "brute_force_overlap": "reference",
    "graph_overlap": "reference",
    "overlap_graph": "reference",
    "subset_overlap": "reference",
    "CompError": "result",
    "DomainTooLargeError": "result",
    "DuplicateQueryError": "result",
    "OverlapInputError": "result",
    "OverlapResult": "result",
    "SchemaMismatchError": "result",
    "SetComp": "result",
    "UnknownQueryError": "result",
    "WeightError": "result",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "Atoms",
    "AttributeAtoms",
    "CompError",
    "DomainTooLargeError",
    "DuplicateQueryError",
    "MagnitudeError",
    "OverlapIndex",
    "OverlapInputError",
    "OverlapResult",
    "SchemaMismatchError",
    "SetComp",
    "UnknownQueryError",
    "WeightError",
    "brute_force_overlap",
    "compute_atoms",
    "graph_overlap",
    "max_overlap",
    "max_overlap_boxes",
    "overlap_graph",
    "subset_overlap",
]
