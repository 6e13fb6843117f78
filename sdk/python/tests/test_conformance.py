"""The conformance runner: its outcome mapping, history format and exit codes, and a whole
static and load run against fake AllocSvrs over mutual TLS (the live run is conformance.sh's)."""

import asyncio
import json
import os
import struct
import threading
import time

import grpc
import pytest

import seqsvr
from fakes import Counter, FakeAlloc
from seqsvr.conformance.runner import History, main, outcome_of
from seqsvr.decode import Fields, spec_of
from seqsvr.v1 import seq_pb2 as pb
from test_tls import CA, write

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CASES = os.path.join(ROOT, "tests", "conformance", "cases.json")
C = grpc.StatusCode


def test_outcomes_are_what_seqcheck_reads():
    assert outcome_of([1, 2], [5, 6], None) == {"type": "ok", "values": [5, 6]}
    assert outcome_of([1, 2], [5], None)["type"] == "malformed"
    for code, want in ((C.INVALID_ARGUMENT, "fail"), (C.NOT_FOUND, "fail"), (C.UNAVAILABLE, "unknown"),
                       (C.DEADLINE_EXCEEDED, "unknown"), (C.RESOURCE_EXHAUSTED, "unknown"), (C.FAILED_PRECONDITION, "unknown")):
        out = outcome_of([1], None, seqsvr.errors.error_for(code, "m"))
        assert out["type"] == want
        if want == "fail":
            assert out == {"type": "fail", "code": code.name}
        else:
            assert out["reason"]


def test_a_history_line_is_written_as_each_call_completes(tmp_path):
    h = History(str(tmp_path / "h.jsonl"))
    h.record(3, 0, [42], 1200, 98000, {"type": "ok", "values": [10007]})
    assert json.loads((tmp_path / "h.jsonl").read_text()) == {
        "client": 3, "set": 0, "uids": [42], "invoke_ns": 1200, "complete_ns": 98000,
        "outcome": {"type": "ok", "values": [10007]}}, "flushed before the file is closed"
    h.close()


def test_bad_arguments_and_files_exit_2_static_1_load(tmp_path):
    assert main([]) == 2
    assert main(["static", "--cases", CASES]) == 2
    assert main(["load", "--cases", CASES]) == 1
    args = ["--cases", str(tmp_path / "none.json"), "--cluster", str(tmp_path / "none.toml"), "--cert", "c", "--key", "k",
            "--out", str(tmp_path / "out")]
    assert main(["static"] + args + ["--foreign-cert", "f", "--foreign-key", "g"]) == 2
    assert main(["load"] + args) == 1


