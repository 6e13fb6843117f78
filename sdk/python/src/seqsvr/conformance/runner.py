"""The Python SDK's conformance runner (issue 32): the protocol of tests/conformance/README.md
over tests/conformance/cases.json, through the SDK's public API only.

    python -m seqsvr.conformance static --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY \\
                                        --foreign-cert PEM --foreign-key KEY --out DIR
    python -m seqsvr.conformance load   --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY --out DIR

``static`` runs every case without ``"phase": "load"``, one after the other (exit 0: all passed,
1: one failed, 2: it could not run). ``load`` runs the case with ``"phase": "load"`` until
DIR/stop exists (or SIGINT/SIGTERM), waits for the calls in flight, closes the client and exits
0 (1: it could not start). Both write DIR/results.jsonl (static starts it afresh, load adds its
line, so one DIR can take a static run and then a load run) and, for the concurrent_next and
fault_load cases, DIR/NAME.history.jsonl in seqcheck's format
(crates/seqsvr-check/src/history.rs), one line written and flushed as each call completes.

The runner never retries a call itself: the SDK's own retries are what is being tested.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from typing import Dict, List, Optional, Sequence

import grpc

from .. import errors as E
from ..client import AsyncClient, Session
from ..config import ClusterFile
from ..decode import RONGCLOUD, decode_id, session_hash_of
from ..errors import SeqsvrError
from .vectors import check_vectors

#: Bounds each call of the static cases (the SDK retries within it).
CALL_TIMEOUT = 10.0
#: Bounds each call under faults: longer than a lease (5 s in the dev cluster) plus the
#: hand-over, so most calls ride out a kill.
LOAD_CALL_TIMEOUT = 15.0
#: How long a refused_connection client has to fail.
REFUSE_WITHIN = 3.0
#: How often load mode looks for DIR/stop (the protocol: at least every 100 ms).
STOP_POLL = 0.05


class CaseError(Exception):
    """A case that did not pass: its message is the result's detail."""


def outcome_of(uids: Sequence[int], values: Optional[Sequence[int]], err: Optional[BaseException]) -> dict:
    """What a call's answer is in a history: ok with one value per uid, fail only for
    INVALID_ARGUMENT and NOT_FOUND (never applied), unknown for every other error (it may have
    been applied), malformed for an answer with another number of values than uids."""
    if err is None:
        if values is None or len(values) != len(uids):
            return {"type": "malformed", "reason": f"{0 if values is None else len(values)} values for {len(uids)} uids"}
        return {"type": "ok", "values": list(values)}
    code = err.code if isinstance(err, SeqsvrError) else grpc.StatusCode.UNKNOWN
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND):
        return {"type": "fail", "code": code.name}
    return {"type": "unknown", "reason": str(err)}


class History:
    """One case's history file, a line written and flushed as each call completes."""

    def __init__(self, path: str):
        self.path = path
        self._fh = open(path, "w", encoding="utf-8")
        self.n = 0

    def record(self, client: int, set_id: int, uids: Sequence[int], invoke_ns: int, complete_ns: int, outcome: dict) -> None:
        op = {"client": client, "set": set_id, "uids": list(uids), "invoke_ns": invoke_ns,
              "complete_ns": complete_ns, "outcome": outcome}
        self._fh.write(json.dumps(op, separators=(",", ":")) + "\n")
        self._fh.flush()
        self.n += 1

    def close(self) -> None:
        self._fh.close()


class PerCaller:
    """One caller's own last value per uid: each must be above the one before."""

    def __init__(self):
        self.last: Dict[int, int] = {}

    def add(self, uid: int, value: int) -> Optional[str]:
        prev = self.last.get(uid)
        self.last[uid] = value
        if prev is not None and value <= prev:
            return f"uid {uid}: {value} after {prev}"
        return None


