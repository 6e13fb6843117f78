"""Mutual TLS as the Go and Rust SDKs dial, and the cluster file."""

import datetime
import ipaddress
import os
import time

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import seqsvr
from fakes import Counter, serving, table


class CA:
    def __init__(self, name="test CA"):
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(hours=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False, data_encipherment=False,
                                                  key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, name, server, *dns_names):
        """A certificate and key (PEM): a server's with dns_names and 127.0.0.1, or a client's."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
             .issuer_name(self.cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(hours=1)))
        if server:
            sans = [x509.DNSName(n) for n in dns_names] + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        else:
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        cert = b.sign(self.key, hashes.SHA256())
        return (cert.public_bytes(serialization.Encoding.PEM),
                key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def write(dir_, files):
    out = {}
    for name, data in files.items():
        p = dir_ / name
        p.write_bytes(data)
        out[name] = str(p)
    return out


async def _serve_tls(fakes, ca, *dns_names):
    server_cert, server_key = ca.issue("alloc-0-1", True, *dns_names)
    creds = grpc.ssl_server_credentials([(server_key, server_cert)], root_certificates=ca.pem, require_client_auth=True)
    (f,) = await fakes(1, creds)
    serving(f, Counter(), table(0, 1, (0, 100, f.addr)))
    return f


async def test_mutual_tls_checks_the_alloc_server_name(fakes, tmp_path):
    ca, other = CA(), CA("other CA")
    f = await _serve_tls(fakes, ca, "alloc.seqsvr")
    client_cert, client_key = ca.issue("client", False)
    stranger_cert, stranger_key = other.issue("stranger", False)
    files = write(tmp_path, {"ca.pem": ca.pem, "client.pem": client_cert, "client.key": client_key,
                             "stranger.pem": stranger_cert, "stranger.key": stranger_key, "other.pem": other.pem})

    async def connect(**kw):
        c = await seqsvr.AsyncClient.connect(seqsvr.Options(seeds=[f.addr], **kw), timeout=1.0)
        try:
            return await c.next(5, timeout=1.0)
        finally:
            await c.close()

    good = seqsvr.TLSFiles("seqsvr", files["client.pem"], files["client.key"], files["ca.pem"])
    assert await connect(tls=good) == 1
    refused = {
        "another server name": seqsvr.TLSFiles("not-seqsvr", files["client.pem"], files["client.key"], files["ca.pem"]),
        "a client certificate of another CA": seqsvr.TLSFiles("seqsvr", files["stranger.pem"], files["stranger.key"], files["ca.pem"]),
        "a server the CA bundle does not know": seqsvr.TLSFiles("seqsvr", files["client.pem"], files["client.key"], files["other.pem"]),
    }
    for what, tls in refused.items():
        start = time.monotonic()
        with pytest.raises(seqsvr.Unavailable):
            await connect(tls=tls)
        assert time.monotonic() - start < 1.0, what
    with pytest.raises(seqsvr.Unavailable):
        await connect(plaintext=True)
    assert f.calls["NextBatch"] == 1 and f.calls["Next"] == 0, "only the good client was served"


async def test_the_role_name_is_checked_not_the_address(fakes, tmp_path):
    """A server certificate of the right CA for 127.0.0.1 but without alloc.<server_name> is
    refused: the name checked is the AllocSvr role's."""
    ca = CA()
    f = await _serve_tls(fakes, ca, "store.seqsvr")
    client_cert, client_key = ca.issue("client", False)
    files = write(tmp_path, {"ca.pem": ca.pem, "client.pem": client_cert, "client.key": client_key})
    tls = seqsvr.TLSFiles("seqsvr", files["client.pem"], files["client.key"], files["ca.pem"])
    with pytest.raises(seqsvr.Unavailable):
        await seqsvr.AsyncClient.connect(seqsvr.Options(seeds=[f.addr], tls=tls), timeout=0.5)
    assert f.calls["GetRouteTable"] == 0


def test_unreadable_tls_files_are_invalid_argument(tmp_path):
    tls = seqsvr.TLSFiles("seqsvr", str(tmp_path / "none.pem"), str(tmp_path / "none.key"), str(tmp_path / "ca.pem"))
    with pytest.raises(seqsvr.InvalidArgument) as info:
        seqsvr.AsyncClient(seqsvr.Options(seeds=["127.0.0.1:1"], tls=tls))
    assert "cannot read" in info.value.message


def test_the_cluster_file_gives_seeds_tls_and_schemes(tmp_path):
    (tmp_path / "certs").mkdir()
    cfg = tmp_path / "cluster.toml"
    cfg.write_text("""
section_size = 100000
[[sets]]
id = 0
uid_begin = 0
uid_end = 2147500000
stores = [{ id = 1, addr = "127.0.0.1:7101" }]
allocs = ["127.0.0.1:7201", "127.0.0.1:7202"]
[[sets]]
id = 1
uid_begin = 2147500000
uid_end = 4294900000
allocs = ["127.0.0.1:7211", "127.0.0.1:7201"]
[ids]
max_count = 100000
[ids.schemes.snowflake]
scheme = "snowflake"
[ids.schemes.uid-generator]
scheme = "uid-generator"
epoch_ms = 1735689600000
time_bits = 30
worker_bits = 20
seq_bits = 13
[ids.schemes.rongcloud]
scheme = "rongcloud"
session_uid_begin = 0
session_uid_end = 4294900000
[tls]
server_name = "seqsvr"
client_ca = "certs/client-bundle.pem"
store_ca = "certs/cluster-ca.pem"
""")
    f = seqsvr.ClusterFile.load(str(cfg))
    assert f.seeds() == ["127.0.0.1:7201", "127.0.0.1:7202", "127.0.0.1:7211"]
    assert f.section_size == 100000 and f.max_count == 100000
    assert (f.set_of(42), f.set_of(2147500042), f.set_of(4294900000)) == (0, 1, None)
    o = f.options("c.pem", "c.key")
    assert o.tls.server_name == "seqsvr" and o.tls.ca_file == str(tmp_path / "certs" / "cluster-ca.pem")
    assert not o.plaintext and o.seeds == f.seeds()
    layout = f.layout("uid-generator", 1_750_000_000_000)
    assert layout.bits == "sign 1 + time 30 + worker 20 + sequence 13" and layout.unit == "s"
    assert f.schemes["rongcloud"].session_uids() == (0, 4294900000)
    with pytest.raises(seqsvr.NotFound):
        f.layout("no-such", 1_750_000_000_000)

    # No [tls]: no TLS options; plaintext only when asked for.
    cfg.write_text(cfg.read_text().split("[tls]")[0])
    f = seqsvr.ClusterFile.load(str(cfg))
    with pytest.raises(seqsvr.InvalidArgument) as info:
        f.options("c.pem", "c.key")
    assert "plaintext_options" in info.value.hint
    assert f.plaintext_options().plaintext
    with pytest.raises(seqsvr.InvalidArgument):
        seqsvr.ClusterFile.load(str(tmp_path / "missing.toml"))
