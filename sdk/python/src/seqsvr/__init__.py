"""seqsvr's Python SDK: per-uid sequence numbers that only go up (``next``, ``next_batch``,
``current``) and globally unique, time-ordered ids (``next_ids``, ``next_session_ids``, and
``decode`` without a server).

- :class:`AsyncClient` (asyncio, grpc.aio) and :class:`Client` (blocking, over it).
- :func:`from_cluster_file` / :class:`ClusterFile`: the cluster file every server reads.
- :class:`SeqsvrError` and its subclasses (one per gRPC code).
- :mod:`seqsvr.decode`: pure decoding of every id scheme.
"""

from .client import AsyncClient, IDs, Session, Stats, connect
from .config import ClusterFile, Options, SchemeConfig, SetConfig, TLSFiles, alloc_server_name
from .decode import DecodeError, Decoded, Fields, Layout, LayoutSpec, decode, decode_id, session_hash_of, spec_of
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, FailedPrecondition, Internal,
                     InvalidArgument, NotFound, NotOwner, OutOfRange, PermissionDenied, ResourceExhausted, SeqsvrError,
                     Unauthenticated, Unavailable, Unimplemented, Unknown, code_hint, retryable)
from .retry import STANDARD_RETRY, Backoff, RetryPolicy
from .sync import Client

__version__ = "0.1.0"


def from_cluster_file(path: str, cert_file: str, key_file: str, **kw) -> Options:
    """The options to reach the cluster the file at ``path`` describes (its sets' allocs are the
    seeds, its ``[tls]`` the CA and server name, its ``[ids]`` the schemes) with the application
    certificate ``cert_file``/``key_file`` over mutual TLS. More keyword arguments set other
    :class:`Options` fields."""
    return ClusterFile.load(path).options(cert_file, key_file, **kw)


__all__ = [
    "AsyncClient", "Client", "connect", "IDs", "Session", "Stats",
    "ClusterFile", "Options", "SchemeConfig", "SetConfig", "TLSFiles", "alloc_server_name", "from_cluster_file",
    "DecodeError", "Decoded", "Fields", "Layout", "LayoutSpec", "decode", "decode_id", "session_hash_of", "spec_of",
    "SeqsvrError", "Aborted", "AlreadyExists", "Cancelled", "DataLoss", "DeadlineExceeded", "FailedPrecondition",
    "Internal", "InvalidArgument", "NotFound", "NotOwner", "OutOfRange", "PermissionDenied", "ResourceExhausted",
    "Unauthenticated", "Unavailable", "Unimplemented", "Unknown", "code_hint", "retryable",
    "RetryPolicy", "Backoff", "STANDARD_RETRY",
]
