"""What the SDK reads of a cluster config (config/cluster.toml's format, the file every server
and seqctl read) and how it reaches the cluster: seeds, mutual TLS, options.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from .decode import SESSION_KEYS, DecodeError, Layout, LayoutSpec
from .errors import InvalidArgument, NotFound
import grpc

__all__ = ["ClusterFile", "SetConfig", "SchemeConfig", "TLSFiles", "Options", "alloc_server_name"]


def alloc_server_name(base: str) -> str:
    """The name an AllocSvr's certificate carries for the cluster's server name ``base``."""
    return "alloc." + base


@dataclass
class SetConfig:
    """One ``[[sets]]`` table: a set's uid range [uid_begin, uid_end) and its AllocSvrs."""

    id: int
    uid_begin: int
    uid_end: int
    allocs: List[str]


@dataclass
class SchemeConfig:
    """One ``[ids.schemes.NAME]`` table."""

    name: str
    scheme: str
    epoch_ms: Optional[int] = None
    unit: str = ""
    time_bits: Optional[int] = None
    worker_bits: Optional[int] = None
    seq_bits: Optional[int] = None
    session_uid_begin: Optional[int] = None
    session_uid_end: Optional[int] = None

    @property
    def spec(self) -> LayoutSpec:
        """The scheme's layout as written."""
        return LayoutSpec(self.scheme, self.epoch_ms, self.unit, self.time_bits, self.worker_bits, self.seq_bits)

    def session_uids(self) -> tuple[int, int]:
        """rongcloud's session uid range [begin, end) (default [0, 2^26))."""
        begin = 0 if self.session_uid_begin is None else self.session_uid_begin
        end = SESSION_KEYS if self.session_uid_end is None else self.session_uid_end
        return begin, end


def session_uid(begin: int, end: int, key: int) -> int:
    """The uid whose section's owner issues rongcloud session ``key``'s ids: keys scaled onto the
    range in order, begin + key × (end - begin) / 2^26 (the AllocSvrs' rule)."""
    return begin + (key * (end - begin) >> 26)


@dataclass
class TLSFiles:
    """The client's mutual TLS identity and the CA it checks the AllocSvrs against.

    ``server_name`` is the cluster's ``[tls] server_name``: each AllocSvr's certificate must
    chain to ``ca_file`` (the cluster file's ``store_ca``) and name ``alloc.<server_name>`` (the
    Rust and Go SDKs' rule: addresses are IPs and one CA may issue every role, so the role's name
    is what is checked). ``cert_file``/``key_file``: the application's certificate (chain) and
    key, PEM.
    """

    server_name: str
    cert_file: str
    key_file: str
    ca_file: str

    def credentials(self) -> tuple[grpc.ChannelCredentials, str]:
        """The channel credentials and the name the AllocSvrs' certificates are checked against
        (given to gRPC as ``grpc.ssl_target_name_override``)."""

        def bad(msg: str) -> InvalidArgument:
            return InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, msg,
                                   "give the application's certificate and key (PEM) and the cluster's CA bundle")

        if not self.server_name:
            raise bad("no server name: give the cluster file's [tls] server_name")
        files = {}
        for what, path in (("CA bundle", self.ca_file), ("certificate", self.cert_file), ("key", self.key_file)):
            try:
                with open(path, "rb") as fh:
                    files[what] = fh.read()
            except OSError as e:
                raise bad(f"cannot read the {what} {path}: {e.strerror or e}") from None
        if b"-----BEGIN CERTIFICATE-----" not in files["CA bundle"]:
            raise bad(f"{self.ca_file} holds no PEM certificate")
        if b"-----BEGIN CERTIFICATE-----" not in files["certificate"]:
            raise bad(f"{self.cert_file} holds no PEM certificate")
        if b"PRIVATE KEY-----" not in files["key"]:
            raise bad(f"{self.key_file} holds no PEM private key")
        creds = grpc.ssl_channel_credentials(root_certificates=files["CA bundle"],
                                             private_key=files["key"], certificate_chain=files["certificate"])
        return creds, alloc_server_name(self.server_name)


@dataclass
class Options:
    """Where the cluster is, how to reach it and how the client batches.

    ``seeds`` (AllocSvr ``host:port`` addresses, at least one per set) and one of ``tls`` and
    ``plaintext`` are required. ``plaintext`` dials without TLS (servers run with --insecure):
    never the default; a client with neither refuses to connect. ``ids``: the cluster file's
    schemes (rongcloud sessions then go to their owner from the first call).
    ``coalescing``: concurrent ``next`` calls bound for one AllocSvr ride NextBatch RPCs of at
    most ``max_coalesced`` calls, at most ``max_in_flight`` RPCs per AllocSvr at a time, with at
    most ``max_queued`` calls waiting (one more fails at once with RESOURCE_EXHAUSTED).
    ``default_timeout``: seconds a call without its own ``timeout=`` may take (5).
    ``channel_options``: more gRPC channel options for every connection.
    """

    seeds: Sequence[str]
    tls: Optional[TLSFiles] = None
    plaintext: bool = False
    ids: Optional[Dict[str, SchemeConfig]] = None
    coalescing: bool = True
    max_coalesced: int = 1000
    max_in_flight: int = 2
    max_queued: int = 100_000
    default_timeout: float = 5.0
    channel_options: List[tuple] = field(default_factory=list)


