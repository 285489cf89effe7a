"""The maximum (weighted) overlap engine (DESIGN.md data flow, step 3; MATH.md sections 1, 2 and 7)."""

from overlapdp.overlap.atoms import Atoms, AttributeAtoms, compute_atoms

__all__ = ["Atoms", "AttributeAtoms", "compute_atoms"]
