"""Export: backup round trip, manifest, display formats, safe names, redaction, guard, stream."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec
import pytest

from hermes_es.commands.export import (
    ExportOptions,
    export_sessions,
    save_session,
)
from hermes_es.commands.importing import import_backups
from hermes_es.config import HermesConfig, SessionsConfig
from hermes_es.errors import GuardError, UsageError, ValidationError
from hermes_es.export.backup import decode_session, encode_line, read_backup, stream_backup
from hermes_es.export.names import file_stem
from hermes_es.export.select import ExportFilter, select_sessions

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.commands.export_helpers import delegate, open_engine, plain_session, rich_session
except ModuleNotFoundError:  # pragma: no cover
    from export_helpers import (  # type: ignore[no-redef,import-not-found]
        delegate,
        open_engine,
        plain_session,
        rich_session,
    )


def _strip_time(data: bytes) -> list[dict[str, object]]:
    out = []
    for line in data.splitlines():
        obj = json.loads(line)
        obj.pop("exported_at")
        out.append(obj)
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_backup_round_trip_is_byte_identical(tmp_path: Path, fmt: str) -> None:
    """Export → import into a fresh home → export again gives the same bytes (same export time)."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    child = delegate(a, sid, 1)
    first = export_sessions(
        a.store.connection(), tmp_path / "one", [sid, child], ExportOptions(fmt=fmt, at=5.0)
    )
    b = open_engine(tmp_path / "b")
    report = import_backups(b.store, [tmp_path / "one"])
    assert sorted(report.imported) == sorted([sid, child])
    second = export_sessions(
        b.store.connection(), tmp_path / "two", [sid, child], ExportOptions(fmt=fmt, at=5.0)
    )
    for f1, f2 in zip(first, second, strict=True):
        assert (tmp_path / "one" / f1.file).read_bytes() == (
            tmp_path / "two" / f2.file
        ).read_bytes()
        assert f1.sha256 == f2.sha256


def test_round_trip_differs_only_in_export_time(tmp_path: Path) -> None:
    """Two exports at different times differ only in ``exported_at``."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    x = export_sessions(a.store.connection(), tmp_path / "x", [sid], ExportOptions(at=1.0))
    y = export_sessions(a.store.connection(), tmp_path / "y", [sid], ExportOptions(at=2.0))
    bx = (tmp_path / "x" / x[0].file).read_bytes()
    by = (tmp_path / "y" / y[0].file).read_bytes()
    assert bx != by
    assert _strip_time(bx) == _strip_time(by)


def test_backup_holds_every_row_with_flags(tmp_path: Path) -> None:
    """The backup keeps compacted, rewound and edited rows with their active/compacted flags."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    session = read_backup(a.store.connection(), sid)
    states = [m.state for m in session.messages]
    assert states.count("compacted") == 3
    assert states.count("rewound") == 1
    assert states.count("edited") == 1
    for m in session.messages:
        assert m.active == (m.state == "active")
        assert m.compacted == (m.state == "compacted")
    assert (session.pinned, session.archived, session.hidden) == (True, "sweep", True)
    assert session.system_prompt == "You are helpful."
    assert session.tokens_in == 18 and session.reasoning == "low"


def test_manifest_sha256_matches_files(tmp_path: Path) -> None:
    """Every manifest line names a written file whose SHA-256 and message count match."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    child = delegate(a, sid, 1)
    out = tmp_path / "md"
    export_sessions(a.store.connection(), out, [sid, child], ExportOptions(fmt="md"))
    lines = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    assert [x["session_id"] for x in lines] == [sid, child]
    for line in lines:
        data = (out / line["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == line["sha256"]
        assert line["display_version"] == a.get(line["session_id"]).display_version
    assert lines[0]["lineage"]["delegates"] == [child]
    assert lines[1]["lineage"]["parent_id"] == sid
    assert lines[0]["messages"] == 8


def test_markdown_shows_display_history_only(tmp_path: Path) -> None:
    """Markdown holds compaction-archived turns but not rewound or replaced rows."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a, marker="QQ")
    files = export_sessions(a.store.connection(), tmp_path / "o", [sid], ExportOptions(fmt="md"))
    text = (tmp_path / "o" / files[0].file).read_text()
    assert "done reading" in text and "archived by compaction" in text
    assert "hello QQ edited" in text
    assert "hello QQ first" not in text
    assert "second answer" in text and "better second answer" in text
    assert text.count("second answer") == 1


