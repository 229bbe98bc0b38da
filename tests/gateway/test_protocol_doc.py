"""docs/gateway-protocol.md stays true to the code: every method the gateway dispatches has a
row naming each of its params, every error code and every pushed notification is described,
and so is every item a running turn streams and every turn event with its fields."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from hermes_es.commands import turn_events
from hermes_es.events import turns as turn_event_types
from hermes_es.gateway import protocol as p
from hermes_es.gateway.authority import METHODS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "gateway-protocol.md"


def _section(heading: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"^## {re.escape(heading)}$", text, re.M)
    assert found is not None, f"docs/gateway-protocol.md has no section {heading!r}"
    rest = text[found.end() :]
    end = re.search(r"^## ", rest, re.M)
    return rest[: end.start()] if end else rest


def _rows() -> dict[str, str]:
    rows = {}
    for line in _section("Methods").splitlines():
        found = re.match(r"\| `([\w.]+)` \|(.*)\|.*\|$", line)
        if found:
            rows[found.group(1)] = found.group(2)
    return rows


def test_every_method_has_a_row_naming_each_of_its_params() -> None:
    """A method missing from the table, or a param of its Struct that no row of a method
    using that Struct names, fails (a table row naming a method that does not exist too)."""
    rows = _rows()
    assert set(rows) == set(METHODS)
    by_struct: dict[type[msgspec.Struct], str] = {}
    for method, struct in METHODS.items():
        by_struct[struct] = by_struct.get(struct, "") + rows[method]
    for struct, cells in by_struct.items():
        for field in msgspec.structs.fields(struct):
            assert f"`{field.name}" in cells, f"{struct.__name__}.{field.name} is not documented"


def test_every_error_code_is_in_the_table() -> None:
    """Each code protocol.py defines has a row of the error table."""
    table = _section("Error codes")
    codes = {
        name: value
        for name, value in vars(p).items()
        if name.isupper() and isinstance(value, int) and not isinstance(value, bool)
    }
    assert len(codes) >= 12
    for name, code in codes.items():
        assert re.search(rf"^\| {code} \| \S", table, re.M), f"{name} ({code}) is not documented"


def test_every_pushed_notification_and_streamed_item_is_described() -> None:
    """The methods the gateway pushes (found in its sources), the ``turn.stream`` item types
    with their fields, and the turn events with their fields are in "Pushed notifications"."""
    pushed = _section("Pushed notifications")
    sources = "".join(f.read_text() for f in (ROOT / "hermes_es" / "gateway").glob("*.py"))
    methods = set(re.findall(r'Notification\(method="([\w.]+)"', sources))
    methods |= set(re.findall(r'broadcast\("([\w.]+)"', sources))
    assert {"session.event", "turn.stream", "gateway.draining"} <= methods
    for method in methods:
        assert f"- `{method}`" in pushed, method
    for item in (turn_events.ReplyDelta, turn_events.ToolCallStarted, turn_events.ToolResultReady):
        tag = msgspec.inspect.type_info(item).tag
        described = re.search(rf'\{{"type": "{re.escape(tag)}"([^}}]*)\}}', pushed)
        assert described is not None, tag
        for field in msgspec.structs.fields(item):
            assert f'"{field.name}"' in described.group(1), f"{tag}.{field.name}"
    checked = []
    for event in vars(turn_event_types).values():
        topic = getattr(event, "topic", "")
        if not isinstance(topic, str) or not topic.startswith("hermes.turn."):
            continue
        checked.append(topic)
        described = re.search(rf"`{re.escape(topic)}` \(([^)]*)\)", pushed)
        assert described is not None, topic
        for field in msgspec.structs.fields(event):
            if field.name not in ("at", "actor"):
                assert f"`{field.name}`" in described.group(1), f"{topic}.{field.name}"
    assert len(checked) >= 5  # admitted, started, finished, unknown, resolved
