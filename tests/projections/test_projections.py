"""Read models written by the engine: display order, lineage, titles, search, forget."""

from __future__ import annotations

import apsw
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.queries.resolve import by_title, chain_tip, resolve_session
from hermes_es.queries.snippets import SNIPPET_CLOSE, SNIPPET_OPEN
from hermes_es.queries.transcript import messages_of


def shown(engine: SessionEngine, sid: str, scope: str = "display") -> list[tuple[int, str]]:
    """(seq, content) of a session's transcript in display order."""
    return [(m.seq, m.content) for m in messages_of(engine.store.connection(), sid, scope=scope)]


def column(engine: SessionEngine, sql: str, *params: object) -> list[object]:
    """First column of a query's rows."""
    return [r[0] for r in engine.store.connection().execute(sql, params).fetchall()]


def talk(engine: SessionEngine, sid: str, n: int) -> None:
    """Append ``n`` alternating user/assistant messages m0, m1, …"""
    for i in range(n):
        engine.append_message(sid, "user" if i % 2 == 0 else "assistant", f"m{i}")


def assert_verified(engine: SessionEngine) -> None:
    """Live projections equal a fresh replay of the log."""
    diffs = engine.backend.verify()
    assert diffs
    assert [d.table for d in diffs if not d.equal] == []


# -- display order -------------------------------------------------------------------------------


def test_edit_replacement_takes_the_old_place(engine: SessionEngine) -> None:
    """An edited message's replacement shows where the original stood, twice over."""
    sid = engine.start_session("cli", cwd="")
    talk(engine, sid, 4)
    first = engine.edit_message(sid, 1, "m1 v2")
    second = engine.edit_message(sid, first, "m1 v3")
    assert shown(engine, sid) == [(0, "m0"), (second, "m1 v3"), (2, "m2"), (3, "m3")]
    states = column(engine, "SELECT state FROM messages WHERE session_id = ? ORDER BY seq", sid)
    assert states == ["active", "edited", "active", "active", "edited", "active"]
    assert_verified(engine)


def test_compaction_summary_sits_between_archive_and_tail(engine: SessionEngine) -> None:
    """Summaries show after the archived messages and before the kept tail, in order."""
    sid = engine.start_session("cli", cwd="")
    talk(engine, sid, 5)
    s1, s2 = engine.compact(
        sid, [0, 1, 2], [{"role": "user", "content": "sum A"}, {"role": "user", "content": "sum B"}]
    )
    assert shown(engine, sid) == [
        (0, "m0"),
        (1, "m1"),
        (2, "m2"),
        (s1, "sum A"),
        (s2, "sum B"),
        (3, "m3"),
        (4, "m4"),
    ]
    assert shown(engine, sid, "context") == [(s1, "sum A"), (s2, "sum B"), (3, "m3"), (4, "m4")]
    engine.append_message(sid, "user", "m7")
    (s3,) = engine.compact(sid, [s1, s2, 3], [{"role": "user", "content": "sum C"}])
    assert [seq for seq, _ in shown(engine, sid)] == [0, 1, 2, s1, s2, 3, s3, 4, 7]
    assert shown(engine, sid, "context") == [(s3, "sum C"), (4, "m4"), (7, "m7")]
    assert_verified(engine)


def test_compaction_of_everything_then_append(engine: SessionEngine) -> None:
    """Compacting every active message puts the summary last; new messages follow it."""
    sid = engine.start_session("cli", cwd="")
    talk(engine, sid, 3)
    (s,) = engine.compact(sid, [0, 1, 2], [{"role": "user", "content": "all of it"}])
    engine.append_message(sid, "user", "next")
    assert [seq for seq, _ in shown(engine, sid)] == [0, 1, 2, s, s + 1]


def test_compaction_after_edit_uses_display_order(engine: SessionEngine) -> None:
    """A replacement (high seq, early place) archived by compaction keeps the summary in place."""
    sid = engine.start_session("cli", cwd="")
    talk(engine, sid, 3)
    new = engine.edit_message(sid, 0, "m0 fixed")
    (s,) = engine.compact(sid, [new, 1], [{"role": "user", "content": "sum"}])
    assert [seq for seq, _ in shown(engine, sid)] == [new, 1, s, 2]
    assert_verified(engine)


