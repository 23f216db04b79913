"""Fixtures of the end-to-end suites."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import free_port


@pytest.fixture(scope="session")
def downstream_mysql_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBInstance]:
    """A private MariaDB (its own datadir and port) started once per test run and
    stopped at the end; use :func:`downstream_mysql`, which restarts it if needed."""
    server = MariaDBInstance(tmp_path_factory.mktemp("downstream-mariadb"), free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def downstream_mysql(downstream_mysql_server: MariaDBInstance) -> MariaDBInstance:
    """The downstream MariaDB of a test, running (restarted if an earlier test left it
    stopped or killed). Tests may stop, kill and start it; each uses databases of its
    own (``unique_name``) and drops them."""
    downstream_mysql_server.start()
    return downstream_mysql_server
