"""A small blocking wrapper over :class:`seqsvr.AsyncClient`: :class:`Client`.

It runs one asyncio event loop in a daemon thread of its own and hands every call to it, so
calls from many threads share one client: concurrent ``next`` calls from several threads are
coalesced into NextBatch RPCs as they are on asyncio.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import List, Optional, Sequence

from .client import AsyncClient, IDs, Session, Stats
from .config import Options

__all__ = ["Client"]


class Client:
    """The SDK for blocking code: the methods of :class:`seqsvr.AsyncClient`, each waiting for
    its answer. Safe to use from several threads; one per process is enough.

    ``Client(options, timeout=...)`` connects (learns the route tables from the seeds) before it
    returns, or raises as :meth:`AsyncClient.connect` does. Close it with :meth:`close` (or use
    ``with``). Every call takes ``timeout=`` (seconds, the whole call with its retries).
    """

    def __init__(self, options: Options, *, timeout: Optional[float] = None):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="seqsvr-client", daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self._client: AsyncClient = self._run(AsyncClient.connect(options, timeout=timeout))
        except BaseException:
            self._stop()
            raise

    def _run(self, coro):
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result()
        except (KeyboardInterrupt, concurrent.futures.CancelledError):
            fut.cancel()
            raise

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @property
    def async_client(self) -> AsyncClient:
        """The asyncio client underneath (use it only from its loop: :attr:`loop`)."""
        return self._client

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def next(self, uid: int, *, timeout: Optional[float] = None) -> int:
        """See :meth:`AsyncClient.next`."""
        return self._run(self._client.next(uid, timeout=timeout))

    def next_batch(self, uids: Sequence[int], *, timeout: Optional[float] = None) -> List[int]:
        """See :meth:`AsyncClient.next_batch`."""
        return self._run(self._client.next_batch(list(uids), timeout=timeout))

    def current(self, uid: int, *, timeout: Optional[float] = None) -> int:
        """See :meth:`AsyncClient.current`."""
        return self._run(self._client.current(uid, timeout=timeout))

    def next_ids(self, scheme: str, count: int, *, business: int = 0, timeout: Optional[float] = None) -> IDs:
        """See :meth:`AsyncClient.next_ids`."""
        return self._run(self._client.next_ids(scheme, count, business=business, timeout=timeout))

    def next_session_ids(self, scheme: str, count: int, session: Session, *, timeout: Optional[float] = None) -> IDs:
        """See :meth:`AsyncClient.next_session_ids`."""
        return self._run(self._client.next_session_ids(scheme, count, session, timeout=timeout))

    def decode_on_server(self, scheme: str, text: str, *, timeout: Optional[float] = None):
        """See :meth:`AsyncClient.decode_on_server`."""
        return self._run(self._client.decode_on_server(scheme, text, timeout=timeout))

    def route_tables(self):
        """See :meth:`AsyncClient.route_tables`."""
        return self._run(_value(self._client.route_tables))

    def stats(self) -> Stats:
        """See :meth:`AsyncClient.stats`."""
        return self._run(_value(self._client.stats))

    def close(self) -> None:
        """Closes the client and stops its thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._client.close())
        finally:
            self._stop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


async def _value(fn):
    return fn()
