"""Random command sequences on the engine: the fold, the head row, the sessions row, the
messages table and a fresh replay of the log all agree with each other and with a simple model."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState, fold
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import ConflictError, ValidationError
from hermes_es.projections.rebuild import verify
from hermes_es.projections.sessions import COLUMNS, row_of
from hermes_es.queries import lookup
from hermes_es.queries.transcript import messages_of

VOCAB = [
    "hello",
    "world",
    "chat-send",
    "P2.2",
    "ana@example.com",
    "https://example.org/a?b=1",
    "日本語",
    "中文搜索",
    "Café",
    "snake_case",
    "42",
]
TEXT = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4).map(" ".join)
TITLES = st.sampled_from(["alpha", "Beta", "alpha #2", "gamma", ""])
PICK = st.integers(min_value=0, max_value=10_000)


class Model(msgspec.Struct):
    """What the test expects of one session, kept independently of the engine."""

    display: list[int] = []
    active: set[int] = set()
    roles: dict[int, str] = {}
    open_calls: list[str] = []
    call_seqs: dict[str, int] = {}
    continued: bool = False


def stored_fold(engine: SessionEngine, sid: str) -> SessionState:
    """Fold the session's events as stored in the ``events`` table."""
    rows = engine.store.connection().execute(
        "SELECT originator_version, topic, state FROM events WHERE originator_id = ?"
        " ORDER BY originator_version",
        (sid,),
    )
    return fold(sid, [(v, ev.decode(t, s)) for v, t, s in rows])


