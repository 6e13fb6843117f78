"""The SDK's errors: one base class, :class:`SeqsvrError`, and one subclass per gRPC code.

Every error the SDK raises is a :class:`SeqsvrError` carrying the gRPC ``code``
(:class:`grpc.StatusCode`), the ``message`` (the server's own words for an answer the server
gave, the SDK's where it failed on its own) and a ``hint`` saying what the caller can do.

The servers' gRPC answers carry no hint field (their messages say what went wrong and, for
load shedding, what to do); the hint is the SDK's: specific where the SDK knows better (its
own queue full, no transport chosen, a uid outside every set), else a short advice per code
(:func:`code_hint`), as the Go SDK gives it.
"""

from __future__ import annotations

from typing import Optional

import grpc

__all__ = [
    "SeqsvrError",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "NotOwner",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
    "code_hint",
    "error_for",
    "retryable",
    "ROUTE_TABLE_METADATA",
    "SESSION_UID_METADATA",
    "NO_FORWARD_METADATA",
]

# Metadata keys of the wire API (crates/seqsvr-proto/src/lib.rs).
#: Carries an encoded RouteTable on NOT_OWNER answers.
ROUTE_TABLE_METADATA = "seqsvr-route-table-bin"
#: On a rongcloud NOT_OWNER answer, the uid the session is routed by.
SESSION_UID_METADATA = "x-seqsvr-session-uid"
#: Value "1": the AllocSvr answers itself (NOT_OWNER with its table) rather than forwarding.
#: The SDK sets it on every call: it follows the route tables itself.
NO_FORWARD_METADATA = "seqsvr-no-forward"


class SeqsvrError(Exception):
    """Every error of the SDK.

    Attributes:
        code: the gRPC status code (:class:`grpc.StatusCode`).
        message: the server's message, or the SDK's where it failed on its own.
        hint: what the caller can do about it (may be empty).
        route_table: for a NOT_OWNER answer, the route table it carried (a ``RouteTable``
            message) if any, else None.
        session_uid: for a rongcloud NOT_OWNER answer, the uid the session is routed by.
    """

    #: The code of this class (the base class: none in particular).
    CODE: Optional[grpc.StatusCode] = None

    def __init__(self, code: grpc.StatusCode, message: str, hint: str = "", *,
                 route_table=None, session_uid: Optional[int] = None, from_server: bool = False):
        self.code = code
        self.message = message
        self.hint = hint if hint else code_hint(code)
        self.route_table = route_table
        self.session_uid = session_uid
        #: True when the error is the server's answer (not the SDK's own judgement).
        self.from_server = from_server
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"seqsvr: {self.code.name}: {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}, {self.message!r})"

    def copy(self) -> "SeqsvrError":
        """The same error as a new exception object (one per caller that raises it)."""
        return type(self)(self.code, self.message, self.hint, route_table=self.route_table,
                          session_uid=self.session_uid, from_server=self.from_server)

    @property
    def is_not_owner(self) -> bool:
        """Whether this is a NOT_OWNER answer (FAILED_PRECONDITION, message prefix NOT_OWNER)."""
        return self.code == grpc.StatusCode.FAILED_PRECONDITION and self.message.startswith("NOT_OWNER")


def _sub(name: str, code: grpc.StatusCode, doc: str, base=SeqsvrError):
    cls = type(name, (base,), {"CODE": code, "__doc__": doc, "__module__": __name__})
    return cls


