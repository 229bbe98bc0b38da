"""eventsourcing's recorder contract suites, run against its postgres recorders on a real server.

The hermes PostgreSQL backend keeps its event log with these recorders (text originator ids,
the table named ``events``), so the suites run with exactly that configuration; each test gets
a schema of its own in one database.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TypeVar

import pytest
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    ProcessRecorder,
    TrackingRecorder,
)
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
    PostgresFactory,
    PostgresProcessRecorder,
    PostgresRecorder,
    PostgresTrackingRecorder,
)
from eventsourcing.tests import persistence as contract
from eventsourcing.utils import Environment

from tests.pg_server import PgServer

_schemas = itertools.count(1)
R = TypeVar("R", bound=PostgresRecorder)


class _PgCase:
    """Mixin: a datastore on a fresh schema of the run's server, dropped afterwards."""

    server: PgServer
    dbname: str
    schema: str
    datastore: PostgresDatastore
    originator_id_type = "text"

    @pytest.fixture(autouse=True)
    def _server(self, pg_server: PgServer) -> Iterator[None]:
        """Give the case the session's server and a database shared by the module's tests."""
        self.server = pg_server
        self.dbname = "contract"
        if not pg_server.execute(
            "SELECT 1 FROM pg_database WHERE datname = 'contract'", dbname="postgres"
        ):
            pg_server.execute("CREATE DATABASE contract", dbname="postgres")
        yield

    def setUp(self) -> None:
        """Create the test's schema and a datastore on it."""
        self.schema = f"c{next(_schemas)}"
        self.server.execute(f"CREATE SCHEMA {self.schema}", dbname=self.dbname)
        self.datastore = PostgresDatastore(
            self.dbname,
            self.server.host,
            self.server.port,
            self.server.user,
            "",
            schema=self.schema,
            pool_size=4,
            max_overflow=10,
            originator_id_type=self.originator_id_type,  # type: ignore[arg-type]
        )

    def tearDown(self) -> None:
        """Close the pool and drop the schema."""
        self.datastore.close()
        self.server.execute(f"DROP SCHEMA {self.schema} CASCADE", dbname=self.dbname)

    def new_originator_id(self) -> str:
        """Hermes stream ids are text (session ids, ``prompt:…``, ``receipt:…``)."""
        import uuid

        return f"s-{uuid.uuid4().hex}"

    def _made(self, recorder: R) -> R:
        recorder.create_table()
        return recorder


class TestPostgresAggregateRecorder(_PgCase, contract.AggregateRecorderTestCase):
    """The aggregate recorder contract (insert, select, integrity errors, atomic writes)."""

    def create_recorder(self) -> AggregateRecorder:
        """An aggregate recorder on the test's schema."""
        return self._made(PostgresAggregateRecorder(self.datastore, events_table_name="events"))


class TestPostgresApplicationRecorder(_PgCase, contract.ApplicationRecorderTestCase):
    """The application recorder contract (notification log, concurrency, subscriptions)."""

    def create_recorder(self) -> ApplicationRecorder:
        """An application recorder on the test's schema."""
        return self._made(PostgresApplicationRecorder(self.datastore, events_table_name="events"))

    def test_insert_subscribe(self) -> None:
        """A LISTEN/NOTIFY subscription yields committed notifications in order."""
        self.optional_test_insert_subscribe()


class TestPostgresTrackingRecorder(_PgCase, contract.TrackingRecorderTestCase):
    """The tracking recorder contract (positions only move forward; wait)."""

    def create_recorder(self) -> TrackingRecorder:
        """A tracking recorder on the test's schema."""
        return self._made(PostgresTrackingRecorder(self.datastore))


class TestPostgresProcessRecorder(_PgCase, contract.ProcessRecorderTestCase):
    """The process recorder contract (events and tracking in one transaction)."""

    def create_recorder(self) -> ProcessRecorder:
        """A process recorder on the test's schema."""
        return self._made(PostgresProcessRecorder(self.datastore, events_table_name="events"))


class TestPostgresNonInterleaving(_PgCase, contract.NonInterleavingNotificationIDsBaseCase):
    """Two concurrent batches get contiguous, non-interleaved notification ids."""

    def create_recorder(self) -> ApplicationRecorder:
        """An application recorder on the test's schema."""
        return self._made(PostgresApplicationRecorder(self.datastore, events_table_name="events"))


class TestPostgresFactory(_PgCase, contract.InfrastructureFactoryTestCase[PostgresFactory]):
    """eventsourcing's postgres module builds its recorders from the environment it is given."""

    def setUp(self) -> None:
        """An environment naming the postgres module and the run's server."""
        _PgCase.setUp(self)
        self.env = Environment(
            "TestCase",
            {
                "PERSISTENCE_MODULE": "eventsourcing.postgres",
                "POSTGRES_DBNAME": self.dbname,
                "POSTGRES_HOST": self.server.host,
                "POSTGRES_PORT": str(self.server.port),
                "POSTGRES_USER": self.server.user,
                "POSTGRES_PASSWORD": "",
                "POSTGRES_SCHEMA": self.schema,
            },
        )
        contract.InfrastructureFactoryTestCase.setUp(self)

    def tearDown(self) -> None:
        """Close the factory and drop the schema."""
        contract.InfrastructureFactoryTestCase.tearDown(self)
        _PgCase.tearDown(self)

    def expected_factory_class(self) -> type[PostgresFactory]:
        """The factory the module exposes."""
        return PostgresFactory

    def expected_aggregate_recorder_class(self) -> type[AggregateRecorder]:
        """Aggregate (snapshot) recorder class."""
        return PostgresAggregateRecorder

    def expected_application_recorder_class(self) -> type[ApplicationRecorder]:
        """Application recorder class."""
        return PostgresApplicationRecorder

    def expected_tracking_recorder_class(self) -> type[TrackingRecorder]:
        """Default tracking recorder class."""
        return PostgresTrackingRecorder

    def tracking_recorder_subclass(self) -> type[TrackingRecorder]:
        """A subclass the factory must honour."""
        return _SubTrackingRecorder

    def expected_process_recorder_class(self) -> type[ProcessRecorder]:
        """Process recorder class."""
        return PostgresProcessRecorder


class _SubTrackingRecorder(PostgresTrackingRecorder):
    """A tracking recorder subclass, named by argument or by topic to the factory."""