def test_qmd_has_front_matter(tmp_path: Path) -> None:
    """A .qmd file starts with YAML front matter carrying the title."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    files = export_sessions(a.store.connection(), tmp_path / "o", [sid], ExportOptions(fmt="qmd"))
    assert files[0].file.endswith(".qmd")
    assert (tmp_path / "o" / files[0].file).read_text().startswith('---\ntitle: "Rich one"')


def test_html_is_self_contained_and_escaped(tmp_path: Path) -> None:
    """HTML pages escape message text and load nothing from elsewhere."""
    a = open_engine(tmp_path / "a")
    sid = plain_session(a, "20240101_000000_bbbbbb", 0)
    a.append_message(sid, "user", "<script>alert('x')</script> & <b>bold</b>")
    files = export_sessions(a.store.connection(), tmp_path / "o", [sid], ExportOptions(fmt="html"))
    page = (tmp_path / "o" / files[0].file).read_text()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;" in page
    assert "src=" not in page and "href=" not in page


def test_user_prompts_only(tmp_path: Path) -> None:
    """--only user-prompts writes the displayed user messages, in md or jsonl."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a, marker="QQ")
    opts = ExportOptions(fmt="jsonl", only="user-prompts")
    files = export_sessions(a.store.connection(), tmp_path / "o", [sid], opts)
    rows = [json.loads(x) for x in (tmp_path / "o" / files[0].file).read_text().splitlines()]
    assert [r["content"] for r in rows] == ["hello QQ edited", "second question", "structured part"]
    assert files[0].messages == 3
    with pytest.raises(UsageError):
        export_sessions(
            a.store.connection(),
            tmp_path / "p",
            [sid],
            ExportOptions(fmt="html", only="user-prompts"),
        )


def test_file_names_cannot_escape_output(tmp_path: Path) -> None:
    """Ids and titles with path separators become safe names inside the output folder."""
    assert "/" not in file_stem("../../etc/passwd", "../../x")
    assert not file_stem("..", "").startswith(".")
    a = open_engine(tmp_path / "a")
    assert "/" not in file_stem("../evil", "") and file_stem("../evil", "") != "../evil"
    sid = a.start_session("cli", session_id="evil..x", title="../../../boom", cwd="/")
    a.append_message(sid, "user", "hi")
    out = tmp_path / "deep" / "out"
    files = export_sessions(a.store.connection(), out, [sid], ExportOptions(fmt="md"))
    written = out / files[0].file
    assert written.resolve().parent == out.resolve()
    assert sorted(p.name for p in out.iterdir()) == sorted([files[0].file, "manifest.jsonl"])


def test_existing_files_need_force(tmp_path: Path) -> None:
    """A second export into the same folder is refused unless forced."""
    a = open_engine(tmp_path / "a")
    sid = plain_session(a, "20240101_000000_cccccc", 2)
    export_sessions(a.store.connection(), tmp_path / "o", [sid], ExportOptions(fmt="md"))
    with pytest.raises(ValidationError, match="--force"):
        export_sessions(a.store.connection(), tmp_path / "o", [sid], ExportOptions(fmt="md"))
    export_sessions(
        a.store.connection(), tmp_path / "o", [sid], ExportOptions(fmt="md", force=True)
    )


def test_redaction_scrubs_content_and_tool_output(tmp_path: Path) -> None:
    """--redact removes secrets from content, tool calls and tool output, and keeps plain text."""
    a = open_engine(tmp_path / "a")
    sid = a.start_session("cli", session_id="20240101_000000_dddddd", cwd="/")
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0"
    gh = "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
    a.append_message(sid, "user", f"my key is {key} please keep the meeting at noon")
    a.append_turn(
        sid,
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c", "name": "sh", "arguments": json.dumps({"t": gh})}],
            },
            {"role": "tool", "content": f"GITHUB_TOKEN={gh}", "tool_call_id": "c"},
        ],
    )
    for fmt in ("jsonl", "md", "html"):
        out = tmp_path / fmt
        files = export_sessions(
            a.store.connection(), out, [sid], ExportOptions(fmt=fmt, redact=True)
        )
        data = (out / files[0].file).read_text()
        assert key not in data and gh not in data
        assert "REDACTED" in data and "meeting at noon" in data
        assert json.loads((out / "manifest.jsonl").read_text())["redacted"] is True