@dataclass
class ClusterFile:
    """A cluster config as the SDK reads it: the sets and their AllocSvrs (the seeds), the id
    schemes (for decoding and for routing rongcloud sessions) and the ``[tls]`` section (the
    server name and the CA the AllocSvrs' certificates chain to). Every other key is ignored."""

    path: str
    section_size: int
    sets: List[SetConfig]
    schemes: Dict[str, SchemeConfig]
    max_count: int = 0
    server_name: Optional[str] = None
    store_ca: Optional[str] = None
    has_tls: bool = False

    @classmethod
    def load(cls, path: str) -> "ClusterFile":
        """Reads a cluster config (raises :class:`InvalidArgument` if it cannot)."""
        try:
            with open(path, "rb") as fh:
                raw = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"cannot read the cluster file {path}: {e}",
                                  "give the cluster file every server reads (config/cluster.toml's format)") from None
        try:
            sets = [SetConfig(int(s.get("id", 0)), int(s["uid_begin"]), int(s["uid_end"]), [str(a) for a in s.get("allocs", [])])
                    for s in raw.get("sets", [])]
            ids = raw.get("ids", {}) or {}
            schemes = {}
            for name, t in (ids.get("schemes", {}) or {}).items():
                schemes[name] = SchemeConfig(
                    name=name, scheme=str(t.get("scheme", "")), epoch_ms=t.get("epoch_ms"), unit=t.get("unit") or "",
                    time_bits=t.get("time_bits"), worker_bits=t.get("worker_bits"), seq_bits=t.get("seq_bits"),
                    session_uid_begin=t.get("session_uid_begin"), session_uid_end=t.get("session_uid_end"))
            tls = raw.get("tls")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"cannot read the cluster file {path}: bad or missing key {e}",
                                  "give the cluster file every server reads (config/cluster.toml's format)") from None
        return cls(path=path, section_size=int(raw.get("section_size", 0)), sets=sets, schemes=schemes,
                   max_count=int(ids.get("max_count", 0)),
                   server_name=(tls or {}).get("server_name"), store_ca=(tls or {}).get("store_ca"),
                   has_tls=tls is not None)

    def seeds(self) -> List[str]:
        """Every set's AllocSvrs, each once, in file order."""
        out: List[str] = []
        for s in self.sets:
            for a in s.allocs:
                if a not in out:
                    out.append(a)
        return out

    def set_of(self, uid: int) -> Optional[int]:
        """The id of the set whose range holds ``uid`` (None: outside every set)."""
        for s in self.sets:
            if s.uid_begin <= uid < s.uid_end:
                return s.id
        return None

    def layout(self, name: str, now_ms: int) -> Layout:
        """The layout of the scheme named ``name`` in ``[ids.schemes]``, loaded at ``now_ms`` as
        the AllocSvrs load it."""
        s = self.schemes.get(name)
        if s is None:
            raise NotFound(grpc.StatusCode.NOT_FOUND, f"no id scheme {name!r} in the cluster config")
        try:
            return s.spec.load(now_ms)
        except DecodeError as e:
            raise InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"ids.schemes.{name}: {e}") from None

    def ca_path(self) -> Optional[str]:
        """The store CA bundle's path (relative paths are relative to the file's directory)."""
        if not self.store_ca:
            return None
        if os.path.isabs(self.store_ca):
            return self.store_ca
        return os.path.join(os.path.dirname(os.path.abspath(self.path)), self.store_ca)

    def options(self, cert_file: str, key_file: str, **kw) -> Options:
        """The options to reach the cluster with the application identity ``cert_file``/``key_file``
        (PEM; e.g. client.pem/client.key of ``seqctl certs init``) over mutual TLS. More keyword
        arguments set the other :class:`Options` fields. A file without a ``[tls]`` section
        describes a plaintext cluster: use :meth:`plaintext_options`."""
        if not self.has_tls:
            raise InvalidArgument(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{self.path} has no [tls] section, so it describes no certificate authority to check the AllocSvrs against",
                "for a cluster served in plaintext (--insecure) use plaintext_options, explicitly")
        tls = TLSFiles(server_name=self.server_name or "", cert_file=cert_file, key_file=key_file, ca_file=self.ca_path() or "")
        return Options(seeds=self.seeds(), tls=tls, ids=dict(self.schemes), **kw)

    def plaintext_options(self, **kw) -> Options:
        """The options to reach the file's cluster without TLS (servers run with --insecure)."""
        return Options(seeds=self.seeds(), plaintext=True, ids=dict(self.schemes), **kw)
