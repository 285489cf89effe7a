"""Attributes and the finite domain (DESIGN.md data flow, step 1)."""

from overlapdp.schema.attributes import Attribute, BinnedAttribute, CategoricalAttribute, IntAttribute
from overlapdp.schema.domain import Schema, attribute_from_json
from overlapdp.schema.indexset import IndexSet
from overlapdp.schema.infer import infer_schema, read_table

__all__ = [
    "Attribute",
    "BinnedAttribute",
    "CategoricalAttribute",
    "IndexSet",
    "IntAttribute",
    "Schema",
    "attribute_from_json",
    "infer_schema",
    "read_table",
]