class EngineMachine(RuleBasedStateMachine):
    """Drives one SessionEngine on a fresh state.db with random valid (and a few stale) commands."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="hermes-stateful-"))
        ticks = itertools.count()
        self.engine = SessionEngine.open(
            self.dir, clock=lambda: 1_700_000_000.0 + next(ticks), actor="prop"
        )
        self.models: dict[str, Model] = {}
        self.calls = itertools.count()

    # -- helpers -------------------------------------------------------------------------------

    def _sid(self, pick: int) -> str:
        ids = sorted(self.models)
        return ids[pick % len(ids)]

    def _live(self, pick: int) -> str:
        ids = sorted(s for s, m in self.models.items() if not m.continued)
        return ids[pick % len(ids)]

    def _has_live(self) -> bool:
        return any(not m.continued for m in self.models.values())

    def _active_display(self, sid: str) -> list[int]:
        m = self.models[sid]
        return [s for s in m.display if s in m.active]

    def _added(self, sid: str, seqs: list[int], roles: list[str]) -> None:
        m = self.models[sid]
        m.display.extend(seqs)
        m.active.update(seqs)
        m.roles.update(zip(seqs, roles, strict=True))

    def _title_owner(self, title: str) -> str | None:
        return lookup.title_owner(self.engine.store.connection(), title) if title else None

    # -- rules ---------------------------------------------------------------------------------

    @initialize()
    def first_session(self) -> None:
        """Every run starts with one session."""
        self.models[self.engine.start_session("cli", cwd="")] = Model()

    @rule(source=st.sampled_from(["cli", "telegram", "tui"]), title=TITLES)
    def start(self, source: str, title: str) -> None:
        """Start a session, titled unless the title is taken."""
        owner = self._title_owner(title)
        if owner:
            with pytest.raises(ValidationError, match="already used"):
                self.engine.start_session(source, cwd="", title=title)
            return
        self.models[self.engine.start_session(source, cwd="", title=title)] = Model()

    @rule(pick=PICK, role=st.sampled_from(["user", "assistant", "system"]), text=TEXT)
    def append_message(self, pick: int, role: str, text: str) -> None:
        """Append one plain message."""
        sid = self._sid(pick)
        seq = self.engine.append_message(sid, role, text, tokens_out=len(text))
        self._added(sid, [seq], [role])

    @rule(pick=PICK, text=TEXT, answer=st.booleans())
    def append_tool_turn(self, pick: int, text: str, answer: bool) -> None:
        """Append a turn: a tool call, (maybe) its result, and (then) a reply, atomically."""
        sid = self._sid(pick)
        call = f"call-{next(self.calls)}"
        turn: list[dict[str, Any]] = [
            {"role": "assistant", "content": "", "tool_calls": [{"id": call, "name": "grep"}]}
        ]
        if answer:
            turn.append({"role": "tool", "content": text, "tool_call_id": call, "tool_name": "g"})
            turn.append({"role": "assistant", "content": f"found {text}", "tokens_in": 3})
        else:
            self.models[sid].open_calls.append(call)
        seqs = self.engine.append_turn(sid, turn)
        self.models[sid].call_seqs[call] = seqs[0]
        self._added(sid, seqs, [m["role"] for m in turn])

    @precondition(lambda self: any(m.open_calls for m in self.models.values()))
    @rule(pick=PICK, text=TEXT)
    def answer_open_call(self, pick: int, text: str) -> None:
        """Answer a tool call left open by an earlier turn."""
        ids = sorted(s for s, m in self.models.items() if m.open_calls)
        sid = ids[pick % len(ids)]
        call = self.models[sid].open_calls.pop(0)
        seq = self.engine.append_message(sid, "tool", text, tool_call_id=call)
        self._added(sid, [seq], ["tool"])

    @rule(pick=PICK, text=TEXT)
    def uid_retry(self, pick: int, text: str) -> None:
        """Append with a uid, then retry it: one message, the same seq."""
        sid = self._sid(pick)
        uid = f"uid-{next(self.calls)}"
        seq = self.engine.append_message(sid, "user", text, uid=uid)
        version = self.engine.get(sid).version
        assert self.engine.append_message(sid, "user", text, uid=uid) == seq
        assert self.engine.get(sid).version == version
        self._added(sid, [seq], ["user"])

    @rule(pick=PICK, which=PICK)
    def rewind(self, pick: int, which: int) -> None:
        """Rewind to an active message: every active message after it leaves the context."""
        sid = self._sid(pick)
        active = sorted(self.models[sid].active)
        if not active:
            return
        seq = active[which % len(active)]
        removed = self.engine.rewind(sid, seq)
        m = self.models[sid]
        assert removed == [s for s in active if s > seq]
        m.active -= set(removed)
        m.display = [s for s in m.display if s not in removed]
        # a rewind drops the pending tool calls made by the messages it removed
        m.open_calls = [c for c in m.open_calls if m.call_seqs[c] <= seq]

    @rule(pick=PICK, which=PICK, text=TEXT)
    def edit(self, pick: int, which: int, text: str) -> None:
        """Replace an active non-tool message; the replacement takes its display place."""
        sid = self._sid(pick)
        m = self.models[sid]
        candidates = [s for s in sorted(m.active) if m.roles[s] != "tool"]
        if not candidates:
            return
        old = candidates[which % len(candidates)]
        new = self.engine.edit_message(sid, old, text)
        m.active.discard(old)
        m.active.add(new)
        m.roles[new] = m.roles[old]
        m.display[m.display.index(old)] = new

    @rule(pick=PICK, count=st.integers(min_value=1, max_value=4), summary=st.booleans())
    def compact(self, pick: int, count: int, summary: bool) -> None:
        """Archive the oldest active messages behind (maybe) one summary message."""
        sid = self._sid(pick)
        ordered = self._active_display(sid)
        if not ordered:
            return
        archived = ordered[:count]
        drafts = [{"role": "user", "content": "summary " + str(archived)}] if summary else []
        seqs = self.engine.compact(sid, archived, drafts)
        m = self.models[sid]
        m.active -= set(archived)
        at = m.display.index(archived[-1]) + 1
        m.display[at:at] = seqs
        m.active.update(seqs)
        m.roles.update(dict.fromkeys(seqs, "user"))

    @precondition(lambda self: self._has_live())
    @rule(pick=PICK, carry=st.booleans())
    def continue_session(self, pick: int, carry: bool) -> None:
        """Split a session by compression into a child that starts with a summary."""
        sid = self._live(pick)
        extra = [{"role": "user", "content": "kept tail"}] if carry else []
        child = self.engine.continue_session(
            sid, [{"role": "user", "content": "summary"}], carry=extra
        )
        self.models[sid].continued = True
        self.models[child] = Model()
        self._added(child, list(range(1 + len(extra))), ["user"] * (1 + len(extra)))
        parent = self.engine.get(sid)
        kid = self.engine.get(child)
        if parent.title:
            assert kid.title.startswith(lookup.base_title(parent.title) + " #")

    @rule(pick=PICK, title=TITLES)
    def set_title(self, pick: int, title: str) -> None:
        """Set or clear a title; a title held by another session is refused."""
        sid = self._sid(pick)
        owner = self._title_owner(title)
        if owner and owner != sid:
            with pytest.raises(ValidationError, match="already used"):
                self.engine.set_title(sid, title)
            return
        assert self.engine.set_title(sid, title).title == title

    @rule(
        pick=PICK,
        action=st.sampled_from(
            ["pin", "unpin", "archive", "sweep", "unarchive", "end", "reopen", "hide", "show"]
        ),
    )
    def curate(self, pick: int, action: str) -> None:
        """Pin, archive, end, reopen or hide a session."""
        sid = self._sid(pick)
        e = self.engine
        before = e.get(sid)
        state = {
            "pin": lambda: e.pin(sid, True),
            "unpin": lambda: e.pin(sid, False),
            "archive": lambda: e.archive(sid, "user"),
            "sweep": lambda: e.archive(sid, "sweep"),
            "unarchive": lambda: e.unarchive(sid),
            "end": lambda: e.end_session(sid, "user_exit"),
            "reopen": lambda: e.reopen(sid),
            "hide": lambda: e.hide(sid, True),
            "show": lambda: e.hide(sid, False),
        }[action]()
        expected = {
            "pin": ("pinned", True),
            "unpin": ("pinned", False),
            "archive": ("archived", "user"),
            "sweep": ("archived", "user" if before.archived == "user" else "sweep"),
            "unarchive": ("archived", ""),
            "end": ("ended", True),
            "reopen": ("ended", False),
            "hide": ("hidden", True),
            "show": ("hidden", False),
        }[action]
        assert getattr(state, expected[0]) == expected[1]

    @rule(pick=PICK, tokens=st.integers(min_value=0, max_value=500))
    def usage(self, pick: int, tokens: int) -> None:
        """Record token usage outside any message."""
        sid = self._sid(pick)
        before = self.engine.get(sid).tokens_in
        self.engine.record_usage(sid, tokens, 1)
        assert self.engine.get(sid).tokens_in == before + tokens

    @rule(pick=PICK, text=TEXT)
    def stale_writer(self, pick: int, text: str) -> None:
        """A write naming an old version is refused with ConflictError and writes nothing."""
        sid = self._sid(pick)
        state = self.engine.get(sid)
        with pytest.raises(ConflictError):
            self.engine.append_message(sid, "user", text, expected_version=state.version - 1)
        assert self.engine.get(sid).version == state.version

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def fold_equals_head_equals_row(self) -> None:
        """For every session: fold(stored events) == head state == sessions row, and the
        messages table matches the model."""
        conn = self.engine.store.connection()
        for sid, model in self.models.items():
            folded = stored_fold(self.engine, sid)
            head = self.engine.get(sid)
            assert folded == head
            row = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM sessions WHERE id = ?", (sid,))
            [live] = [tuple(r) for r in row]
            root = live[COLUMNS.index("root_id")]
            assert live == row_of(head, str(root))
            if head.parent_kind == "compression":
                parent_root = conn.execute(
                    "SELECT root_id FROM sessions WHERE id = ?", (head.parent_id,)
                ).fetchall()[0][0]
                assert root == parent_root
            else:
                assert root == sid
            assert sorted(head.active_seqs()) == sorted(model.active)
            assert head.active_count == len(model.active)
            assert head.display_version <= head.version
            assert [m.seq for m in messages_of(conn, sid)] == model.display
            assert [m.seq for m in messages_of(conn, sid, scope="context")] == (
                self._active_display(sid)
            )
            assert head.open_tool_calls == model.open_calls

    def teardown(self) -> None:
        """Live projections equal a fresh replay of the log, table by table."""
        try:
            diffs = verify(self.engine.db_path)
            assert [d.table for d in diffs if not d.equal] == []
        finally:
            self.engine.close()
            shutil.rmtree(self.dir, ignore_errors=True)


def test_engine_state_machine() -> None:
    """Random command sequences keep fold, head, rows and a replay of the log in agreement."""
    run_state_machine_as_test(
        EngineMachine,
        settings=settings(
            max_examples=30,
            stateful_step_count=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


@pytest.mark.slow
def test_engine_state_machine_long() -> None:
    """The same property over many more and longer command sequences."""
    run_state_machine_as_test(
        EngineMachine,
        settings=settings(
            max_examples=300,
            stateful_step_count=60,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