def test_filters_include_pinned_and_archived(tmp_path: Path) -> None:
    """A source filter also selects pinned, archived and hidden sessions."""
    a = open_engine(tmp_path / "a")
    ids = [plain_session(a, f"20240101_00000{i}_eeeeee", 1, source="cli") for i in range(4)]
    plain_session(a, "20240101_000009_ffffff", 1, source="telegram")
    a.pin(ids[0])
    a.archive(ids[1], "user")
    a.hide(ids[2])
    conn = a.store.connection()
    assert select_sessions(conn, ExportFilter(sources=("cli",))) == ids
    assert select_sessions(conn, ExportFilter(pinned=True)) == [ids[0]]
    assert select_sessions(conn, ExportFilter(archived=True)) == [ids[1]]
    assert ExportFilter().is_empty()


def test_backup_guard_refuses_with_code_4131(tmp_path: Path) -> None:
    """A backup above max_export_messages (archived rows counted) is refused with code 4131."""
    a = open_engine(tmp_path / "a")
    sid = plain_session(a, "20240101_000000_gggggg", 6)
    a.compact(sid, [0, 1, 2, 3], [{"role": "assistant", "content": "sum"}])
    config = HermesConfig(sessions=SessionsConfig(max_export_messages=5))
    with pytest.raises(GuardError) as info:
        save_session(a, sid, "json", tmp_path / "s.json", config=config)
    assert info.value.code == 4131
    assert not (tmp_path / "s.json").exists()
    with pytest.raises(GuardError):
        export_sessions(
            a.store.connection(), tmp_path / "o", [sid], ExportOptions(fmt="jsonl", max_messages=5)
        )
    assert not (tmp_path / "o").exists()
    saved = save_session(a, sid, "md", tmp_path / "s.md", config=config)
    assert saved.messages == 7  # display history: archived turns included
    unguarded = ExportOptions(fmt="jsonl", max_messages=0)
    assert export_sessions(a.store.connection(), tmp_path / "u", [sid], unguarded)[0].messages == 7


def test_save_session_into_directory(tmp_path: Path) -> None:
    """/save writes one file (named safely inside a directory) and reports its digest."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    saved = save_session(a.store.connection(), sid, "html", tmp_path)
    path = Path(saved.file)
    assert path.parent == tmp_path and path.suffix == ".html"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == saved.sha256
    assert saved.display_version == a.get(sid).display_version


def test_stream_backup_equals_file_and_is_not_capped(tmp_path: Path) -> None:
    """The streaming backup yields the same line as a whole encode, row by row."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    conn = a.store.connection()
    chunks = list(stream_backup(conn, sid, at=3.0))
    assert len(chunks) == 2 + len(read_backup(conn, sid).messages)
    assert b"".join(chunks) == encode_line(read_backup(conn, sid, at=3.0))
    assert decode_session(b"".join(chunks)).id == sid


