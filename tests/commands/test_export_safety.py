"""Exports are safe to open and share: escaped Markdown/QMD/HTML, full-history delete basis,
Windows-safe names, no symlink following, private modes whatever the umask."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from markdown_it import MarkdownIt

from hermes_es.cli.app import cli
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.export import (
    ExportOptions,
    export_sessions,
    export_then_delete,
    save_session,
)
from hermes_es.commands.holders import holders_dir, register_holder
from hermes_es.errors import UsageError
from hermes_es.export.names import file_stem, unique_names

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.commands.export_helpers import open_engine, plain_session
except ModuleNotFoundError:  # pragma: no cover
    from export_helpers import open_engine, plain_session  # type: ignore[no-redef,import-not-found]

WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL"} | {
    f"{dev}{n}" for dev in ("COM", "LPT") for n in "0123456789"
}
SID = "20240101_000000_eeeeee"
FORGED = "### assistant · 2024-01-01 00:00:00 UTC"
PAYLOADS = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(2)">',
    "<!-- hidden --><iframe src=//evil>",
    f"ok\n\n{FORGED}\n\nI will wire you the money",
    "Heading\n=======\n\nUnder\n---",
    "```\nunclosed fence swallows the rest\n",
    "~~~~{python}\nimport os; os.system('touch /tmp/pwned')\n~~~~",
    "```{=html}\n<script>raw()</script>\n```",
    "`<b>`{=html} and {{< include /etc/passwd >}} and {{% env HOME %}}",
    "    # indented\n<div>\nblock html\n</div>",
    "line\r### carriage return heading\rmore",
]
TOOL_OUTPUT = "before\n`````\n### tool heading inside output\n<script>x()</script>\n``\nafter"


def _hostile_session(engine: SessionEngine) -> str:
    engine.start_session(
        "cli",
        session_id=SID,
        title="<b>title</b> {{< env HOME >}}",
        model="<img src=m onerror=1>",
        cwd="/tmp/<x>",
    )
    for i, text in enumerate(PAYLOADS):
        engine.append_message(SID, "user" if i % 2 == 0 else "assistant", text)
    engine.append_turn(
        SID,
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c`1", "name": "run`<b>", "arguments": '{"cmd": "```</pre>"}'}
                ],
            },
            {
                "role": "tool",
                "content": TOOL_OUTPUT,
                "tool_call_id": "c`1",
                "tool_name": "run<script>",
            },
        ],
    )
    return SID


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[SessionEngine, str]:
    """An engine holding one session with hostile text in every stored field."""
    engine = open_engine(tmp_path / "home")
    return engine, _hostile_session(engine)


def _tokens(text: str) -> list[object]:
    out = []
    for token in MarkdownIt("commonmark").parse(text):
        out.append(token)
        out += token.children or []
    return out


@pytest.mark.parametrize("fmt", ["md", "qmd"])
def test_markdown_export_shows_hostile_text_without_interpreting_it(
    hostile: tuple[SessionEngine, str], tmp_path: Path, fmt: str
) -> None:
    """No raw HTML, no forged heading, no swallowed turn, no runnable cell or shortcode."""
    engine, sid = hostile
    files = export_sessions(
        engine.store.connection(), tmp_path / "o", [sid], ExportOptions(fmt=fmt)
    )
    text = (tmp_path / "o" / files[0].file).read_text()
    body = text.split("\n---\n", 1)[1] if fmt == "qmd" else text
    tokens = _tokens(body)
    kinds = [t.type for t in tokens]  # type: ignore[attr-defined]
    assert "html_inline" not in kinds and "html_block" not in kinds
    headings = [t for t in tokens if t.type == "heading_open"]  # type: ignore[attr-defined]
    shown = len(PAYLOADS) + 2  # every message gets exactly one heading, plus the title in md
    assert len(headings) == shown + (1 if fmt == "md" else 0)
    fences = [t for t in tokens if t.type == "fence"]  # type: ignore[attr-defined]
    assert any(t.content == TOOL_OUTPUT + "\n" for t in fences)  # type: ignore[attr-defined]
    assert all("{" not in t.info and "=" not in t.info for t in fences)  # type: ignore[attr-defined]
    assert "I will wire you the money" in text and "alert(1)" in text
    if fmt == "qmd":
        assert "engine: markdown" in text.split("\n---\n", 1)[0]
        assert "{{< " not in text.replace("{{{< ", "") and "{{% " not in text.replace("{{{% ", "")
        assert "`{=html}" not in text


def test_user_prompts_markdown_is_escaped(
    hostile: tuple[SessionEngine, str], tmp_path: Path
) -> None:
    """--only user-prompts in Markdown holds the prompts as text, never HTML or headings."""
    engine, sid = hostile
    opts = ExportOptions(fmt="md", only="user-prompts")
    files = export_sessions(engine.store.connection(), tmp_path / "o", [sid], opts)
    tokens = _tokens((tmp_path / "o" / files[0].file).read_text())
    kinds = [t.type for t in tokens]  # type: ignore[attr-defined]
    assert "html_inline" not in kinds and "html_block" not in kinds
    assert kinds.count("heading_open") == 1 + (len(PAYLOADS) + 1) // 2


def test_html_export_escapes_every_field(
    hostile: tuple[SessionEngine, str], tmp_path: Path
) -> None:
    """The HTML page holds no tag from stored text in any field (title, model, tool, cwd)."""
    engine, sid = hostile
    files = export_sessions(
        engine.store.connection(), tmp_path / "o", [sid], ExportOptions(fmt="html")
    )
    page = (tmp_path / "o" / files[0].file).read_text()
    for tag in ("<script", "<img", "<iframe", "<b>", "<div>", "<!--", "<x>", '</pre>"}'):
        assert tag not in page, tag
    assert "&lt;script&gt;alert(1)" in page


def test_partial_or_redacted_export_cannot_back_a_delete(tmp_path: Path) -> None:
    """--only user-prompts or --redact with --delete-after-verified is refused; nothing is
    written or deleted (API: UsageError; CLI: exit 2)."""
    home = tmp_path / "home"
    engine = open_engine(home)
    sid = plain_session(engine, "20240101_000000_ffffff", 4)
    for opts in (
        ExportOptions(fmt="md", only="user-prompts"),
        ExportOptions(fmt="jsonl", only="user-prompts"),
        ExportOptions(fmt="jsonl", redact=True),
        ExportOptions(fmt="md", redact=True),
    ):
        with pytest.raises(UsageError, match="full-history export"):
            export_then_delete(engine, tmp_path / "out", sid, opts)
    assert engine.get(sid).message_count == 4 and not (tmp_path / "out").exists()
    for extra in (["--only", "user-prompts", "--format", "md"], ["--redact"]):
        result = CliRunner().invoke(
            cli,
            ["sessions", "export", str(tmp_path / "cli"), "--session-id", sid,
             "--delete-after-verified", "--yes", *extra],
            env={"HERMES_HOME": str(home)},
        )  # fmt: skip
        assert result.exit_code == 2, result.output
        assert "full-history export" in result.output
    assert engine.get(sid).message_count == 4 and not (tmp_path / "cli").exists()
    done = export_then_delete(engine, tmp_path / "full", sid, ExportOptions(fmt="md"))
    assert done.deleted == [sid]


@pytest.mark.parametrize("sid", ["CON", "nul", "Com1", "LPT9.x", "aux.tar", "PRN"])
def test_windows_reserved_names_get_a_safe_stem(tmp_path: Path, sid: str) -> None:
    """A session id Windows reads as a device still exports to an ordinary file name."""
    assert file_stem(sid, "").split(".")[0].upper() not in WINDOWS_RESERVED
    assert unique_names(["CON"], ".md") == ["_CON.md"]
    engine = open_engine(tmp_path / "home")
    plain_session(engine, sid, 2)
    files = export_sessions(engine.store.connection(), tmp_path / "o", [sid], ExportOptions())
    assert files[0].file.split(".")[0].upper() not in WINDOWS_RESERVED
    assert (tmp_path / "o" / files[0].file).is_file()


def test_forced_overwrite_of_a_symlink_writes_a_private_file(tmp_path: Path) -> None:
    """--force replaces a symlink with a new 0600 file; the link's target is untouched."""
    engine = open_engine(tmp_path / "home")
    sid = plain_session(engine, "20240101_000000_abcabc", 2)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    victim.chmod(0o644)
    out = tmp_path / "o"
    out.mkdir()
    name = file_stem(sid) + ".md"
    (out / name).symlink_to(victim)
    export_sessions(engine.store.connection(), out, [sid], ExportOptions(fmt="md", force=True))
    assert victim.read_text() == "keep me" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    written = (out / name).lstat()
    assert stat.S_ISREG(written.st_mode) and stat.S_IMODE(written.st_mode) == 0o600
    link = tmp_path / "save.md"
    link.symlink_to(victim)
    save_session(engine, sid, "md", link, force=True)
    assert victim.read_text() == "keep me"
    assert not link.is_symlink() and stat.S_IMODE(link.stat().st_mode) == 0o600


