"""How options read in ``--help``: choices as ``[pure|zcdp|gdp]``, flags with no value placeholder.

Typer (0.29) prints a ``<type>`` placeholder after every option in its rich help, taken from the
option's annotation: ``<str>`` for a ``Literal`` or ``Enum`` whose choices it could list, and ``<bool>``
after flags such as ``--json`` and ``--help``, which take no value at all. An option's ``metavar``
replaces that placeholder, so the command classes here set one before the help is drawn: ``[a|b|c]``
for options with choices and an empty one for flags. Options that set their own metavar keep it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption
from typer.models import CommandFunctionType


def choices_metavar(choices: Any) -> str:
    """``[a|b|c]``, the conventional spelling of a closed set of values."""
    return "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"


def _tidy(params: list[Any]) -> list[Any]:
    for p in params:
        if not isinstance(p, TyperOption) or p.metavar is not None:
            continue
        if p.is_flag or p.count:
            p.metavar = ""  # a flag takes no value: no placeholder
            continue
        desc = getattr(p, "type_descriptor", None)
        if desc is not None and desc.is_choice and desc.choices:
            p.metavar = choices_metavar(desc.choices)
    return params


class HelpCommand(TyperCommand):
    """A command whose help lists choices and shows flags without a placeholder."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _tidy(list(super().get_params(ctx)))


class HelpGroup(TyperGroup):
    """A group (the top level, ``schema``) with the same help conventions for its own options."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _tidy(list(super().get_params(ctx)))


class Typer(typer.Typer):
    """``typer.Typer`` whose group and commands use :class:`HelpGroup` and :class:`HelpCommand`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("cls", HelpGroup)
        super().__init__(*args, **kwargs)

    def command(
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        return super().command(name, cls=cls or HelpCommand, **kwargs)
