"""Stored text made safe to print on a terminal: the one place control characters are neutralised.

Text from users, models and tools is hostile: ``\\x1b]0;pwned\\x07`` retitles a terminal,
``\\x1b[2J`` clears it, a bare ``\\r`` overwrites the line it is on, and a right-to-left override
reorders what follows. Every human-readable output passes stored text through :func:`clean`
(blocks: newlines and tabs kept) or :func:`one_line` (table cells and headings: whitespace runs,
newlines included, collapse to one space) before it reaches the terminal, and prints through
:func:`echo`, which cleans whatever it is given. ``--json`` output never comes here: JSON escapes
control characters itself, so it stays byte-exact.

What becomes visible, and how:

- C0 controls (``\\x00``-``\\x1f`` except newline and tab) as their Unicode control pictures
  (``\\x1b`` shows as ``␛``, ``\\r`` as ``␍``, ``\\x07`` as ``␇``), DEL as ``␡``;
- C1 controls (``\\x80``-``\\x9f``, e.g. the one-byte CSI ``\\x9b``) as ``\\x9b``;
- bidirectional overrides and isolates (``\\u202e`` …) and the line/paragraph separators as
  ``\\u202e``, so they cannot reorder or split a line.

Rich markup is never interpreted here (this module only returns plain ``str``); code that prints
through rich passes cleaned text as ``rich.text.Text`` or through ``rich.markup.escape``.

Widths are terminal cells, not code points, so CJK and emoji keep table columns aligned.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import IO, Any

import click

_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_SEPARATORS = "\u2028\u2029"


def _build_table() -> dict[int, str]:
    table: dict[int, str] = {}
    for code in range(0x20):
        if chr(code) not in "\n\t":
            table[code] = chr(0x2400 + code)
    table[0x7F] = "\u2421"
    for code in range(0x80, 0xA0):
        table[code] = f"\\x{code:02x}"
    for ch in _BIDI + _SEPARATORS:
        table[ord(ch)] = f"\\u{ord(ch):04x}"
    return table


_TABLE = _build_table()
_BLANKS = re.compile("[ \t\n\r\x0b\x0c\x85\u2028\u2029]+")


def clean(text: str) -> str:
    """``text`` with every control character made visible; newlines and tabs are kept.

    Lone surrogates (which no terminal encoding can carry) show as ``\\udcff``.
    """
    if text.isascii() and text.isprintable():
        return text
    out = text.translate(_TABLE)
    if any("\ud800" <= ch <= "\udfff" for ch in out):
        out = "".join(f"\\u{ord(ch):04x}" if "\ud800" <= ch <= "\udfff" else ch for ch in out)
    return out


def one_line(text: str) -> str:
    """``text`` for a one-line place (a table cell, a heading): runs of whitespace and line
    breaks become one space, and control characters are made visible."""
    return clean(_BLANKS.sub(" ", text).strip(" "))


def char_width(ch: str) -> int:
    """Terminal cells of one character, from the Unicode database: 2 for wide and full-width
    (CJK, most emoji), 0 for combining marks and zero-width format characters, else 1."""
    if ch < "\u0300":
        return 1
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width(text: str) -> int:
    """How many terminal cells ``text`` takes (CJK and most emoji take two)."""
    if text.isascii():
        return len(text)
    return sum(char_width(ch) for ch in text)


def fit(text: str, cells: int) -> str:
    """``text`` cut to at most ``cells`` terminal cells, ending in ``…`` when it was cut."""
    if cells <= 1 or width(text) <= cells:
        return text
    if text.isascii():
        return text[: cells - 1] + "…"
    out: list[str] = []
    used = 0
    for ch in text:
        w = char_width(ch)
        if used + w > cells - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def cell(text: str, cells: int) -> str:
    """A one-line table cell: :func:`one_line`, then cut to ``cells`` terminal cells."""
    return fit(one_line(text), cells)


def pad(text: str, cells: int) -> str:
    """``text`` left-aligned in ``cells`` terminal cells (never cut)."""
    return text + " " * max(0, cells - width(text))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns, two spaces apart, aligned by display width.

    Every cell goes through :func:`one_line`, so no cell can break a row or carry a control
    sequence, whatever the caller passed.
    """
    head = [one_line(h) for h in headers]
    body = [[one_line(c) for c in row] for row in rows]
    widths = [width(h) for h in head]
    for row in body:
        widths = [max(w, width(c)) for w, c in zip(widths, row, strict=True)]
    return [
        "  ".join(pad(c, w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in (head, *body)
    ]


def echo(
    message: Any = "", *, err: bool = False, nl: bool = True, file: IO[str] | None = None
) -> None:
    """``click.echo`` for human-readable output: the message is :func:`clean`-ed first."""
    click.echo(clean(str(message)), err=err, nl=nl, file=file)


def styled(text: str, **style: Any) -> str:
    """Cleaned ``text`` wrapped in click styling (``bold=True``, ``fg="yellow"``, …).

    The only way our own escape sequences (colours) are added: after the text is cleaned. Print
    the result with :func:`echo_styled`.
    """
    return click.style(clean(text), **style)


def echo_styled(message: str, *, err: bool = False) -> None:
    """Print a line built from :func:`styled` pieces and :func:`clean`-ed text, as it is."""
    click.echo(message, err=err)
