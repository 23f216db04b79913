"""``binlog-bridge capture``: feed the pumps from an existing MySQL/MariaDB row binlog.

Reads the source's binlog as a replica (``mysql-replication``), groups row
events by transaction, and writes one binlog per upstream transaction to the
pumps (Prewrite + Commit, timestamps from the TSO) in upstream commit order;
DDL becomes DDL binlogs carrying the table schema after it, as the SQL
producer (:mod:`bridge.producer`) writes them. An initial snapshot copies the
existing rows first. The guide is docs/capture.md.

======================  ====================================================
module                  holds
======================  ====================================================
``config.py``           ``[capture]`` / ``[pump-client]``
``source.py``           server checks, positions, the replication stream
``stream.py``           events -> transactions with encoded row images
``values.py``           decoded values -> the producer's row codec values
``tables.py``           table schemas, ids and DDL (the producer's code)
``snapshot.py``         the initial consistent snapshot
``emitter.py``          two-phase writes to the pumps around the journal
``journal.py``          position, schemas and the pending second phase, on disk
``position.py``         file/offset and GTID sets (MariaDB, MySQL)
``status.py``           ``GET /status``, ``GET /metrics``
``metrics.py``          ``bridge_capture_*``
``app.py``              the run loop, restart and stop
======================  ====================================================
"""

from bridge.apps.capture.app import CaptureApp
from bridge.apps.capture.config import CaptureConfig, CaptureFile

__all__ = ["CaptureApp", "CaptureConfig", "CaptureFile"]
