"""eventsourcing's own recorder contract suites, run against the APSW recorders on real files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    ProcessRecorder,
    TrackingRecorder,
)
from eventsourcing.tests import persistence as contract
from eventsourcing.utils import Environment

from hermes_es.store.persistence import ApswFactory
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


class _SubTrackingRecorder(ApswTrackingRecorder):
    """A tracking recorder subclass, named by argument or by topic to the factory."""


class TestApswFactory(contract.InfrastructureFactoryTestCase[ApswFactory]):
    """The persistence module builds the APSW recorders and mappers from its environment."""

    _dir: tempfile.TemporaryDirectory[str]

    def setUp(self) -> None:
        """An environment naming this module and a state.db in a temporary directory."""
        self._dir = tempfile.TemporaryDirectory(prefix="hermes-factory-")
        self.env = Environment(
            "TestCase",
            {
                "PERSISTENCE_MODULE": "hermes_es.store.persistence",
                "APSW_DBNAME": str(Path(self._dir.name) / "state.db"),
            },
        )
        super().setUp()

    def tearDown(self) -> None:
        """Close the factory's connections and remove the files."""
        super().tearDown()
        self._dir.cleanup()

    def expected_factory_class(self) -> type[ApswFactory]:
        """The factory the module exposes."""
        return ApswFactory

    def expected_aggregate_recorder_class(self) -> type[AggregateRecorder]:
        """Aggregate (snapshot) recorder class."""
        return ApswAggregateRecorder

    def expected_application_recorder_class(self) -> type[ApplicationRecorder]:
        """Application recorder class."""
        return ApswApplicationRecorder

    def expected_tracking_recorder_class(self) -> type[TrackingRecorder]:
        """Default tracking recorder class."""
        return ApswTrackingRecorder

    def tracking_recorder_subclass(self) -> type[TrackingRecorder]:
        """A subclass the factory must honour."""
        return _SubTrackingRecorder

    def expected_process_recorder_class(self) -> type[ProcessRecorder]:
        """Process recorder class."""
        return ApswProcessRecorder


def test_factory_needs_a_db_name() -> None:
    """Without APSW_DBNAME the factory refuses to start, naming the setting."""
    env = Environment("x", {"PERSISTENCE_MODULE": "hermes_es.store.persistence"})
    with pytest.raises(OSError, match="APSW_DBNAME"):
        ApswFactory(env)


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
