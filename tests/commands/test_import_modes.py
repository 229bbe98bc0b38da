"""Import a user can live with: --on-conflict refuse|skip, a UTF-8 BOM, identical duplicate
lines, and the rules native appends keep (token counts, tool call ids, parents), file:line."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_es.cli.app import cli
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.importing import import_backups
from hermes_es.errors import ValidationError
from hermes_es.projections.rebuild import verify

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.commands.export_helpers import open_engine
except ModuleNotFoundError:  # pragma: no cover
    from export_helpers import open_engine  # type: ignore[no-redef,import-not-found]


def _obj(sid: str, **extra: object) -> dict[str, object]:
    obj: dict[str, object] = {
        "format": "hermes-es.session/1",
        "id": sid,
        "source": "cli",
        "started_at": 1.0,
        "messages": [{"role": "user", "content": f"hi from {sid}", "at": 2.0}],
    }
    obj.update(extra)
    return obj


def _line(sid: str, **extra: object) -> str:
    return json.dumps(_obj(sid, **extra))


def _write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _ids(engine: SessionEngine) -> list[str]:
    rows = engine.store.connection().execute("SELECT id FROM sessions ORDER BY id").fetchall()
    return [str(r[0]) for r in rows]


def test_on_conflict_skip_leaves_conflicts_out_and_reports_them(tmp_path: Path) -> None:
    """Default refuse imports nothing; skip imports the rest and names each left-out session."""
    b = open_engine(tmp_path / "b")
    b.start_session("cli", session_id="mine", title="Taken", cwd="/")
    b.start_session("cli", session_id="exists", cwd="/")
    path = _write(
        tmp_path / "in.jsonl",
        _line("fresh"),
        _line("exists"),  # same id, different content
        _line("theirs", title="taken"),  # title clash
        _line("kid", parent_id="theirs", parent_kind="delegate"),  # parent left out
    )
    with pytest.raises(ValidationError, match=r"in\.jsonl:2: session exists already exists"):
        import_backups(b.store, [path])
    assert _ids(b) == ["exists", "mine"]
    report = import_backups(b.store, [path], on_conflict="skip")
    assert report.imported == ["fresh"]
    skipped = [(c.where.rsplit("/", 1)[-1], c.session_id) for c in report.conflicts]
    assert skipped == [
        ("in.jsonl:2", "exists"),
        ("in.jsonl:3", "theirs"),
        ("in.jsonl:4", "kid"),
    ]
    assert "different content" in report.conflicts[0].reason
    assert "already used by session mine" in report.conflicts[1].reason
    assert "parent session theirs was left out" in report.conflicts[2].reason
    assert _ids(b) == ["exists", "fresh", "mine"]
    assert all(d.equal for d in verify(b.store.path))


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    """A backup written with a UTF-8 byte order mark (.jsonl or .json) imports."""
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(codecs.BOM_UTF8 + (_line("a") + "\n" + _line("b") + "\n").encode())
    single = tmp_path / "bom.json"
    single.write_bytes(codecs.BOM_UTF8 + json.dumps(_obj("c"), indent=2).encode())
    b = open_engine(tmp_path / "b")
    assert import_backups(b.store, [jsonl, single]).imported == ["a", "b", "c"]


def test_identical_duplicate_line_is_not_a_conflict(tmp_path: Path) -> None:
    """The same object twice (two exports of one session) is read once and reported."""
    one = _write(tmp_path / "one.jsonl", _line("s1"))
    two = _write(tmp_path / "two.jsonl", _line("s0"), _line("s1", exported_at=99.0))
    b = open_engine(tmp_path / "b")
    report = import_backups(b.store, [one, two])
    assert report.imported == ["s1", "s0"] and len(report.duplicates) == 1
    assert report.duplicates[0].endswith("two.jsonl:2 (same as " + str(one) + ":1)")
    different = _write(tmp_path / "three.jsonl", _line("s2"), _line("s2", title="other"))
    with pytest.raises(ValidationError, match=r"three\.jsonl:2: duplicate session id 's2'"):
        import_backups(b.store, [different])
    report = import_backups(b.store, [different], on_conflict="skip")
    assert report.imported == ["s2"] and [c.session_id for c in report.conflicts] == ["s2"]
    assert b.get("s2").title == ""


CALL = {"id": "c1", "name": "read", "arguments": "{}"}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"tokens_in": -5}, r"`\$\.tokens_in` is -5: token counts cannot be negative"),
        (
            {"messages": [{"role": "assistant", "content": "x", "tokens_out": -1}]},
            r"`\$\.messages\[0\]\.tokens_out` is -1",
        ),
        (
            {
                "messages": [
                    {"role": "assistant", "content": "", "tool_calls": [CALL]},
                    {"role": "tool", "content": "out", "tool_call_id": "nope"},
                ]
            },
            r"`\$\.messages\[1\]\.tool_call_id` is 'nope', which no tool call of this session",
        ),
        (
            {"parent_id": "ghost", "parent_kind": "branch"},
            r"`\$\.parent_id` 'ghost' names no session of this import or of the store",
        ),
    ],
)
def test_rows_native_appends_refuse_are_refused_with_file_and_line(
    tmp_path: Path, extra: dict[str, object], expected: str
) -> None:
    """Negative tokens, an unanswered call id, a parent that exists nowhere: refused, nothing
    imported, the message names file:line and the JSON path."""
    path = _write(tmp_path / "v.jsonl", _line("ok"), _line("bad", **extra))
    b = open_engine(tmp_path / "b")
    with pytest.raises(ValidationError, match=r"v\.jsonl:2: .*" + expected):
        import_backups(b.store, [path], on_conflict="skip")
    assert _ids(b) == []


def test_parent_in_the_store_or_the_import_is_accepted(tmp_path: Path) -> None:
    """A parent id naming a stored session, or a session of the same import, is fine."""
    b = open_engine(tmp_path / "b")
    b.start_session("cli", session_id="stored", cwd="/")
    path = _write(
        tmp_path / "p.jsonl",
        _line("k1", parent_id="stored", parent_kind="branch"),
        _line("k2", parent_id="k3", parent_kind="delegate"),
        _line("k3"),
    )
    assert import_backups(b.store, [path]).imported == ["k1", "k3", "k2"]


def test_native_append_refuses_negative_token_counts(tmp_path: Path) -> None:
    """append_message with a negative token count is a ValidationError and stores nothing."""
    b = open_engine(tmp_path / "b")
    sid = b.start_session("cli", session_id="n1", cwd="/")
    with pytest.raises(ValidationError, match="token counts cannot be negative"):
        b.append_message(sid, "assistant", "x", tokens_in=-3)
    assert b.get(sid).message_count == 0


def test_cli_on_conflict_skip_lists_what_it_skipped(tmp_path: Path) -> None:
    """`hermes sessions import --on-conflict skip` exits 0 and prints each skipped session;
    without it the conflict is an error (exit 1) and nothing is imported."""
    home = tmp_path / "home"
    engine = open_engine(home)
    engine.start_session("cli", session_id="exists", cwd="/")
    engine.close()
    path = _write(tmp_path / "c.jsonl", _line("new1"), _line("exists"), _line("new1"))
    env = {"HERMES_HOME": str(home)}
    refused = CliRunner().invoke(cli, ["sessions", "import", str(path)], env=env)
    assert refused.exit_code == 1 and "c.jsonl:2: session exists already exists" in refused.output
    assert "Traceback" not in refused.output
    args = ["sessions", "import", str(path), "--on-conflict", "skip"]
    done = CliRunner().invoke(cli, args, env=env)
    assert done.exit_code == 0, done.output
    assert "Imported 1 sessions" in done.output
    assert "1 identical duplicate line(s) read once" in done.output
    assert f"skipped (conflict): {path}:2: session exists:" in done.output
    as_json = CliRunner().invoke(cli, [*args, "--json"], env=env)
    report = json.loads(as_json.output)
    assert [c["session_id"] for c in report["conflicts"]] == ["exists"]
    usage = CliRunner().invoke(
        cli, ["sessions", "import", "--from-hermes-db", str(path), "--on-conflict", "skip"], env=env
    )
    assert usage.exit_code == 2