def test_rewound_rows_are_kept_but_hidden(engine: SessionEngine) -> None:
    """Rewound messages stay in the table as 'rewound' and leave display and context."""
    sid = engine.start_session("cli", cwd="")
    talk(engine, sid, 4)
    engine.rewind(sid, 1)
    assert shown(engine, sid) == [(0, "m0"), (1, "m1")]
    assert len(shown(engine, sid, "all")) == 4
    rewound = column(engine, "SELECT seq FROM messages WHERE state = 'rewound' ORDER BY seq")
    assert rewound == [2, 3]


# -- lineage and titles --------------------------------------------------------------------------


def test_lineage_edges_and_roots(engine: SessionEngine) -> None:
    """Compression children share the chain root; branches and delegates are their own roots."""
    root = engine.start_session("cli", cwd="", title="plan")
    talk(engine, root, 2)
    c1 = engine.continue_session(root, [{"role": "user", "content": "s1"}])
    c2 = engine.continue_session(c1, [{"role": "user", "content": "s2"}])
    branch = engine.start_session("cli", cwd="", parent_id=c1, parent_kind="branch")
    helper = engine.start_session("tool", cwd="", parent_id=c2, parent_kind="delegate")
    edges = engine.store.connection().execute(
        "SELECT child_id, parent_id, kind FROM lineage ORDER BY at, child_id"
    )
    assert sorted(tuple(e) for e in edges) == sorted(
        [
            (c1, root, "compression"),
            (c2, c1, "compression"),
            (branch, c1, "branch"),
            (helper, c2, "delegate"),
        ]
    )
    roots = dict(engine.store.connection().execute("SELECT id, root_id FROM sessions").fetchall())
    assert roots == {root: root, c1: root, c2: root, branch: branch, helper: helper}
    assert chain_tip(engine.store.connection(), root) == c2
    assert_verified(engine)


def test_lineage_titles_resolve_to_newest(engine: SessionEngine) -> None:
    """Continuations get 'T #2', 'T #3'; 'T' resolves to the newest, 'T #2' to itself."""
    root = engine.start_session("cli", cwd="", title="my project")
    c1 = engine.continue_session(root, [{"role": "user", "content": "s"}])
    c2 = engine.continue_session(c1, [{"role": "user", "content": "s"}])
    assert [engine.get(s).title for s in (root, c1, c2)] == [
        "my project",
        "my project #2",
        "my project #3",
    ]
    conn = engine.store.connection()
    assert resolve_session(conn, "my project") == c2
    assert resolve_session(conn, "MY PROJECT") == c2
    assert resolve_session(conn, "my project #2") == c1
    assert by_title(conn, "my project #9") is None


def test_lineage_title_skips_taken_numbers(engine: SessionEngine) -> None:
    """A user title 'T #7' makes the next continuation 'T #8'; titles stay unique."""
    root = engine.start_session("cli", cwd="", title="notes")
    other = engine.start_session("cli", cwd="")
    engine.set_title(other, "Notes #7")
    child = engine.continue_session(root, [{"role": "user", "content": "s"}])
    assert engine.get(child).title == "notes #8"
    titles = column(engine, "SELECT title FROM sessions WHERE title <> '' ORDER BY title")
    assert len(titles) == len({str(t).lower() for t in titles}) == 3


@pytest.mark.sqlite_only
def test_unique_title_index_backs_the_check(engine: SessionEngine) -> None:
    """The sessions table itself refuses two equal titles (any case)."""
    a = engine.start_session("cli", cwd="", title="same")
    b = engine.start_session("cli", cwd="")
    with pytest.raises(apsw.ConstraintError):
        engine.store.connection().execute("UPDATE sessions SET title = 'SAME' WHERE id = ?", (b,))
    assert engine.resolve("same") == a


def test_cleared_title_frees_it(engine: SessionEngine) -> None:
    """Clearing a title lets another session take it."""
    a = engine.start_session("cli", cwd="", title="free me")
    b = engine.start_session("cli", cwd="")
    engine.set_title(a, "")
    assert engine.set_title(b, "free me").title == "free me"
    assert engine.resolve("free me") == b


# -- search --------------------------------------------------------------------------------------

CORPUS = {
    "english": "We discussed the quarterly budget forecast in detail.",
    "ident": "Remember to run chat-send after the deploy.",
    "version": "Milestone P2.2 is blocked on the migration.",
    "email": "Please mail alice.smith@example.com the report.",
    "url": "The docs live at https://docs.example.org/guide?page=2 now.",
    "chinese": "我们今天讨论了全文搜索的问题。",
    "japanese": "日本語のテキストを検索します。",
    "korean": "한국어 검색엔진을 테스트합니다.",
}


