"""A loopback TCP proxy that can be cut and restored, or black-holed: "the database went away" or
"the database stopped answering" without touching the shared PostgreSQL server the other tests use.

``black_hole()`` models a network partition: connections stay open and the proxy's kernel keeps
acknowledging what is sent, but nothing is forwarded either way (held, as TCP would retransmit it)
and new connections are accepted but never answered, until ``restore()`` forwards what was held."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine

from service.store.engine import build_engine


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._forwarding = threading.Event()
        self._forwarding.set()

    def black_hole(self) -> None:
        """Stop forwarding (both ways, open and new connections) without closing anything."""
        self._forwarding.clear()

    def restore(self) -> None:
        """Forward again, what was held first."""
        self._forwarding.set()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        """Refuse new connections and cut the open ones."""
        with self._lock:
            if self._listener is not None:
                # shutdown() wakes the thread blocked in accept(); close() alone does not on Linux.
                with contextlib.suppress(OSError):
                    self._listener.shutdown(socket.SHUT_RDWR)
                self._listener.close()
                self._listener = None
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._forwarding.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def proxied_engine(url: str, **engine_options: Any) -> Iterator[tuple[TcpProxy, Engine]]:
    """The service's engine (``build_engine(**engine_options)``) on the local PostgreSQL server of
    ``url`` through a proxy; disposed, and the proxy restored and stopped, at the end."""
    proxy = TcpProxy("127.0.0.1", 5432)
    proxy.start()
    engine = build_engine(url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}"), **engine_options)
    try:
        yield proxy, engine
    finally:
        proxy.restore()
        proxy.stop()
        engine.dispose()