Cancelled = _sub("Cancelled", grpc.StatusCode.CANCELLED, "CANCELLED: the call was cancelled (a closed client, a connection closed under it).")
Unknown = _sub("Unknown", grpc.StatusCode.UNKNOWN, "UNKNOWN: a failure gRPC could not classify.")
InvalidArgument = _sub("InvalidArgument", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT: the request is wrong (a uid outside every set, an empty batch, a count out of range); nothing was applied.")
DeadlineExceeded = _sub("DeadlineExceeded", grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED: the call's deadline passed; its outcome is unknown (a gap, never a repeat).")
NotFound = _sub("NotFound", grpc.StatusCode.NOT_FOUND, "NOT_FOUND: no such id scheme in the cluster config.")
AlreadyExists = _sub("AlreadyExists", grpc.StatusCode.ALREADY_EXISTS, "ALREADY_EXISTS.")
PermissionDenied = _sub("PermissionDenied", grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED: the certificate's identity has no role for this call.")
ResourceExhausted = _sub("ResourceExhausted", grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED: load shedding or a limit (the SDK's own queue full included); never retried by the SDK.")
FailedPrecondition = _sub("FailedPrecondition", grpc.StatusCode.FAILED_PRECONDITION, "FAILED_PRECONDITION: refused in the server's present state; not applied.")
NotOwner = _sub("NotOwner", grpc.StatusCode.FAILED_PRECONDITION, "NOT_OWNER (FAILED_PRECONDITION): the AllocSvr asked does not serve the uid's section (the SDK follows these itself).", FailedPrecondition)
Aborted = _sub("Aborted", grpc.StatusCode.ABORTED, "ABORTED.")
OutOfRange = _sub("OutOfRange", grpc.StatusCode.OUT_OF_RANGE, "OUT_OF_RANGE: a message over the size limit.")
Unimplemented = _sub("Unimplemented", grpc.StatusCode.UNIMPLEMENTED, "UNIMPLEMENTED: the server does not know this call.")
Internal = _sub("Internal", grpc.StatusCode.INTERNAL, "INTERNAL: a bug (server or SDK), or an answer that breaks the API.")
Unavailable = _sub("Unavailable", grpc.StatusCode.UNAVAILABLE, "UNAVAILABLE: transient (hand-over, no lease, no quorum, a server down); retried by the SDK until the deadline.")
DataLoss = _sub("DataLoss", grpc.StatusCode.DATA_LOSS, "DATA_LOSS.")
Unauthenticated = _sub("Unauthenticated", grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED.")

_BY_CODE = {cls.CODE: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists, PermissionDenied,
    ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented, Internal, Unavailable,
    DataLoss, Unauthenticated)}


def code_hint(code: grpc.StatusCode) -> str:
    """The advice the SDK gives with a code when it has nothing more specific (the Go SDK's CodeHint)."""
    C = grpc.StatusCode
    if code == C.UNAVAILABLE:
        return ("transient (hand-over, no lease, no quorum, a server down): the SDK retried "
                "until the deadline; retry later or give the call more time")
    if code == C.DEADLINE_EXCEEDED:
        return ("the call's deadline passed; its outcome is unknown (a value may have been "
                "taken: a gap, never a repeat); retry with more time")
    if code == C.RESOURCE_EXHAUSTED:
        return ("load shedding or a limit reached: back off before retrying (the SDK does not "
                "retry it, so as not to put the load straight back)")
    if code in (C.INVALID_ARGUMENT, C.OUT_OF_RANGE):
        return "the request is wrong and was not applied; fix it rather than retry"
    if code == C.NOT_FOUND:
        return "no such id scheme in the cluster config's [ids.schemes]"
    if code in (C.PERMISSION_DENIED, C.UNAUTHENTICATED):
        return ("the certificate's identity has no role for this call: use an application "
                "(client) certificate the cluster's [tls.identities] knows")
    if code == C.FAILED_PRECONDITION:
        return "the server refused the call in its present state; it was not applied"
    if code == C.UNIMPLEMENTED:
        return "the server does not know this call (an older AllocSvr?)"
    if code in (C.INTERNAL, C.DATA_LOSS):
        return "a bug (server or SDK): report it with the message"
    if code == C.CANCELLED:
        return "the call was cancelled"
    return ""


def error_for(code: grpc.StatusCode, message: str, hint: str = "", **kw) -> SeqsvrError:
    """The error of the class for ``code`` (NOT_OWNER answers: :class:`NotOwner`)."""
    cls = _BY_CODE.get(code, SeqsvrError)
    if code == grpc.StatusCode.FAILED_PRECONDITION and message.startswith("NOT_OWNER"):
        cls = NotOwner
    return cls(code, message, hint, **kw)


def retryable(code: grpc.StatusCode) -> bool:
    """Whether a failed attempt is worth another one within the call's deadline (the Go SDK's
    Retryable): UNAVAILABLE, DEADLINE_EXCEEDED (one attempt's), CANCELLED (from below: a
    connection closed under a call) and UNKNOWN. Every other code is final; in particular
    RESOURCE_EXHAUSTED (load shedding) goes back to the caller at once."""
    return code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN)


def from_rpc(err: BaseException) -> SeqsvrError:
    """What a gRPC call raised as a :class:`SeqsvrError`, with what the answer's trailers (or
    headers) carry: a NOT_OWNER's route table and session uid."""
    if isinstance(err, SeqsvrError):
        return err
    if isinstance(err, grpc.RpcError) and hasattr(err, "code"):
        try:
            code = err.code()
            message = err.details() or ""
        except Exception:  # pragma: no cover - an RpcError without status
            return Unknown(grpc.StatusCode.UNKNOWN, repr(err))
        table, session_uid = None, None
        mds = []
        for getter in ("trailing_metadata", "initial_metadata"):
            fn = getattr(err, getter, None)
            if fn is not None:
                try:
                    md = fn()
                except Exception:  # pragma: no cover
                    md = None
                if md:
                    mds.append(md)
        for md in mds:
            for key, value in md:
                if key == ROUTE_TABLE_METADATA and table is None:
                    from .v1 import seq_pb2
                    t = seq_pb2.RouteTable()
                    try:
                        t.ParseFromString(value if isinstance(value, bytes) else value.encode("latin-1"))
                        table = t
                    except Exception:
                        pass
                elif key == SESSION_UID_METADATA and session_uid is None:
                    try:
                        session_uid = int(value)
                    except (TypeError, ValueError):
                        pass
        return error_for(code, message, route_table=table, session_uid=session_uid, from_server=True)
    return Unknown(grpc.StatusCode.UNKNOWN, f"{type(err).__name__}: {err}")