@pytest.fixture
def corpus(engine: SessionEngine) -> dict[str, int]:
    """One session holding every CORPUS text; returns name -> seq."""
    sid = engine.start_session("cli", cwd="")
    return {name: engine.append_message(sid, "user", text) for name, text in CORPUS.items()}


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("budget forecast", "english"),
        ("Quarterly", "english"),
        ("chat-send", "ident"),
        ("P2.2", "version"),
        ("alice.smith@example.com", "email"),
        ("https://docs.example.org/guide", "url"),
        ("docs.example.org", "url"),
        ("全文搜索", "chinese"),
        ("搜索", "chinese"),
        ("検索", "japanese"),
        ("검색", "korean"),
    ],
)
def test_search_finds(engine: SessionEngine, corpus: dict[str, int], query: str, name: str) -> None:
    """Words, identifiers, versions, emails, URLs and CJK text are all findable."""
    hits = engine.search(query)
    assert [h.seq for h in hits][:1] == [corpus[name]]
    assert SNIPPET_OPEN in hits[0].snippet and SNIPPET_CLOSE in hits[0].snippet


def test_search_identifier_is_a_phrase(engine: SessionEngine, corpus: dict[str, int]) -> None:
    """'chat-send' does not match text that merely holds 'send' and 'chat' apart."""
    sid = engine.start_session("cli", cwd="")
    engine.append_message(sid, "user", "send the chat later")
    hits = engine.search("chat-send")
    assert [h.seq for h in hits] == [corpus["ident"]]
    assert sid not in {h.session_id for h in hits}
    assert [h.session_id for h in engine.search("chat later")] == [sid]


def test_search_filters_and_states(engine: SessionEngine) -> None:
    """Roles and sources filter hits; rewound text is not found, compacted text is."""
    a = engine.start_session("cli", cwd="")
    b = engine.start_session("telegram", cwd="")
    engine.append_message(a, "user", "zebra crossing")
    engine.append_message(a, "assistant", "zebra stripes")
    engine.append_message(b, "user", "zebra in telegram")
    assert len(engine.search("zebra")) == 3
    assert {h.role for h in engine.search("zebra", roles=["assistant"])} == {"assistant"}
    assert {h.session_id for h in engine.search("zebra", sources=["telegram"])} == {b}
    assert len(engine.search("zebra", limit=1)) == 1
    engine.rewind(a, 0)
    assert {h.seq for h in engine.search("zebra", sources=["cli"])} == {0}
    engine.append_message(a, "assistant", "more")
    engine.compact(a, [0], [{"role": "user", "content": "summary"}])
    [hit] = engine.search("crossing")
    assert hit.state == "compacted"
    assert engine.search("") == []
    for odd in ['"unbalanced (quote', "NEAR(", "a AND OR", "*", "col:umn"]:
        assert isinstance(engine.search(odd), list)  # any text is safe to search


@pytest.mark.sqlite_only
def test_forget_removes_fts_rows(engine: SessionEngine) -> None:
    """ProjectionSet.forget drops the session's rows and its index entries, leaving others."""
    gone = engine.start_session("cli", cwd="")
    kept = engine.start_session("cli", cwd="")
    engine.append_message(gone, "user", "platypus secret words")
    engine.append_message(gone, "assistant", "platypus reply")
    engine.append_message(kept, "user", "platypus public")
    with engine.store.transaction() as batch:
        engine.store.projections.forget(batch.conn, gone)
    conn = engine.store.connection()
    assert [h.session_id for h in engine.search("platypus")] == [kept]
    assert engine.search("secret") == []
    assert conn.execute("SELECT COUNT(*) FROM messages_fts_docsize").fetchall() == [(1,)]
    assert conn.execute(
        "SELECT COUNT(*) FROM messages WHERE session_id = ?", (gone,)
    ).fetchall() == [(0,)]
    assert conn.execute("SELECT COUNT(*) FROM sessions WHERE id = ?", (gone,)).fetchall() == [(0,)]
    conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, messages_fts, row)")
    terms = {str(r[0]) for r in conn.execute("SELECT term FROM temp.vocab")}
    assert "secret" not in terms and "reply" not in terms and "public" in terms
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
