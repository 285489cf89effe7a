"""Limits on the size of a condition, checked before any recursive parser sees it.

sqlglot's parser and the condition walkers recurse once per nesting level: about 50 nested
parentheses or 100 ``NOT`` exhaust Python's default recursion limit of 1000 frames (fewer when the
parser is entered from a deep stack, as in a web server's worker thread), and a RecursionError
became an HTTP 500 with a traceback in the log for every such request. A cheap linear pre-scan of the
text refuses conditions above these limits with :class:`~overlapdp.errors.QueryTooComplexError`
naming the limit and its value:

- ``MAX_CONDITION_CHARS`` characters of condition text (the service's own request limit, 10 000);
- ``MAX_DEPTH`` levels of nesting, counting each open parenthesis and each prefix operator (``NOT``,
  unary ``-`` / ``+`` / ``~``) still in force; measured failure points are 48 parentheses, 107 ``NOT``
  and 33 ``(NOT`` pairs from an empty stack, 28 / 63 / 19 from 400 frames deep, so 16 keeps a wide
  margin (legitimate conditions rarely nest more than 3 deep);
- ``MAX_TERMS`` terms joined by ``AND`` / ``OR`` (the ``AND`` of ``BETWEEN`` counts too): chains are
  walked iteratively, so this bounds time, not the stack;
- ``MAX_GROUP_CELLS`` cells of a GROUP BY (the product of the grouped attributes' domain sizes),
  checked before any cell is built (:mod:`overlapdp.query.groupby`).

The same limits apply to the JSON form (nested ``"not"`` objects, condition keys). A RecursionError
that still escapes (the pre-scan is a model of the parser, not the parser) is turned into the same
typed error.
"""

from __future__ import annotations

import re

from overlapdp.errors import QueryTooComplexError

MAX_CONDITION_CHARS = 10_000
MAX_DEPTH = 16
MAX_TERMS = 1_000
#: Cells of one GROUP BY: one predicate query each, so this bounds the work of expanding, counting
#: and accounting one grouped query.
MAX_GROUP_CELLS = 100_000

# Comments, strings and quoted names are skipped as sqlglot's default dialect reads them ('' and ""
# escape a quote; no backslash escapes); an unterminated one runs to the end of the text.
_TOKENS = re.compile(
    r"""--[^\n]*|/\*.*?(?:\*/|\Z)|'(?:[^']|'')*'?|"(?:[^"]|"")*"?|(?P<op>[()\,\-+~])|(?P<word>[A-Za-z_]\w*)""",
    re.DOTALL,
)
_JOINERS = frozenset({"and", "or", "xor"})


def check_condition_text(text: str, what: str = "condition") -> None:
    """Refuse ``text`` when it exceeds a limit (characters, depth, terms); a linear scan, no recursion."""
    if len(text) > MAX_CONDITION_CHARS:
        raise QueryTooComplexError(
            f"{what} is {len(text)} characters long; the limit is {MAX_CONDITION_CHARS} characters",
            limit="characters",
            maximum=MAX_CONDITION_CHARS,
        )
    # One counter of prefix operators per open parenthesis: a NOT stays in force until the AND / OR
    # (or comma, or closing parenthesis) that ends its operand at the same level.
    prefixes = [0]
    open_prefixes = 0
    depth = terms = 0
    for m in _TOKENS.finditer(text):
        op, word = m.group("op"), m.group("word")
        if op == "(":
            prefixes.append(0)
        elif op == ")":
            if len(prefixes) > 1:
                open_prefixes -= prefixes.pop()
        elif op == "," or (word is not None and word.lower() in _JOINERS):
            open_prefixes -= prefixes[-1]
            prefixes[-1] = 0
            if word is not None:
                terms += 1
                if terms >= MAX_TERMS:
                    raise QueryTooComplexError(
                        f"{what} joins more than {MAX_TERMS} terms with AND / OR; "
                        f"the limit is {MAX_TERMS} terms",
                        limit="terms",
                        maximum=MAX_TERMS,
                    )
            continue
        elif op is not None or (word is not None and word.lower() == "not"):
            prefixes[-1] += 1
            open_prefixes += 1
        else:
            continue
        depth = len(prefixes) - 1 + open_prefixes
        if depth > MAX_DEPTH:
            raise QueryTooComplexError(
                f"{what} nests parentheses and NOT more than {MAX_DEPTH} levels deep; "
                f"the limit is a depth of {MAX_DEPTH}",
                limit="depth",
                maximum=MAX_DEPTH,
            )


def too_deep(what: str = "condition") -> QueryTooComplexError:
    """The error for a RecursionError that escaped the pre-scan (same limit, same type)."""
    return QueryTooComplexError(
        f"{what} is nested too deeply to parse; the limit is a depth of {MAX_DEPTH}",
        limit="depth",
        maximum=MAX_DEPTH,
    )