def test_backup_objects_decode_typed(tmp_path: Path) -> None:
    """A written backup decodes with the typed decoder into the same object."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    original = read_backup(a.store.connection(), sid)
    assert decode_session(msgspec.json.encode(original)) == original


SECRETS = {
    "aws_key": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "pem": "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
    "url_password": "s3cr3tP4ssw0rd",
    "bearer": "abcdef0123456789abcdef0123456789",
    "anthropic": "sk-ant-api03-" + "a1B2" * 22,
    "google": "AIzaSyD-1234567890abcdefghijklmnopqrstu",
    "github": "github_pat_11ABCDEFG0123456789_" + "abcdefghijklmnopqrstuvwxyz" * 2 + "0123",
}
ORDINARY = (
    "Deploy the api at noon; token budget is 4096; see https://example.com/docs?page=2, "
    "mail user@example.com, run chat-send P2.2 and snake_case_name"
)


def test_redaction_corpus_on_backup_export(tmp_path: Path) -> None:
    """A corpus of realistic secrets is scrubbed from a redacted backup; ordinary text stays."""
    a = open_engine(tmp_path / "a")
    sid = a.start_session("cli", session_id="20240101_000000_hhhhhh", cwd="/")
    s = SECRETS
    a.append_message(sid, "user", f"aws {s['aws_key']} aws_secret_access_key = {s['aws_secret']}")
    a.append_message(sid, "assistant", f"slack {s['slack']} jwt {s['jwt']}")
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{s['pem']}\n-----END RSA PRIVATE KEY-----"
    a.append_message(sid, "user", pem)
    a.append_message(sid, "user", f"postgres://admin:{s['url_password']}@db.example.com/app")
    a.append_message(sid, "user", f"Authorization: Bearer {s['bearer']}")
    a.append_message(sid, "user", f"{s['anthropic']} {s['google']} {s['github']}")
    a.append_message(sid, "assistant", ORDINARY)
    files = export_sessions(
        a.store.connection(), tmp_path / "o", [sid], ExportOptions(fmt="jsonl", redact=True)
    )
    data = (tmp_path / "o" / files[0].file).read_text()
    for name, secret in SECRETS.items():
        assert secret not in data, name
    assert ORDINARY in data


def test_export_reads_one_snapshot(tmp_path: Path) -> None:
    """A write committed mid-export appears in neither the files nor the manifest versions."""
    a = open_engine(tmp_path / "a")
    s1 = plain_session(a, "20240101_000001_iiiiii", 2)
    s2 = plain_session(a, "20240101_000002_jjjjjj", 2)
    before = a.get(s2).display_version
    fired: list[int] = []

    def tick(done: int, total: int) -> None:
        if not fired:
            fired.append(done)
            other = open_engine(tmp_path / "a")
            other.append_message(s2, "user", "LATE WRITE")
            other.close()

    files = export_sessions(
        a.store.connection(), tmp_path / "o", [s1, s2], ExportOptions(fmt="md"), progress=tick
    )
    assert fired
    assert "LATE WRITE" not in (tmp_path / "o" / files[1].file).read_text()
    assert files[1].display_version == before < a.get(s2).display_version


def test_redaction_scrubs_title_manifest_and_file_name(tmp_path: Path) -> None:
    """--redact scrubs a secret in the title from the file body, manifest and file name."""
    a = open_engine(tmp_path / "a")
    key = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2H1g0F9e8D7c6"
    sid = a.start_session(
        "cli",
        session_id="20240101_000000_tttttt",
        title=f"key {key}",
        cwd=f"/srv/{key}",
        model_config={"api_key": key},
    )
    a.append_message(sid, "user", "plain words stay")
    for fmt in ("jsonl", "md", "qmd", "html"):
        out = tmp_path / fmt
        files = export_sessions(
            a.store.connection(), out, [sid], ExportOptions(fmt=fmt, redact=True)
        )
        body = (out / files[0].file).read_text()
        manifest = (out / "manifest.jsonl").read_text()
        assert key not in body and key not in manifest, fmt
        assert not any(key[:20] in p.name for p in out.iterdir()), fmt
        assert "key [REDACTED:" in body and "plain words stay" in body
        assert json.loads(manifest)["title"].startswith("key [REDACTED:")
    saved = save_session(a, sid, "md", tmp_path / "s", redact=True)
    assert key not in Path(saved.file).name and key not in Path(saved.file).read_text()
    plain = export_sessions(a.store.connection(), tmp_path / "plain", [sid], ExportOptions())
    assert key in (tmp_path / "plain" / plain[0].file).read_text()  # no --redact: kept


def test_save_refuses_existing_file_unless_forced_and_keeps_its_mode(tmp_path: Path) -> None:
    """save_session never overwrites a file silently; --force overwrites and keeps its mode."""
    a = open_engine(tmp_path / "a")
    sid = plain_session(a, "20240101_000000_uuuuuu", 2)
    target = tmp_path / "hosts"
    target.write_text("127.0.0.1 localhost\n")
    target.chmod(0o644)
    with pytest.raises(ValidationError, match=f"{target} already exists"):
        save_session(a, sid, "md", target)
    assert target.read_text() == "127.0.0.1 localhost\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "hosts"]  # no temp file left
    saved = save_session(a, sid, "md", target, force=True)
    assert saved.file == str(target) and target.read_text().startswith("# ")
    assert target.stat().st_mode & 0o777 == 0o644
    fresh = save_session(a, sid, "md", tmp_path / "new.md")
    assert (tmp_path / "new.md").stat().st_mode & 0o777 == 0o600 and fresh.messages == 2


def test_save_into_directory_picks_a_new_name(tmp_path: Path) -> None:
    """Saving twice into one directory writes a second file (-2) and keeps the first one."""
    a = open_engine(tmp_path / "a")
    sid = plain_session(a, "20240101_000000_vvvvvv", 2)
    out = tmp_path / "saves"
    out.mkdir()
    first = Path(save_session(a, sid, "md", out).file)
    before = first.read_bytes()
    a.append_message(sid, "user", "one more")
    second = Path(save_session(a, sid, "md", out).file)
    third = Path(save_session(a, sid, "md", out).file)
    assert second.name == first.name.removesuffix(".md") + "-2.md"
    assert third.name == first.name.removesuffix(".md") + "-3.md"
    assert first.read_bytes() == before and b"one more" in second.read_bytes()
    assert sorted(p.name for p in out.iterdir()) == sorted([first.name, second.name, third.name])
