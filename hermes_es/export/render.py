"""Display renderings of a session: Markdown, Quarto (qmd), self-contained HTML, user prompts.

Every rendering holds the history the session shows (active rows and rows archived by in-place
compaction, in display order), never rewound or replaced rows. Output is deterministic (no
export time inside), so a file's SHA-256 identifies what was exported.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Sequence

import msgspec

from hermes_es.export import markdown_safe as md
from hermes_es.export.backup import BackupMessage, BackupSession

_JSON = msgspec.json.Encoder()


def display_messages(session: BackupSession) -> list[BackupMessage]:
    """The rows a display export shows: active and compaction-archived, in display order."""
    return [m for m in session.messages if m.resolved_state() in ("active", "compacted")]


def _when(ts: float) -> str:
    if not ts:
        return "-"
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _text(message: BackupMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "\n".join(str(p["text"]) for p in message.content if isinstance(p.get("text"), str))


def _meta_pairs(session: BackupSession) -> list[tuple[str, str, bool]]:
    """``(label, value, is_id)`` of the header list; ids are shown as code."""
    pairs = [
        ("Session", session.id, True),
        ("Source", session.source, False),
        ("Started", _when(session.started_at), False),
    ]
    if session.model:
        pairs.append(("Model", session.model, False))
    if session.parent_id:
        pairs.append(("Parent", session.parent_id, True))
        pairs.append(("Parent kind", session.parent_kind, False))
    if session.continued_into:
        pairs.append(("Continued in", session.continued_into, True))
    if session.workspace_key:
        pairs.append(("Workspace", session.workspace_key, False))
    return pairs


def _md_meta(session: BackupSession) -> list[str]:
    return [
        f"- {label}: {md.code_span(value) if is_id else md.inline(value)}"
        for label, value, is_id in _meta_pairs(session)
    ]


def _md_message(message: BackupMessage, quarto: bool) -> str:
    label: str = message.role
    if message.role == "tool" and message.tool_name:
        label = f"tool ({md.inline(message.tool_name)})"
    note = " · archived by compaction" if message.resolved_state() == "compacted" else ""
    blocks = [f"### {label} · {_when(message.at)}{note}"]
    text = _text(message)
    if message.role == "tool":
        blocks.append(md.fence(text))
    elif text:
        blocks.append(md.block(text, quarto=quarto))
    for call in message.tool_calls:
        name, cid = md.code_span(call.name), md.code_span(call.id)
        blocks += [f"Tool call {name} ({cid}):", md.fence(call.arguments, "json")]
    for media in message.media:
        blocks.append(f"Attachment ({md.inline(media.kind)}): {md.code_span(media.path)}")
    out = "\n\n".join(blocks) + "\n"
    return md.quarto_literal(out) if quarto else out


def render_markdown(session: BackupSession, *, quarto: bool = False) -> str:
    """A Markdown (or Quarto ``.qmd``) transcript of the display history.

    Stored text is shown, never interpreted: see ``markdown_safe``. A ``.qmd`` names the
    ``markdown`` engine, so rendering it never runs code.
    """
    title = session.title or session.id
    head: list[str] = []
    if quarto:
        head += ["---", f"title: {json.dumps(md.quarto_literal(title), ensure_ascii=False)}"]
        head += [f"date: {json.dumps(_when(session.started_at))}", "format: html"]
        head += ["engine: markdown", "---", ""]
    else:
        head += [f"# {md.inline(title)}", ""]
    meta = _md_meta(session)
    head += [*(md.quarto_literal(line) for line in meta), ""] if quarto else [*meta, ""]
    body = [_md_message(m, quarto) for m in display_messages(session)]
    return "\n".join(head) + "\n" + "\n".join(body)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:54rem;margin:2rem auto;
padding:0 1rem;line-height:1.5;color:#1b1b1b;background:#fff}
header{border-bottom:1px solid #ddd;margin-bottom:1.5rem}
.meta{color:#555;font-size:.9rem;list-style:none;padding:0}
.msg{border:1px solid #e3e3e3;border-radius:8px;padding:.6rem 1rem;margin:1rem 0}
.msg h2{font-size:.85rem;margin:0 0 .4rem;color:#555;font-weight:600}
.user{background:#f3f7ff}.assistant{background:#fafafa}.tool{background:#f7f7f2}
.system{background:#fff8ee}.compacted{opacity:.75;border-style:dashed}
pre{white-space:pre-wrap;word-break:break-word;background:#f4f4f4;padding:.5rem;
border-radius:6px;overflow-x:auto}
.text{white-space:pre-wrap;word-break:break-word}
"""


def _html_message(message: BackupMessage) -> str:
    e = html.escape
    state = message.resolved_state()
    label = message.role + (f" ({message.tool_name})" if message.tool_name else "")
    note = " · archived by compaction" if state == "compacted" else ""
    parts = [
        f'<section class="msg {e(message.role)} {e(state)}">',
        f"<h2>{e(label)} · {e(_when(message.at))}{e(note)}</h2>",
    ]
    text = _text(message)
    if message.role == "tool":
        parts.append(f"<pre>{e(text)}</pre>")
    elif text:
        parts.append(f'<div class="text">{e(text)}</div>')
    for call in message.tool_calls:
        parts.append(f"<p>Tool call <code>{e(call.name)}</code> (<code>{e(call.id)}</code>)</p>")
        parts.append(f"<pre>{e(call.arguments)}</pre>")
    for media in message.media:
        parts.append(f"<p>Attachment ({e(media.kind)}): <code>{e(media.path)}</code></p>")
    parts.append("</section>")
    return "\n".join(parts)


def render_html(session: BackupSession) -> str:
    """A readable, self-contained HTML page (inline CSS, no scripts, every value escaped)."""
    e = html.escape
    title = session.title or session.id
    meta = "".join(f"<li>{e(label)}: {e(value)}</li>" for label, value, _ in _meta_pairs(session))
    body = "\n".join(_html_message(m) for m in display_messages(session))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">\n"
        f"<title>{e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f'<header><h1>{e(title)}</h1><ul class="meta">{meta}</ul></header>\n'
        f"<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def user_prompts(session: BackupSession) -> list[BackupMessage]:
    """The user messages of the display history."""
    return [m for m in display_messages(session) if m.role == "user"]


def render_prompts_markdown(session: BackupSession) -> str:
    """The user prompts of a session as Markdown, one section each."""
    title = session.title or session.id
    out = [f"# {md.inline(title)} — user prompts", "", f"- Session: {md.code_span(session.id)}", ""]
    for i, message in enumerate(user_prompts(session), 1):
        out += [f"## {i} · {_when(message.at)}", "", md.block(_text(message)), ""]
    return "\n".join(out)


def render_prompts_jsonl(session: BackupSession) -> bytes:
    """The user prompts of a session, one JSON object per line."""
    lines: Sequence[bytes] = [
        _JSON.encode({"session_id": session.id, "index": i, "at": m.at, "content": _text(m)})
        + b"\n"
        for i, m in enumerate(user_prompts(session), 1)
    ]
    return b"".join(lines)