class Runner:
    def __init__(self, args, cases_path: str, cluster: ClusterFile):
        self.args = args
        self.cases_dir = os.path.dirname(os.path.abspath(cases_path))
        self.cluster = cluster
        self.out = args.out
        self.start = time.monotonic_ns()
        self.client: Optional[AsyncClient] = None
        self.connect_error: Optional[BaseException] = None
        self.stop = asyncio.Event()

    def now(self) -> int:
        return time.monotonic_ns() - self.start

    def set_of(self, uid: int) -> int:
        s = self.cluster.set_of(uid)
        return 0 if s is None else s

    def options(self, cert: str, key: str):
        return self.cluster.options(cert, key)

    async def connect(self) -> None:
        try:
            self.client = await AsyncClient.connect(self.options(self.args.cert, self.args.key), timeout=CALL_TIMEOUT)
        except SeqsvrError as e:
            self.connect_error = e

    def need_client(self) -> AsyncClient:
        if self.client is None:
            raise CaseError(f"the client could not connect: {self.connect_error}")
        return self.client

    async def run(self, case: dict) -> dict:
        kind = case.get("kind")
        fn = {
            "concurrent_next": self.concurrent_next, "batch_order": self.batch_order,
            "current_after_next": self.current_after_next, "error": self.error_case,
            "refused_connection": self.refused_connection, "decode_vectors": self.decode_vectors,
            "ids_decode": self.ids_decode, "fault_load": self.fault_load,
        }.get(kind)
        try:
            if fn is None:
                raise CaseError(f"unknown kind {kind!r}")
            detail = await fn(case)
            return {"case": case["name"], "ok": True, "detail": detail}
        except CaseError as e:
            return {"case": case["name"], "ok": False, "detail": str(e)}
        except SeqsvrError as e:
            return {"case": case["name"], "ok": False, "detail": f"{type(e).__name__}: {e}"}
        except Exception as e:  # a bug of the runner or the SDK: say so rather than crash
            return {"case": case["name"], "ok": False, "detail": f"{type(e).__name__}: {e}"}

    # -- the kinds ----------------------------------------------------------------------------

    async def concurrent_next(self, case: dict) -> str:
        client = self.need_client()
        uids, callers, calls = case["uids"], case["callers"], case["calls_per_caller"]
        if not uids or callers <= 0 or calls <= 0:
            raise CaseError("the case needs uids, callers and calls_per_caller")
        h = History(os.path.join(self.out, case["name"] + ".history.jsonl"))
        problems: List[str] = []
        tally = {"ok": 0, "failed": 0}

        async def caller(c: int) -> None:
            own = PerCaller()
            for k in range(calls):
                uid = uids[(c + k) % len(uids)]
                invoke = self.now()
                try:
                    v = await client.next(uid, timeout=CALL_TIMEOUT)
                    err = None
                except SeqsvrError as e:
                    v, err = None, e
                complete = self.now()
                out = outcome_of([uid], None if v is None else [v], err)
                h.record(c, self.set_of(uid), [uid], invoke, complete, out)
                if err is not None:
                    tally["failed"] += 1
                    problems.append(f"caller {c}: next({uid}) failed: {err}")
                    continue
                tally["ok"] += 1
                bad = own.add(uid, v)
                if bad:
                    problems.append(f"caller {c}: its own values not increasing: {bad}")

        try:
            await asyncio.gather(*(caller(c) for c in range(callers)))
        finally:
            h.close()
        if problems:
            raise CaseError(f"{tally['ok']} ok, {tally['failed']} failed; " + "; ".join(problems[:5]))
        return (f"{callers} callers x {calls} calls over {uids}: all {tally['ok']} ok, each caller's own values "
                f"per uid increasing; history {case['name']}.history.jsonl")

    async def batch_order(self, case: dict) -> str:
        client = self.need_client()
        uids = case["uids"]
        first = await client.next_batch(uids, timeout=CALL_TIMEOUT)
        second = await client.next_batch(uids, timeout=CALL_TIMEOUT)
        for name, values in (("first", first), ("second", second)):
            if len(values) != len(uids):
                raise CaseError(f"the {name} call answered {len(values)} values for {len(uids)} uids: {values}")
            for i in range(len(uids)):
                for j in range(i + 1, len(uids)):
                    if uids[i] == uids[j] and not values[i] < values[j]:
                        raise CaseError(f"the {name} call: uid {uids[i]} at places {i} and {j} got {values[i]} and {values[j]}: {values}")
        for uid in set(uids):
            top = max(v for u, v in zip(uids, first) if u == uid)
            low = min(v for u, v in zip(uids, second) if u == uid)
            if low <= top:
                raise CaseError(f"uid {uid}: the second call's {low} is not above the first call's {top} (first {first}, second {second})")
        return f"next_batch({uids}) = {first}, then {second}"

    async def current_after_next(self, case: dict) -> str:
        client = self.need_client()
        seen = []
        for uid in case["uids"]:
            v = await client.next(uid, timeout=CALL_TIMEOUT)
            cur = await client.current(uid, timeout=CALL_TIMEOUT)
            if cur != v:
                raise CaseError(f"uid {uid}: next = {v}, then current = {cur}")
            seen.append(f"{uid}: next {v}, current {cur}")
        return "; ".join(seen)

    async def error_case(self, case: dict) -> str:
        client = self.need_client()
        call, want = case["call"], case["code"]
        op = call.get("op")
        if op == "next":
            coro = client.next(call["uid"], timeout=CALL_TIMEOUT)
        elif op == "next_batch":
            coro = client.next_batch(call["uids"], timeout=CALL_TIMEOUT)
        elif op == "next_ids":
            coro = client.next_ids(call["scheme"], call["count"], timeout=CALL_TIMEOUT)
        else:
            raise CaseError(f"unknown op {op!r}")
        try:
            got = await coro
        except SeqsvrError as e:
            cls = getattr(E, "".join(w.capitalize() for w in want.split("_")), None)
            if e.code.name != want:
                raise CaseError(f"{op} failed with {e.code.name} ({e.message}), want {want}")
            if cls is not None and not isinstance(e, cls):
                raise CaseError(f"{op} failed with {e.code.name} as {type(e).__name__}, not seqsvr.{cls.__name__}")
            if not e.message:
                raise CaseError(f"{op} failed with {want} but an empty message")
            error = e
        else:
            raise CaseError(f"{op} {call} succeeded ({got}), want {want}")
        after = await client.next(42, timeout=CALL_TIMEOUT)
        return f"{type(error).__name__} {error.code.name}: {error.message!r} (hint: {error.hint}); next(42) after it = {after}"

    async def refused_connection(self, case: dict) -> str:
        which = case.get("certificate")
        if which == "own":
            cert, key = self.args.cert, self.args.key
        elif which == "foreign":
            cert, key = self.args.foreign_cert, self.args.foreign_key
            if not cert or not key:
                raise CaseError("no --foreign-cert/--foreign-key given")
        else:
            raise CaseError(f"unknown certificate {which!r} (own or foreign)")
        opts = self.options(cert, key)
        prefix = case.get("server_name_prefix", "")
        if prefix:
            opts.tls.server_name = prefix + opts.tls.server_name
        began = time.monotonic()
        until = began + REFUSE_WITHIN
        try:
            c = await AsyncClient.connect(opts, timeout=REFUSE_WITHIN)
        except SeqsvrError as e:
            how = f"connect failed after {time.monotonic() - began:.3f} s: {e}"
        else:
            try:
                v = await c.next(42, timeout=max(until - time.monotonic(), 0.001))
            except SeqsvrError as e:
                how = f"connected, but next(42) failed after {time.monotonic() - began:.3f} s: {e}"
            else:
                raise CaseError(f"the client (certificate {which}, server name {opts.tls.server_name}) was served: next(42) = {v}")
            finally:
                await c.close()
        took = time.monotonic() - began
        if took > REFUSE_WITHIN + 0.5:
            raise CaseError(f"refused, but only after {took:.3f} s: {how}")
        if self.client is None:
            raise CaseError(f"refused ({how}), but the runner's own client could not connect either "
                            f"({self.connect_error}): the refusal proves nothing")
        try:
            await self.client.next(42, timeout=CALL_TIMEOUT)
        except SeqsvrError as e:
            raise CaseError(f"refused ({how}), but the runner's own client's next(42) failed too: {e}")
        return f"certificate {which}, server name {opts.tls.server_name}: {how}"

    async def decode_vectors(self, case: dict) -> str:
        path = os.path.join(self.cases_dir, case["file"])
        checked, failures = check_vectors(path)
        if failures:
            raise CaseError(f"{len(failures)} of {checked} vectors failed: " + "; ".join(failures[:5]))
        if checked == 0:
            raise CaseError(f"{path} holds no vectors")
        return f"all {checked} vectors of {case['file']} (decode, layout errors, session hashes) pass"

    async def ids_decode(self, case: dict) -> str:
        client = self.need_client()
        count = case.get("count", 0)
        if not count:
            raise CaseError("the case has no count")
        names = sorted(self.cluster.schemes)
        if not names:
            raise CaseError("the cluster file has no [ids.schemes]")
        seen = []
        for name in names:
            scheme = self.cluster.schemes[name].scheme
            layout = self.cluster.layout(name, time.time_ns() // 1_000_000)
            session = None
            if scheme == RONGCLOUD:
                s = case.get("session")
                if not s:
                    raise CaseError(f"{name}: the case has no session for rongcloud")
                session = Session(type=s["type"], id=s["id"])
                ids = await client.next_session_ids(name, count, session, timeout=CALL_TIMEOUT)
            else:
                ids = await client.next_ids(name, count, timeout=CALL_TIMEOUT)
            if len(ids) != count:
                raise CaseError(f"{name}: asked for {count} ids, got {len(ids)}")
            first = None
            for i, id_ in enumerate(ids.ids):
                try:
                    d = decode_id(layout, id_)
                except ValueError as e:
                    raise CaseError(f"{name}: id {id_} does not decode: {e}") from None
                if session is not None:
                    want = session_hash_of(session.id)
                    if d.worker is not None or d.fields.session_type != session.type or d.fields.session_hash != want:
                        raise CaseError(f"{name}: id {d.text} decodes to worker {d.worker}, session type {d.fields.session_type}, "
                                        f"hash {d.fields.session_hash}; want no worker, type {session.type}, hash {want}")
                elif d.worker is None or d.worker != ids.worker_id:
                    raise CaseError(f"{name}: id {d.text} carries worker {d.worker}, the answer names {ids.worker_id}")
                if i > 0 and id_ <= ids.ids[i - 1]:
                    raise CaseError(f"{name}: id {id_} is not above {ids.ids[i - 1]}")
                if first is None:
                    first = d
            who = (f"session type {first.fields.session_type} hash {first.fields.session_hash}" if session is not None
                   else f"worker {ids.worker_id}")
            seen.append(f"{name}: {len(ids)} ids, {who}, first {first.text} ({first.time_rfc3339})")
        return "; ".join(seen)

    async def fault_load(self, case: dict) -> str:
        client = self.need_client()
        uids, callers, every = case.get("uids") or [], case.get("callers", 0), case.get("batch_every", 0)
        if callers <= 0 or not uids:
            raise CaseError("the case needs callers and uids")
        h = History(os.path.join(self.out, case["name"] + ".history.jsonl"))
        tally = {"ok": 0, "fail": 0, "unknown": 0, "malformed": 0}
        problems: List[str] = []
        last_unknown = [""]

        async def caller(c: int) -> None:
            own = PerCaller()
            i = 0
            while not self.stop.is_set():
                if every > 0 and (i + 1) % every == 0:
                    call_uids = list(uids)
                    invoke = self.now()
                    try:
                        values, err = await client.next_batch(call_uids, timeout=LOAD_CALL_TIMEOUT), None
                    except SeqsvrError as e:
                        values, err = None, e
                else:
                    call_uids = [uids[(c + i) % len(uids)]]
                    invoke = self.now()
                    try:
                        values, err = [await client.next(call_uids[0], timeout=LOAD_CALL_TIMEOUT)], None
                    except SeqsvrError as e:
                        values, err = None, e
                complete = self.now()
                i += 1
                out = outcome_of(call_uids, values, err)
                h.record(c, self.set_of(call_uids[0]), call_uids, invoke, complete, out)
                tally[out["type"]] += 1
                if out["type"] == "ok":
                    for uid, v in zip(call_uids, values):
                        bad = own.add(uid, v)
                        if bad and len(problems) < 10:
                            problems.append(f"caller {c}: its own values not increasing: {bad}")
                elif out["type"] == "fail":
                    if len(problems) < 10:
                        problems.append(f"caller {c}: {call_uids} failed as never applied: {err}")
                elif out["type"] == "unknown":
                    last_unknown[0] = out["reason"]
                else:
                    problems.append(f"caller {c}: {call_uids}: {out['reason']}")

        try:
            await asyncio.gather(*(caller(c) for c in range(callers)))
        finally:
            h.close()
        counts = (f"{sum(tally.values())} calls: {tally['ok']} ok, {tally['unknown']} unknown, {tally['fail']} fail, "
                  f"{tally['malformed']} malformed")
        if last_unknown[0]:
            counts += f" (an unknown: {last_unknown[0]})"
        if problems:
            raise CaseError(f"{counts}; " + "; ".join(problems))
        if tally["ok"] == 0:
            raise CaseError(f"{counts}: no call succeeded")
        return f"{callers} callers over {uids} (every {every}-th a batch): {counts}; history {case['name']}.history.jsonl"


def _parser(mode: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m seqsvr.conformance {mode}",
                                description="seqsvr's SDK conformance runner (tests/conformance/README.md)")
    p.add_argument("--cases", required=True, help="cases.json")
    p.add_argument("--cluster", required=True, help="the cluster file every server reads")
    p.add_argument("--cert", required=True, help="the application's certificate (PEM)")
    p.add_argument("--key", required=True, help="the application's key (PEM)")
    if mode == "static":
        p.add_argument("--foreign-cert", required=True, help="a certificate of a CA the cluster does not know")
        p.add_argument("--foreign-key", required=True)
    p.add_argument("--out", required=True, help="the directory results.jsonl and the histories go to")
    return p


USAGE = """usage:
  python -m seqsvr.conformance static --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY \\
                                      --foreign-cert PEM --foreign-key KEY --out DIR
  python -m seqsvr.conformance load   --cases FILE --cluster CLUSTER_TOML --cert PEM --key KEY --out DIR"""


def main(argv: Optional[List[str]] = None) -> int:
    """The runner's command line; returns its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("static", "load"):
        print(USAGE, file=sys.stderr)
        return 2
    mode = argv[0]
    cant = 2 if mode == "static" else 1
    try:
        args = _parser(mode).parse_args(argv[1:])
    except SystemExit as e:
        return 0 if e.code == 0 else cant
    try:
        with open(args.cases, encoding="utf-8") as fh:
            cases = json.load(fh)["cases"]
        cluster = ClusterFile.load(args.cluster)
        os.makedirs(args.out, exist_ok=True)
        for path in (args.cert, args.key) + ((args.foreign_cert, args.foreign_key) if mode == "static" else ()):
            with open(path, "rb"):
                pass
        cluster.options(args.cert, args.key).tls.credentials()
    except (OSError, ValueError, KeyError, TypeError, SeqsvrError) as e:
        print(f"cannot run: {e}", file=sys.stderr)
        return cant
    return asyncio.run(_static(args, cases, cluster) if mode == "static" else _load(args, cases, cluster))


async def _static(args, cases: List[dict], cluster: ClusterFile) -> int:
    r = Runner(args, args.cases, cluster)
    results = open(os.path.join(args.out, "results.jsonl"), "w", encoding="utf-8")
    await r.connect()
    if r.client is None:
        print(f"warning: the client could not connect: {r.connect_error}", file=sys.stderr)
    failed = 0
    try:
        for case in cases:
            if case.get("phase") == "load":
                continue
            res = await r.run(case)
            results.write(json.dumps(res) + "\n")
            results.flush()
            print(f"{'ok  ' if res['ok'] else 'FAIL'} {res['case']}: {res['detail']}", file=sys.stderr)
            if not res["ok"]:
                failed += 1
    finally:
        results.close()
        if r.client is not None:
            await r.client.close()
    return 1 if failed else 0


async def _load(args, cases: List[dict], cluster: ClusterFile) -> int:
    load = [c for c in cases if c.get("phase") == "load"]
    if len(load) != 1:
        print(f"cannot start: {len(load)} cases with \"phase\": \"load\" (want one)", file=sys.stderr)
        return 1
    case = load[0]
    r = Runner(args, args.cases, cluster)
    await r.connect()
    if r.client is None:
        print(f"cannot start: the client could not connect: {r.connect_error}", file=sys.stderr)
        return 1
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, r.stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    stop_file = os.path.join(args.out, "stop")

    async def watch() -> None:
        while not r.stop.is_set():
            if os.path.exists(stop_file):
                r.stop.set()
                return
            await asyncio.sleep(STOP_POLL)

    watcher = asyncio.ensure_future(watch())
    print(f"load: {case['name']} until {stop_file} exists", file=sys.stderr)
    try:
        res = await r.run(case)
    finally:
        watcher.cancel()
        await r.client.close()
    with open(os.path.join(args.out, "results.jsonl"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(res) + "\n")
    print(f"{'ok  ' if res['ok'] else 'FAIL'} {res['case']}: {res['detail']}", file=sys.stderr)
    return 0
