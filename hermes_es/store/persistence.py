"""The eventsourcing persistence module: ``PERSISTENCE_MODULE=hermes_es.store.persistence``.

Settings (read with the application name as a prefix, like every eventsourcing module):
``APSW_DBNAME`` is the path of state.db.
"""

from __future__ import annotations

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    ProcessRecorder,
    TrackingRecorder,
)
from eventsourcing.utils import Environment, EnvType, resolve_topic

from hermes_es.store.recorder import (
    ApswAggregateRecorder,
    ApswApplicationRecorder,
    ApswDatastore,
    ApswProcessRecorder,
    ApswTrackingRecorder,
)


class ApswFactory(InfrastructureFactory[TrackingRecorder]):
    """Builds APSW recorders over one state.db file."""

    APSW_DBNAME = "APSW_DBNAME"

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        path = self.env.get(self.APSW_DBNAME)
        if not path:
            raise OSError(f"{self.APSW_DBNAME} is not set: name the state.db file")
        self.datastore = ApswDatastore(path)

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        """The recorder for one aggregate sequence."""
        return ApswAggregateRecorder(self.datastore)

    def application_recorder(self) -> ApplicationRecorder:
        """The recorder for the application sequence (the notification log)."""
        return ApswApplicationRecorder(self.datastore)

    def tracking_recorder(
        self, tracking_recorder_class: type[TrackingRecorder] | None = None
    ) -> TrackingRecorder:
        """The recorder of reader positions (a subclass when named by argument or topic)."""
        if tracking_recorder_class is None:
            topic = self.env.get(self.TRACKING_RECORDER_TOPIC)
            tracking_recorder_class = resolve_topic(topic) if topic else ApswTrackingRecorder
        recorder: TrackingRecorder = tracking_recorder_class(self.datastore)  # type: ignore[call-arg]
        return recorder

    def process_recorder(self) -> ProcessRecorder:
        """Application and tracking recorder in one."""
        return ApswProcessRecorder(self.datastore)

    def close(self) -> None:
        """Close the datastore's connections."""
        self.datastore.close()
        super().close()
