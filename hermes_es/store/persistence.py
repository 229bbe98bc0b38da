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
from eventsourcing.utils import Environment, EnvType

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
        """The recorder of reader positions."""
        return ApswTrackingRecorder(self.datastore)

    def process_recorder(self) -> ProcessRecorder:
        """Application and tracking recorder in one."""
        return ApswProcessRecorder(self.datastore)

    def close(self) -> None:
        """Close the datastore's connections."""
        self.datastore.close()
        super().close()
