"""eventsourcing's own recorder contract suites, run against the APSW recorders on real files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    ProcessRecorder,
    TrackingRecorder,
)
from eventsourcing.tests import persistence as contract

from hermes_es.store.recorder import (
    ApswAggregateRecorder,
    ApswApplicationRecorder,
    ApswDatastore,
    ApswProcessRecorder,
    ApswTrackingRecorder,
)


class _TmpDatastore:
    """Mixin: a fresh state.db file per test, closed and removed afterwards."""

    datastore: ApswDatastore
    _dir: tempfile.TemporaryDirectory[str]

    def setUp(self) -> None:
        """Create a temporary directory holding the test's database file."""
        self._dir = tempfile.TemporaryDirectory(prefix="hermes-recorder-")
        self.datastore = ApswDatastore(Path(self._dir.name) / "state.db")

    def tearDown(self) -> None:
        """Close every connection and remove the database files."""
        self.datastore.close()
        self._dir.cleanup()


class TestApswAggregateRecorder(_TmpDatastore, contract.AggregateRecorderTestCase):
    """The aggregate recorder contract (insert, select, integrity errors, atomic writes)."""

    def create_recorder(self) -> AggregateRecorder:
        """An aggregate recorder over the test's file."""
        return ApswAggregateRecorder(self.datastore)


class TestApswApplicationRecorder(_TmpDatastore, contract.ApplicationRecorderTestCase):
    """The application recorder contract (notification log, concurrency, subscriptions)."""

    def create_recorder(self) -> ApplicationRecorder:
        """An application recorder over the test's file."""
        return ApswApplicationRecorder(self.datastore)

    def test_insert_subscribe(self) -> None:
        """A subscription yields committed notifications in order and stops on request."""
        self.optional_test_insert_subscribe()


class TestApswTrackingRecorder(_TmpDatastore, contract.TrackingRecorderTestCase):
    """The tracking recorder contract (positions only move forward; wait)."""

    def create_recorder(self) -> TrackingRecorder:
        """A tracking recorder over the test's file."""
        return ApswTrackingRecorder(self.datastore)


class TestApswProcessRecorder(_TmpDatastore, contract.ProcessRecorderTestCase):
    """The process recorder contract (events and tracking in one transaction)."""

    def create_recorder(self) -> ProcessRecorder:
        """A process recorder over the test's file."""
        return ApswProcessRecorder(self.datastore)


class TestApswNonInterleaving(_TmpDatastore, contract.NonInterleavingNotificationIDsBaseCase):
    """Two concurrent batches get contiguous, non-interleaved notification ids."""

    def create_recorder(self) -> ApplicationRecorder:
        """An application recorder over the test's file."""
        return ApswApplicationRecorder(self.datastore)


def test_tmp_files_are_removed() -> None:
    """The mixin leaves no database file behind after tearDown."""
    case = TestApswTrackingRecorder("test_insert_tracking")
    case.setUp()
    path = case.datastore.path
    case.create_recorder().max_tracking_id("x")
    assert path.exists()
    case.tearDown()
    assert not path.exists()
    assert not os.path.exists(path.parent)
