"""A session's queue of waiting turns is bounded: through a real gateway process, a client
that submits faster than its turns run is refused once ``MAX_QUEUED_TURNS`` wait."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hermes_es.aggregates.turns import MAX_QUEUED_TURNS
from hermes_es.gateway import protocol as p
from hermes_es.gateway.client import GatewayError
from tests.gateway.conftest import GatewayProcess, SlowModel, model_config, write_config


def test_a_full_queue_is_refused_over_the_protocol_and_drains(
    home: Path, gateway: GatewayProcess, slow_model: SlowModel
) -> None:
    """One turn held by the model, 100 more waiting: the next submission is answered with
    ``4009`` naming the limit and nothing of it is stored; a queued one resubmitted is still
    its duplicate; once the held turn is released and the queue ran, a new one is admitted."""
    write_config(home, model_config(slow_model))
    handle = gateway.start()
    with handle.connect() as client:
        sid = client.call("session.create", {})["session_id"]

        def submit(sub: str, text: str) -> dict[str, object]:
            params = {"session_id": sid, "submission_id": sub, "text": text}
            answer: dict[str, object] = client.call("prompt.submit", params)
            return answer

        assert submit("held", "SLOW hold")["turn"] == 1
        assert slow_model.arrived.wait(30)
        for n in range(MAX_QUEUED_TURNS):
            submit(f"q{n}", f"queued {n}")
        with pytest.raises(GatewayError) as refused:
            submit("extra", "refused one")
        assert refused.value.code == p.REFUSED
        assert f"at most {MAX_QUEUED_TURNS}" in refused.value.message
        again = submit("q7", "queued 7")
        assert (again["turn"], again["duplicate"]) == (9, True)
        slow_model.release.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if slow_model.count(f"queued {MAX_QUEUED_TURNS - 1}"):
                break
            time.sleep(0.1)
        assert slow_model.count(f"queued {MAX_QUEUED_TURNS - 1}") == 1
        admitted = submit("extra", "admitted later")  # the refusal kept nothing of its id
        assert (admitted["turn"], admitted["duplicate"]) == (MAX_QUEUED_TURNS + 2, False)
        while time.monotonic() < deadline and not slow_model.count("admitted later"):
            time.sleep(0.1)
    assert slow_model.count("admitted later") == 1
    assert slow_model.count("refused one") == 0  # never stored, never run
