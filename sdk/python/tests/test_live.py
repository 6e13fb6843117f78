"""The live tests: against a running cluster whose directory SEQSVR_DEV_DIR names
(``sdk/python/build.sh --live``; default data/local of ``scripts/dev-cluster.sh up``). Skipped
unless SEQSVR_LIVE=1. They never start, stop, kill or move anything, and use only the uids
4000000..4099999 (set 0) and 2300000000..2300099999 (set 1) of the dev layout."""

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time

import grpc
import pytest

import seqsvr
from seqsvr.conformance.runner import History, outcome_of

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(os.environ.get("SEQSVR_LIVE") != "1", reason="SEQSVR_LIVE=1 runs the live tests")]

ROOT = os.environ.get("SEQSVR_ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DEV = os.environ.get("SEQSVR_DEV_DIR") or os.path.join(ROOT, "data", "local")
SET0 = list(range(4_000_000, 4_000_000 + 100_000))
SET1 = list(range(2_300_000_000, 2_300_000_000 + 100_000))


def cluster():
    return seqsvr.ClusterFile.load(os.path.join(DEV, "cluster.toml"))


def options(**kw):
    return cluster().options(os.path.join(DEV, "certs", "client.pem"), os.path.join(DEV, "certs", "client.key"), **kw)


@pytest.fixture
async def live():
    c = await seqsvr.AsyncClient.connect(options(), timeout=10)
    yield c
    await c.close()


def test_live_readme_example(tmp_path):
    """examples/readme.py runs as printed from a directory whose data/local is the cluster's."""
    (tmp_path / "data").mkdir()
    os.symlink(os.path.abspath(DEV), tmp_path / "data" / "local")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "sdk", "python", "examples", "readme.py")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    m = re.fullmatch(r"next\(4000042\): (\d+) batch: \[(\d+), (\d+), (\d+)\] snowflake ids: \[(\d+), (\d+), (\d+)\] worker (\d+)\n",
                     p.stdout)
    assert m, p.stdout
    v = [int(x) for x in m.groups()]
    assert v[0] < v[1] < v[2], "the batch's repeats of 4000042 come after next(4000042)"
    assert v[4] < v[5] < v[6]


def check_real_time(ops):
    """I1 on ops: for every uid, a call that started after another completed got a higher
    value, and no value was handed out twice. Returns the first violation, or ''."""
    per_uid = {}
    for op in ops:
        if op["outcome"]["type"] != "ok":
            continue
        for uid, v in zip(op["uids"], op["outcome"]["values"]):
            per_uid.setdefault(uid, []).append((op["invoke_ns"], op["complete_ns"], v))
    for uid, points in per_uid.items():
        values = [p[2] for p in points]
        if len(set(values)) != len(values):
            return f"uid {uid}: a value handed out twice"
        by_complete = sorted(points, key=lambda p: p[1])
        j, best = 0, None
        for inv, _, v in sorted(points, key=lambda p: p[0]):
            while j < len(by_complete) and by_complete[j][1] < inv:
                best = by_complete[j][2] if best is None else max(best, by_complete[j][2])
                j += 1
            if best is not None and v <= best:
                return f"uid {uid}: {v} after {best} had completed"
    return ""


async def test_live_concurrent_callers_are_strictly_increasing(live, tmp_path):
    uids = [SET0[100], SET0[101], SET0[50_000], SET1[100]]
    start = time.monotonic_ns()
    ops = []
    path = tmp_path / "concurrent.history.jsonl"
    h = History(str(path))
    cl = cluster()

    async def caller(c):
        for k in range(30):
            if k % 7 == 6:
                call = [uids[0], uids[3], uids[0]]
                inv = time.monotonic_ns() - start
                values = await live.next_batch(call, timeout=10)
                assert values[0] < values[2]
            else:
                call = [uids[(c + k) % len(uids)]]
                inv = time.monotonic_ns() - start
                values = [await live.next(call[0], timeout=10)]
            done = time.monotonic_ns() - start
            out = outcome_of(call, values, None)
            ops.append({"uids": call, "invoke_ns": inv, "complete_ns": done, "outcome": out})
            h.record(c, cl.set_of(call[0]), call, inv, done, out)

    await asyncio.gather(*(caller(c) for c in range(24)))
    h.close()
    assert len(ops) == 24 * 30
    assert check_real_time(ops) == ""
    assert live.stats().coalesced_rpcs > 0 and live.stats().coalesced_rpcs < live.stats().calls
    for uid in uids:
        top = max(v for op in ops for u, v in zip(op["uids"], op["outcome"]["values"]) if u == uid)
        assert await live.current(uid) >= top
    seqcheck = os.path.expanduser(os.environ.get("SEQSVR_SEQCHECK", "~/.cache/seqsvr/target/release/seqcheck"))
    if os.access(seqcheck, os.X_OK):
        p = subprocess.run([seqcheck, "check", str(path)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr


async def test_live_each_bad_input_has_its_typed_error(live):
    cases = [
        (live.next(4_294_900_000), seqsvr.InvalidArgument),
        (live.next_batch([SET0[7], 4_294_967_295]), seqsvr.InvalidArgument),
        (live.next_batch([]), seqsvr.InvalidArgument),
        (live.next_ids("snowflake", 100_001), seqsvr.InvalidArgument),
        (live.next_ids("snowflake", 0), seqsvr.InvalidArgument),
        (live.next_ids("no-such-scheme", 1), seqsvr.NotFound),
    ]
    for coro, cls in cases:
        with pytest.raises(cls) as info:
            await coro
        assert info.value.message and info.value.code == cls.CODE
    assert await live.next(SET0[7]) > 0


async def test_live_ids_decode_to_the_worker_their_answer_names(live):
    cl = cluster()
    assert cl.schemes
    for name, s in sorted(cl.schemes.items()):
        layout = cl.layout(name, time.time_ns() // 1_000_000)
        if s.scheme == "rongcloud":
            session = seqsvr.Session(type=2, id="python-sdk-live")
            ids = await live.next_session_ids(name, 4, session)
            for id_ in ids:
                d = seqsvr.decode_id(layout, id_)
                assert d.worker is None and d.fields.session_type == 2
                assert d.fields.session_hash == seqsvr.session_hash_of("python-sdk-live")
            again = await live.next_session_ids(name, 2, session)
            assert again.ids[0] > ids.ids[-1], "a session's ids keep increasing"
        else:
            ids = await live.next_ids(name, 4)
            for id_ in ids:
                d = seqsvr.decode_id(layout, id_)
                assert d.worker == ids.worker_id, name
                assert abs(d.unix_ms - time.time() * 1000) < 600_000, f"{name}: {d.time_rfc3339}"
        assert ids.ids == sorted(set(ids.ids)) and len(ids) == 4


async def test_live_an_unknown_certificate_or_server_name_is_refused(tmp_path):
    from test_tls import CA, write

    other = CA("stranger CA")
    cert, key = other.issue("client", False)
    files = write(tmp_path, {"c.pem": cert, "c.key": key})
    stranger = cluster().options(files["c.pem"], files["c.key"])
    wrong_name = options()
    wrong_name.tls.server_name = "not-" + wrong_name.tls.server_name
    for opts in (stranger, wrong_name):
        began = time.monotonic()
        with pytest.raises(seqsvr.SeqsvrError):
            c = await seqsvr.AsyncClient.connect(opts, timeout=3)
            try:
                await c.next(SET0[9], timeout=3)
            finally:
                await c.close()
        assert time.monotonic() - began < 6.5