@pytest.fixture
def open_umask() -> Iterator[None]:
    """Run the test with umask 000 (the most permissive), restoring the old one after."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_export_dirs_files_and_leases_are_private_whatever_the_umask(
    tmp_path: Path, open_umask: None
) -> None:
    """Under umask 000, export directories (and parents made) are 0700, files and leases 0600."""
    engine = open_engine(tmp_path / "home")
    sid = plain_session(engine, "20240101_000000_dddfff", 2)
    out = tmp_path / "a" / "b" / "out"
    export_sessions(engine.store.connection(), out, [sid], ExportOptions(fmt="md"))
    for directory in (tmp_path / "a", tmp_path / "a" / "b", out):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    for path in out.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    saved = save_session(engine, sid, "html", tmp_path / "s" / "t" / "x.html")
    assert stat.S_IMODE((tmp_path / "s" / "t").stat().st_mode) == 0o700
    assert stat.S_IMODE(Path(saved.file).stat().st_mode) == 0o600
    db = tmp_path / "home" / "state.db"
    with register_holder(db, "chat", sid) as holder:
        assert stat.S_IMODE(holders_dir(db).stat().st_mode) == 0o700
        assert stat.S_IMODE(Path(holder.path).stat().st_mode) == 0o600
        assert json.loads(Path(holder.path).read_text())["session_id"] == sid
