"""The one test double of these tests: an in-process AllocSvr (a real grpc.aio server on a
loopback port) whose answers a test scripts through its hooks. Hooks left None answer
UNIMPLEMENTED, except GetRouteTable, which answers ``table``."""

from __future__ import annotations

import asyncio
import collections
from typing import Callable, Optional

import grpc
import grpc.aio

from seqsvr.errors import NO_FORWARD_METADATA, ROUTE_TABLE_METADATA
from seqsvr.v1 import seq_pb2 as pb
from seqsvr.v1 import seq_pb2_grpc as pb_grpc


class FakeAlloc(pb_grpc.SeqServiceServicer, pb_grpc.IdServiceServicer):
    def __init__(self):
        self.addr = ""
        self.table: Optional[pb.RouteTable] = None
        self.calls = collections.Counter()
        self.no_forward = collections.Counter()
        self.next: Optional[Callable] = None
        self.next_batch: Optional[Callable] = None
        self.current: Optional[Callable] = None
        self.next_ids: Optional[Callable] = None
        self.server: Optional[grpc.aio.Server] = None

    async def start(self, credentials: Optional[grpc.ServerCredentials] = None) -> "FakeAlloc":
        self.server = grpc.aio.server()
        pb_grpc.add_SeqServiceServicer_to_server(self, self.server)
        pb_grpc.add_IdServiceServicer_to_server(self, self.server)
        if credentials is None:
            port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            port = self.server.add_secure_port("127.0.0.1:0", credentials)
        self.addr = f"127.0.0.1:{port}"
        await self.server.start()
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)

    def _count(self, context, method: str) -> None:
        self.calls[method] += 1
        md = dict(context.invocation_metadata() or ())
        if md.get(NO_FORWARD_METADATA) == "1":
            self.no_forward[method] += 1

    async def GetRouteTable(self, request, context):
        self._count(context, "GetRouteTable")
        if self.table is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no route table yet")
        return pb.GetRouteTableResponse(route_table=self.table)

    async def _hook(self, hook, method, request, context):
        self._count(context, method)
        if hook is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, method)
        return await hook(request, context)

    async def Next(self, request, context):
        return await self._hook(self.next, "Next", request, context)

    async def NextBatch(self, request, context):
        return await self._hook(self.next_batch, "NextBatch", request, context)

    async def Current(self, request, context):
        return await self._hook(self.current, "Current", request, context)

    async def NextIds(self, request, context):
        return await self._hook(self.next_ids, "NextIds", request, context)


async def not_owner(context, table: pb.RouteTable):
    """The AllocSvr's NOT_OWNER answer: FAILED_PRECONDITION with the table in the trailers."""
    await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                        f"NOT_OWNER: section is not served here (route table v{table.version})",
                        trailing_metadata=((ROUTE_TABLE_METADATA, table.SerializeToString()),))


def table(set_id: int, version: int, *entries) -> pb.RouteTable:
    """A route table of set ``set_id`` over uids [set*1000, (set+1)*1000) of 10-uid sections,
    entries given as (begin, end, addr) triples."""
    t = pb.RouteTable(set_id=set_id, version=version, uid_begin=set_id * 1000, uid_end=(set_id + 1) * 1000, section_size=10)
    for begin, end, addr in entries:
        t.entries.add(section_begin=begin, section_end=end, addr=addr)
    return t


class Counter:
    """A fake AllocSvr's per-uid sequences (in request order within a batch)."""

    def __init__(self):
        self.seqs = collections.Counter()

    def take(self, uid: int) -> int:
        self.seqs[uid] += 1
        return self.seqs[uid]


def serving(f: FakeAlloc, counter: Counter, t: pb.RouteTable) -> FakeAlloc:
    """f serves Next and NextBatch from counter for the uids t gives it, NOT_OWNER with t else."""

    def mine(uid: int) -> bool:
        for e in t.entries:
            if e.section_begin <= uid // t.section_size < e.section_end and e.addr == f.addr:
                return True
        return False

    async def nxt(r, context):
        if not mine(r.uid):
            await not_owner(context, t)
        return pb.NextResponse(seq=counter.take(r.uid))

    async def batch(r, context):
        if not all(mine(u) for u in r.uids):
            await not_owner(context, t)
        return pb.NextBatchResponse(seqs=[counter.take(u) for u in r.uids])

    f.table = t
    f.next, f.next_batch = nxt, batch
    return f


async def eventually(cond: Callable[[], bool], what: str, limit: float = 10.0) -> None:
    """Polls cond until it holds (a condition wait, not a sleep as synchronisation)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + limit
    while not cond():
        if loop.time() > until:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.001)
