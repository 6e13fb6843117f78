"""The pure decoder: the language-neutral vectors (as sdk/go/decode_test.go reads them) and
round trips of every scheme."""

import json
import os
import shutil
import subprocess

import pytest

import seqsvr
from seqsvr.conformance.vectors import check_vectors
from seqsvr.decode import Fields, LayoutSpec, decode, spec_of

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
VECTORS = os.path.join(ROOT, "tests", "conformance", "decode-vectors.json")


def test_every_decode_vector_passes():
    checked, failures = check_vectors(VECTORS)
    with open(VECTORS) as fh:
        v = json.load(fh)
    assert len(v["decode"]) >= 30
    assert checked == len(v["decode"]) + len(v["layout_errors"]) + len(v["session_hashes"])
    assert failures == []


def test_a_wrong_expectation_is_caught(tmp_path):
    """The checker itself fails on a vector the decoder does not give (it is not a test that
    cannot fail)."""
    with open(VECTORS) as fh:
        v = json.load(fh)
    v["decode"][0]["expect"]["worker"] += 1
    v["decode"] = v["decode"][:1]
    bad = tmp_path / "v.json"
    bad.write_text(json.dumps(v))
    _, failures = check_vectors(str(bad))
    assert len(failures) == 1 and "worker" in failures[0]


def test_the_seeds_worked_examples():
    now = 1_750_000_000_000
    d = decode(spec_of("snowflake").load(now), "4202499")
    assert (d.worker, d.fields.sequence, d.unix_ms) == (2, 3, 1288834974658)
    d = decode(spec_of("weibo").load(now), 229710323916801)
    assert d.text == "229710323916801"
    layout = spec_of("uuidv7").load(now)
    d = decode(layout, "017F22E2-79B0-7CC3-98C4-DC0C0C07398F")
    assert d.text == "017f22e2-79b0-7cc3-98c4-dc0c0c07398f" and d.worker == 25363
    with pytest.raises(seqsvr.DecodeError, match="version bits"):
        decode(layout, "017f22e2-79b0-4cc3-98c4-dc0c0c07398f")


@pytest.mark.parametrize("spec,fields,worker", [
    (spec_of("snowflake"), Fields(time=5000, worker=1023, sequence=4095), 1023),
    (LayoutSpec("uid-generator", epoch_ms=1_704_067_200_000), Fields(time=77, worker=4_000_000, sequence=8191), 4_000_000),
    (spec_of("weibo"), Fields(time=123, worker=31, business=17, sequence=9), 31),
    (spec_of("rongcloud"), Fields(time=1_750_000_000_000, sequence=12, session_type=3, session_hash=0x3FFFFF), None),
    (spec_of("uuidv7"), Fields(time=1_750_000_000_000, sequence=1, rand=5 << 46 | 99), 5),
    (spec_of("js53"), Fields(time=(1 << 41) - 1, worker=31, sequence=127), 31),
])
def test_decode_round_trips_every_scheme(spec, fields, worker):
    layout = spec.load(1_750_000_000_000)
    id_ = layout.encode(fields)
    text = layout.format(id_)
    d = decode(layout, text)
    assert (d.id, d.fields, d.text, d.worker) == (id_, fields, text, worker)
    if spec.scheme == "js53":
        assert id_ == (1 << 53) - 1


def test_the_encoder_refuses_fields_that_do_not_fit():
    snowflake = spec_of("snowflake").load(1_750_000_000_000)
    with pytest.raises(seqsvr.DecodeError):
        snowflake.encode(Fields(worker=1024))
    with pytest.raises(seqsvr.DecodeError, match="no business field"):
        snowflake.encode(Fields(business=1))


def test_the_vectors_are_the_rust_decoders(tmp_path):
    """With a seqctl built (SEQSVR_SEQCTL, or the usual target dir), the vectors whose layout
    loads today are decoded by `seqctl id decode --json` and must match the file too."""
    seqctl = os.environ.get("SEQSVR_SEQCTL") or os.path.expanduser("~/.cache/seqsvr/target/release/seqctl")
    if not (os.path.isfile(seqctl) and os.access(seqctl, os.X_OK)):
        pytest.skip("no seqctl built")
    with open(VECTORS) as fh:
        v = json.load(fh)
    lines = ["section_size = 100000", "[[sets]]", "id = 0", "uid_begin = 0", "uid_end = 100000000",
             'stores = [{ id = 1, addr = "127.0.0.1:1" }]', 'allocs = ["127.0.0.1:2"]', "[ids]"]
    for name in sorted(v["layouts"]):
        entry = v["layouts"][name]
        if "load_at_ms" in entry:
            continue
        lines.append(f"[ids.schemes.{name}]")
        for k, val in entry["spec"].items():
            if val is not None and val != "":
                lines.append(f"{k} = {json.dumps(val)}")
    cfg = tmp_path / "cluster.toml"
    cfg.write_text("\n".join(lines) + "\n")
    checked = 0
    for case in v["decode"]:
        if "load_at_ms" in v["layouts"][case["layout"]]:
            continue
        p = subprocess.run([seqctl, "--config", str(cfg), "--json", "id", "decode", "--", case["layout"], case["input"]],
                           capture_output=True, text=True, timeout=30)
        if "error" in case:
            assert p.returncode != 0 and f": {case['error']}\n" in p.stderr, (case, p.stderr)
        else:
            assert p.returncode == 0, p.stderr
            rust = json.loads(p.stdout)
            for key, want in case["expect"].items():
                got = rust[key]
                if key == "rand" and got is not None:
                    got = str(got)
                assert got == want, (case["layout"], case["input"], key)
        checked += 1
    assert checked > 20
