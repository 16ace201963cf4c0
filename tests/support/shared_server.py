"""One server per backend that many tests share, each test in a namespace of its own.

Most tests need nothing of a server but its calls: a fresh store is not what they prove, and
starting a process per test is most of what they cost. So a test that asks for ``sidecar``
gets, by default, a view of one long-lived server per backend (per pytest-xdist worker) with a
fresh namespace; N1 keeps the tests apart. The view has no stop, kill or start: a test that
needs a fresh store, settings of its own, or a server to stop or kill is marked
``pytest.mark.own_server`` (or uses ``sidecar_factory``).

After each test, :meth:`SharedServer.check_namespaces` fails the test if it left a row in a
namespace that is not its own (``view.namespace`` or one that starts with it and a ``-``),
so a client built without ``namespace=sidecar.namespace`` cannot pass unnoticed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from tests.support.sidecar import Sidecar, StoreSpec
from tests.support.store_dump import StoreReader

__all__ = ["SharedServer", "SharedSidecar", "fresh_namespace"]


def fresh_namespace() -> str:
    """A namespace no other test uses."""
    return f"t-{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class SharedSidecar:
    """What a test sees of a shared server: where it listens, its store and the test's own
    namespace (a fresh :class:`Sidecar` answers ``"default"`` for the same attribute)."""

    store: StoreSpec
    target: str
    tcp_target: str
    namespace: str

    @property
    def backend(self) -> str:
        """ "sqlite", "postgres" or "pgbouncer"."""
        return self.store.backend


@dataclass
class SharedServer:
    """A server started on first use and kept for the session, with the namespaces its
    tests have used so far."""

    server: Sidecar
    seen: set[str] = field(default_factory=set)
    _reader: StoreReader | None = None
    _tables: list[str] = field(default_factory=list)

    def view(self) -> SharedSidecar:
        """A fresh namespace on the running server (started again if a test ended it)."""
        server = self.server
        if server.process is None or server.process.poll() is not None:
            server.start()
        return SharedSidecar(server.store, server.target, server.tcp_target, fresh_namespace())

    def namespaces(self) -> set[str]:
        """Every namespace that has a row in any table of the store."""
        if self._reader is None:
            self._reader = StoreReader(self.server.store)
            self._tables = [t for t in self._reader.tables() if self._has_namespace(t)]
        found: set[str] = set()
        for table in self._tables:
            sql = f"SELECT DISTINCT namespace FROM {self._reader.table(table)}"
            found.update(str(row[0]) for row in self._reader.query(sql))
        return found

    def _has_namespace(self, table: str) -> bool:
        """Whether ``table`` has a namespace column (all but the purge bookkeeping do); read
        once, the schema being fixed once the server has migrated it."""
        assert self._reader is not None
        if self.server.backend == "sqlite":
            rows = self._reader.query(f"PRAGMA table_info({table})")
            return any(row[1] == "namespace" for row in rows)
        schema = self.server.store.pg_schema
        return bool(
            self._reader.query(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = "
                f"'{schema}' AND table_name = '{table}' AND column_name = 'namespace'"
            )
        )

    def check_namespaces(self, view: SharedSidecar) -> list[str]:
        """The namespaces the test behind ``view`` wrote that are not its own (and remember
        all of them, so the next test is judged on what it adds)."""
        new = self.namespaces() - self.seen
        self.seen |= new
        return sorted(
            ns for ns in new if ns != view.namespace and not ns.startswith(f"{view.namespace}-")
        )

    def close(self) -> None:
        """Stop the server and close the store reader."""
        if self._reader is not None:
            self._reader.close()
        self.server.close()