class FakeCluster:
    """Two fake AllocSvrs over mutual TLS (one per set, the dev layout's uid ranges), serving
    sequences from one counter and ids of the cluster file's schemes, on a loop thread."""

    WORKER = 3

    def __init__(self, tmp_path):
        self.ca, other = CA(), CA("foreign CA")
        server_cert, server_key = self.ca.issue("alloc", True, "alloc.seqsvr")
        cert, key = self.ca.issue("client", False)
        fcert, fkey = other.issue("client", False)
        self.files = write(tmp_path, {"ca.pem": self.ca.pem, "client.pem": cert, "client.key": key,
                                      "foreign.pem": fcert, "foreign.key": fkey})
        self.creds = grpc.ssl_server_credentials([(server_key, server_cert)], root_certificates=self.ca.pem,
                                                 require_client_auth=True)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.counter = Counter()
        self.a = self._run(FakeAlloc().start(self.creds))
        self.b = self._run(FakeAlloc().start(self.creds))
        t0 = pb.RouteTable(set_id=0, version=1, uid_begin=0, uid_end=2147500000, section_size=100000)
        t0.entries.add(section_begin=0, section_end=21475, addr=self.a.addr, alloc_id=1)
        t1 = pb.RouteTable(set_id=1, version=1, uid_begin=2147500000, uid_end=4294900000, section_size=100000)
        t1.entries.add(section_begin=21475, section_end=42949, addr=self.b.addr, alloc_id=2)
        self.layouts = {"snowflake": spec_of("snowflake").load(time.time_ns() // 10**6),
                        "uuidv7": spec_of("uuidv7").load(time.time_ns() // 10**6),
                        "rongcloud": spec_of("rongcloud").load(time.time_ns() // 10**6)}
        for f, t in ((self.a, t0), (self.b, t1)):
            self._serve(f, t)
        self.cluster = tmp_path / "cluster.toml"
        self.cluster.write_text(f"""
section_size = 100000
[[sets]]
id = 0
uid_begin = 0
uid_end = 2147500000
allocs = ["{self.a.addr}"]
[[sets]]
id = 1
uid_begin = 2147500000
uid_end = 4294900000
allocs = ["{self.b.addr}"]
[ids]
max_count = 100000
[ids.schemes.snowflake]
scheme = "snowflake"
[ids.schemes.uuidv7]
scheme = "uuidv7"
[ids.schemes.rongcloud]
scheme = "rongcloud"
session_uid_begin = 0
session_uid_end = 4294900000
[tls]
server_name = "seqsvr"
store_ca = "ca.pem"
""")

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def _serve(self, f, t):
        f.table = t

        def check(uids, context):
            for u in uids:
                if not t.uid_begin <= u < t.uid_end:
                    return False
            return True

        async def nxt(r, context):
            if not check([r.uid], context):
                await context.abort(C.INVALID_ARGUMENT, f"uid {r.uid} is not in set {t.set_id}")
            return pb.NextResponse(seq=self.counter.take(r.uid))

        async def batch(r, context):
            if not r.uids:
                await context.abort(C.INVALID_ARGUMENT, "empty batch")
            if not check(r.uids, context):
                await context.abort(C.INVALID_ARGUMENT, "a uid outside this set")
            return pb.NextBatchResponse(seqs=[self.counter.take(u) for u in r.uids])

        async def current(r, context):
            return pb.CurrentResponse(seq=self.counter.seqs[r.uid])

        async def ids(r, context):
            layout = self.layouts.get(r.scheme)
            if layout is None:
                await context.abort(C.NOT_FOUND, f"no id scheme {r.scheme!r}")
            if not 1 <= r.count <= 100000:
                await context.abort(C.INVALID_ARGUMENT, f"count {r.count} is not in 1..=100000")
            now = time.time_ns() // 10**6
            out = []
            for i in range(r.count):
                if r.scheme == "snowflake":
                    out.append(layout.encode(Fields(time=now - layout.epoch_ms, worker=self.WORKER, sequence=i)))
                elif r.scheme == "uuidv7":
                    out.append(layout.encode(Fields(time=now, sequence=i, rand=self.WORKER << 46 | 5)))
                else:
                    h = seqsvr.session_hash_of(r.session_id) if r.session_id else r.session_hash
                    out.append(layout.encode(Fields(time=now, sequence=i, session_type=r.session_type, session_hash=h)))
            if layout.id_bits <= 64:
                return pb.NextIdsResponse(ids64_packed=struct.pack(f">{len(out)}Q", *out), worker_id=self.WORKER)
            return pb.NextIdsResponse(ids128_packed=b"".join(i.to_bytes(16, "big") for i in out),
                                      worker_id=0 if r.scheme == "rongcloud" else self.WORKER, session_uid=7)

        f.next, f.next_batch, f.current, f.next_ids = nxt, batch, current, ids

    def close(self):
        for f in (self.a, self.b):
            self._run(f.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


@pytest.fixture
def fake_cluster(tmp_path):
    fc = FakeCluster(tmp_path)
    yield fc
    fc.close()


def _results(out):
    return {r["case"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def test_a_static_run_passes_every_case_against_fakes(fake_cluster, tmp_path):
    out = tmp_path / "static"
    f = fake_cluster.files
    rc = main(["static", "--cases", CASES, "--cluster", str(fake_cluster.cluster), "--cert", f["client.pem"],
               "--key", f["client.key"], "--foreign-cert", f["foreign.pem"], "--foreign-key", f["foreign.key"],
               "--out", str(out)])
    results = _results(out)
    with open(CASES) as fh:
        names = [c["name"] for c in json.load(fh)["cases"] if c.get("phase") != "load"]
    assert sorted(results) == sorted(names)
    assert {n: r["detail"] for n, r in results.items() if not r["ok"]} == {}
    assert rc == 0
    lines = (out / "concurrent-next-shared-uids.history.jsonl").read_text().splitlines()
    assert len(lines) == 32 * 40
    ops = [json.loads(line) for line in lines]
    assert all(op["outcome"]["type"] == "ok" for op in ops)
    assert {op["set"] for op in ops if op["uids"] == [2147500042]} == {1}
    assert fake_cluster.a.calls["NextBatch"] < 32 * 40 / 2, "concurrent calls were coalesced"


def test_a_static_run_reports_a_failing_case(fake_cluster, tmp_path):
    """A fake that answers current one below next: current-after-next fails, exit 1."""
    async def current(r, context):
        return pb.CurrentResponse(seq=fake_cluster.counter.seqs[r.uid] - 1)

    fake_cluster.a.current = current
    out = tmp_path / "static"
    f = fake_cluster.files
    cases = json.load(open(CASES))
    cases["cases"] = [c for c in cases["cases"] if c["kind"] in ("current_after_next", "batch_order")]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    rc = main(["static", "--cases", str(path), "--cluster", str(fake_cluster.cluster), "--cert", f["client.pem"],
               "--key", f["client.key"], "--foreign-cert", f["foreign.pem"], "--foreign-key", f["foreign.key"],
               "--out", str(out)])
    results = _results(out)
    assert rc == 1
    assert not results["current-after-next"]["ok"] and "current" in results["current-after-next"]["detail"]
    assert results["batch-order-with-repeats"]["ok"]


def test_a_load_run_stops_when_told_and_adds_its_line(fake_cluster, tmp_path):
    out = tmp_path / "load"
    out.mkdir()
    (out / "results.jsonl").write_text('{"case": "earlier", "ok": true, "detail": ""}\n')
    f = fake_cluster.files
    hist = out / "kill-and-move-under-load.history.jsonl"

    def stop_when_busy():
        until = time.monotonic() + 30
        while time.monotonic() < until:
            if hist.exists() and len(hist.read_text().splitlines()) > 200:
                break
            time.sleep(0.01)
        (out / "stop").touch()

    stopper = threading.Thread(target=stop_when_busy)
    stopper.start()
    rc = main(["load", "--cases", CASES, "--cluster", str(fake_cluster.cluster), "--cert", f["client.pem"],
               "--key", f["client.key"], "--out", str(out)])
    stopper.join()
    assert rc == 0
    results = _results(out)
    assert "earlier" in results and results["kill-and-move-under-load"]["ok"], results
    ops = [json.loads(line) for line in hist.read_text().splitlines()]
    assert len(ops) > 200
    batches = [op for op in ops if len(op["uids"]) > 1]
    assert batches and all(op["uids"] == [42, 43, 100042, 2147500042] for op in batches)
    assert {op["client"] for op in ops} == set(range(8))
