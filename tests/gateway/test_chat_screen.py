"""The interactive chat through the gateway: what its screen draws of the session's stream."""

from __future__ import annotations

import pytest

from hermes_es.cli.gateway_chat import _Screen


def _admitted(turn: int, submission: str, text: str) -> dict[str, object]:
    return {
        "method": "session.event",
        "params": {
            "session_id": "s1",
            "sequence": turn,
            "type": "hermes.turn.admitted",
            "actor": "uid:0",
            "event": {
                "turn": turn,
                "submission_id": submission,
                "client_kind": "cli",
                "text": text,
            },
        },
    }


def test_own_admission_arriving_before_the_submit_answer_is_not_echoed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The admitted event of this terminal's submission, pushed before the prompt.submit answer
    names its turn (the gateway sends the event at commit, the answer after), is recognised by
    its submission id and not echoed as ``[uid:0 via cli] › …``; another client's admission
    still is."""
    screen = _Screen("s1")
    screen.submissions.add("mine-1")
    screen(_admitted(1, "mine-1", "my own line"))  # before screen.mine knows turn 1
    screen(_admitted(2, "theirs", "their line"))
    out = capsys.readouterr().out
    assert "my own line" not in out
    assert "[uid:0 via cli] › their line" in out


def test_a_turn_the_takeover_recorded_unknown_is_said_with_how_to_resolve_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A ``hermes.turn.unknown`` on the stream (a new owner took over while the turn ran)
    releases the terminal waiting for that turn, tells the user the message is kept and that
    /discard resolves it, and marks the turn so the chat knows its next messages wait."""
    screen = _Screen("s1")
    waiting = screen.waiter(3)
    screen(
        {
            "method": "session.event",
            "params": {
                "session_id": "s1",
                "sequence": 9,
                "type": "hermes.turn.unknown",
                "actor": "gateway",
                "event": {"turn": 3, "epoch": 1, "detected_epoch": 2},
            },
        }
    )
    assert waiting.is_set() and 3 in screen.unknown
    said = capsys.readouterr().err
    assert "turn 3 is unknown" in said and "/discard" in said and "not sent again" in said


def test_another_clients_turn_at_the_prompt_goes_below_it_and_the_prompt_comes_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """While the terminal waits at ``› ``, a turn it did not submit starts on a new line
    (not after the prompt) and the prompt is drawn again when that turn ends; a turn ending
    while the terminal is not at its prompt draws no prompt."""
    screen = _Screen("s1")
    screen.prompt_shown()
    screen(
        {
            "method": "turn.stream",
            "params": {
                "session_id": "s1",
                "turn": 4,
                "index": 1,
                "item": {"type": "reply.delta", "text": "their reply"},
            },
        }
    )
    finished = {
        "method": "session.event",
        "params": {
            "session_id": "s1",
            "sequence": 12,
            "type": "hermes.turn.finished",
            "actor": "gateway",
            "event": {"turn": 4, "outcome": "completed"},
        },
    }
    screen(finished)
    out = capsys.readouterr().out
    assert out.startswith("\n") and "their reply" in out
    assert out.endswith("› ")
    screen.prompt_left()
    screen({**finished, "params": {**finished["params"], "sequence": 13}})
    assert "› " not in capsys.readouterr().out
