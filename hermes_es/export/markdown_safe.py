"""Stored text made safe to place in a Markdown or Quarto document.

Text from users, models and tools is hostile: in a Markdown file it could open raw HTML
(``<script>``, ``<img onerror>``), forge a turn heading (``### assistant · …``), open a code
fence that swallows the rest of the transcript, or, in a ``.qmd``, run code on ``quarto render``
(``{python}`` cells, ``{=html}`` raw blocks) and include local files (``{{< include … >}}``).

``block`` renders one message body: code fences found in it are re-emitted with a fence longer
than any backtick run inside and a plain info string; outside them, heading and setext lines are
backslash-escaped and, where a CommonMark parser finds raw HTML, every tag opener becomes
``&lt;``. The result is parsed again; a body that still yields a heading or raw HTML is emitted
as one fenced block (literal by construction). ``inline`` and ``code_span`` do the same for one
line values (titles, tool names, paths).
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

_PARSER = MarkdownIt("commonmark")
_FENCE_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_ATX = re.compile(r"^( {0,3})#")
_SETEXT_OR_RULE = re.compile(r"^( {0,3})(=+|-+|(?:[-*_][ \t]*){3,})[ \t]*$")
_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")
_INLINE_SPECIAL = re.compile(r"([\\`*<>&|]|!(?=\[)|(?<=\])[(\[])")
_SHORTCODE_OPEN = re.compile(r"\{{2,}(?=[<%])")
_SHORTCODE_CLOSE = re.compile(r"(?<=[>%])\}{2,}")
_RAW_ATTR = re.compile(r"(?<=`)\{")
_UNSAFE_TOKENS = frozenset({"html_block", "html_inline", "heading_open"})


def fence(text: str, info: str = "") -> str:
    """``text`` in a backtick fence longer than any backtick run inside it (3 at least)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{_info(info)}\n{text}\n{ticks}"


def _info(info: str) -> str:
    """A fence info string reduced to one plain word (no ``{python}``, ``{=html}``, attributes)."""
    word = re.sub(r"[^A-Za-z0-9_+.#-]+", " ", info).split()
    return word[0][:32] if word else ""


def code_span(text: str) -> str:
    """``text`` as one inline code span, on one line, that no backtick inside can close."""
    flat = " ".join(text.split()) or " "
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def inline(text: str) -> str:
    """One line of literal text: newlines collapsed, Markdown and HTML specials escaped."""
    return _INLINE_SPECIAL.sub(r"\\\1", " ".join(text.split()))


def quarto_literal(text: str) -> str:
    """Shortcodes shown, never run: ``{{<`` gains a brace (Quarto's escape) and so does ``>}}``."""
    text = _SHORTCODE_OPEN.sub(lambda m: m.group(0) + "{", text)
    return _SHORTCODE_CLOSE.sub(lambda m: m.group(0) + "}", text)


def _split(text: str) -> list[tuple[bool, list[str]]]:
    """Runs of prose lines and fenced code blocks (``(True, [info, *body])``), in order."""
    parts: list[tuple[bool, list[str]]] = []
    prose: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if m is None or (m.group(2)[0] == "`" and "`" in m.group(3)):
            prose.append(lines[i])
            i += 1
            continue
        if prose:
            parts.append((False, prose))
            prose = []
        char, width = m.group(2)[0], len(m.group(2))
        closing = re.compile(rf"^ {{0,3}}{re.escape(char)}{{{width},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            body.append(lines[i])
            i += 1
        i += 1  # the closing line (or the end of the text: an unclosed fence ends here)
        parts.append((True, [m.group(3).strip(), *body]))
    if prose:
        parts.append((False, prose))
    return parts


def _prose(lines: list[str]) -> str:
    out = []
    for line in lines:
        line = _ATX.sub(r"\1\\#", line)
        line = _SETEXT_OR_RULE.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", line)
        out.append(line)
    return "\n".join(out)


def _unsafe(markdown: str) -> set[str]:
    """Kinds of raw HTML or heading a CommonMark parser finds in ``markdown``."""
    found: set[str] = set()
    for token in _PARSER.parse(markdown):
        if token.type in _UNSAFE_TOKENS:
            found.add(token.type)
        for child in token.children or ():
            if child.type in _UNSAFE_TOKENS:
                found.add(child.type)
    return found


def block(text: str, *, quarto: bool = False) -> str:
    """One message body as Markdown that shows the text and nothing else (see module doc)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")
    rendered = _render(text, escape_tags=False, quarto=quarto)
    found = _unsafe(rendered)
    if "html_block" in found or "html_inline" in found:
        rendered = _render(text, escape_tags=True, quarto=quarto)
        found = _unsafe(rendered)
    if found:
        rendered = fence(text)
    return quarto_literal(rendered) if quarto else rendered


def _render(text: str, *, escape_tags: bool, quarto: bool) -> str:
    pieces: list[str] = []
    for is_code, lines in _split(text):
        if is_code:
            pieces.append(fence("\n".join(lines[1:]), lines[0]))
            continue
        prose = _prose(lines)
        if escape_tags:
            prose = _TAG_OPEN.sub("&lt;", prose)
        if quarto:
            prose = _RAW_ATTR.sub(r"\\{", prose)  # `x`{=html} is raw output in Pandoc
        pieces.append(prose)
    return "\n".join(pieces)
