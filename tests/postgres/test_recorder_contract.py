"""eventsourcing's recorder contract suites, run against its postgres recorders on a real server.

The hermes PostgreSQL backend keeps its event log with these recorders (text originator ids,
the table named ``events``), so the suites run with exactly that configuration; each test gets
a schema of its own in one database.

Every test here has a time limit (``TEST_TIMEOUT_S``, pytest-timeout): a subscription that waits
for a notification that never comes must fail its test, not hang the run. The application
recorder's subscriptions are eventsourcing's with one race closed (``ListenedSubscription``);
hermes itself never subscribes (its gateways follow the log with their own listener,
``store/postgres/notify.py``, which re-reads every 5 s).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import TypeVar

import pytest
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    Notification,
    ProcessRecorder,
    StoredEvent,
    Subscription,
    TrackingRecorder,
)
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
    PostgresFactory,
    PostgresProcessRecorder,
    PostgresRecorder,
    PostgresSubscription,
    PostgresTrackingRecorder,
)
from eventsourcing.tests import persistence as contract
from eventsourcing.utils import Environment
from psycopg.sql import SQL, Identifier

from tests.pg_server import PgServer

TEST_TIMEOUT_S = 120
"""Per-test limit: each test takes well under a second; a hang fails after this long."""

pytestmark = pytest.mark.timeout(TEST_TIMEOUT_S)

_schemas = itertools.count(1)
R = TypeVar("R", bound=PostgresRecorder)


class ListenedSubscription(PostgresSubscription):
    """eventsourcing 9.5.6's LISTEN/NOTIFY subscription, reading the log again once its LISTEN
    is in force.

    The library starts the thread that reads the log (it reads what is there, then waits for
    a notification) before the thread that sends ``LISTEN``; nothing re-reads by itself. A
    commit that lands after the first read but before the ``LISTEN`` notifies nobody, and the
    subscription then waits forever for a row that is already in the table. Under load the
    ``LISTEN`` thread is late often enough: ``test_insert_subscribe`` once hung that way
    (its third event is inserted right after the first two are received). Here the listening
    thread wakes the reader once ``LISTEN`` has run, so such a commit is read then.
    """

    def _before_listen(self) -> None:
        """Called on the listening thread before it sends LISTEN (a test delays it here)."""

    def _listen(self) -> None:
        try:
            with self._recorder.datastore.get_connection() as conn:
                self._before_listen()
                channel = Identifier(self._recorder.channel_name)
                conn.execute(SQL("LISTEN {0}").format(channel))
                self._has_been_notified.set()  # what was committed before the LISTEN
                while not self._has_been_stopped and not self._thread_error:
                    # At most 0.1 s a wait, so that a stop is seen without a notification.
                    for _ in conn.notifies(timeout=0.1, stop_after=1):
                        self._has_been_notified.set()
        except BaseException as exc:
            if self._thread_error is None:
                self._thread_error = exc
            self.stop()


class ListenedRecorder(PostgresApplicationRecorder):
    """eventsourcing's application recorder whose subscriptions are ``ListenedSubscription``."""

    subscription_class: type[ListenedSubscription] = ListenedSubscription

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        """A subscription to notifications after ``gt``."""
        return self.subscription_class(recorder=self, gt=gt, topics=topics)


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
        return self._made(ListenedRecorder(self.datastore, events_table_name="events"))

    def test_insert_subscribe(self) -> None:
        """A LISTEN/NOTIFY subscription yields committed notifications in order."""
        self.optional_test_insert_subscribe()

    def test_commit_before_the_listen_reaches_the_subscription(self) -> None:
        """An event committed after the subscription's first read of the log and before its
        LISTEN is in force is still delivered (eventsourcing's own subscription waits for it
        forever): the LISTEN is held back until that commit is made."""
        first_read, may_listen = threading.Event(), threading.Event()

        class Held(ListenedSubscription):
            def _pull(self) -> None:
                super()._pull()
                first_read.set()

            def _before_listen(self) -> None:
                may_listen.wait(10)

        recorder = self._made(ListenedRecorder(self.datastore, events_table_name="events"))
        recorder.subscription_class = Held
        got: list[Notification] = []
        with recorder.subscribe(gt=0) as subscription:
            assert first_read.wait(10)
            recorder.insert_events([StoredEvent(self.new_originator_id(), 1, "topic", b"x")])
            may_listen.set()

            def receive() -> None:
                for notification in subscription:
                    got.append(notification)
                    break

            receiver = threading.Thread(target=receive, daemon=True)
            receiver.start()
            receiver.join(10)
            subscription.stop()  # ends the receiver too if nothing came
        assert [(n.id, n.topic, n.state) for n in got] == [(1, "topic", b"x")]


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
        return self._made(ListenedRecorder(self.datastore, events_table_name="events"))


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
