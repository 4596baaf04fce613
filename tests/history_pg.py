"""A real PostgreSQL server for tests, started by the tests themselves through pgserver (its own
binaries: nothing to install or start beforehand; as root it runs the server as a user of its own).

`postgres_url` is the server (one per test session, or per pytest-xdist worker, stopped at the end),
`fresh_postgres_url` a new empty database on it for each test; `new_database` makes one for other
scopes. Both URLs are `postgresql+psycopg://...`, which SQLAlchemy and perf.history.store take as
they are. A test module imports the fixtures it uses:

    from tests.history_pg import fresh_postgres_url, postgres_url  # noqa: F401 (fixtures)
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server for the session: the URL of its `postgres` database."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns at import where XDG_RUNTIME_DIR is unset
        import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("postgres") / "data", cleanup_mode="stop")
    try:
        yield make_url(server.get_uri()).set(drivername="postgresql+psycopg").render_as_string(False)
    finally:
        server.cleanup()


def new_database(server_url: str) -> str:
    """The URL of a new, empty database on the server of `server_url`."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")  # CREATE DATABASE runs outside one
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        engine.dispose()
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> str:
    """A new, empty database for this test."""
    return new_database(postgres_url)
