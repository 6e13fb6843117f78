import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from fakes import FakeAlloc  # noqa: E402

import seqsvr  # noqa: E402


@pytest.fixture
async def fakes():
    """fakes(n) starts n fake AllocSvrs, stopped when the test ends."""
    started = []

    async def make(n: int = 1, credentials=None):
        out = [await FakeAlloc().start(credentials) for _ in range(n)]
        started.extend(out)
        return out

    yield make
    for f in started:
        await f.stop()


@pytest.fixture
async def plaintext():
    """plaintext(*seeds, **options) connects a plaintext client, closed when the test ends."""
    clients = []

    async def make(*seeds, **kw):
        c = await seqsvr.AsyncClient.connect(seqsvr.Options(seeds=list(seeds), plaintext=True, **kw), timeout=5)
        clients.append(c)
        return c

    yield make
    for c in clients:
        await c.close()
