from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NextRequest(_message.Message):
    __slots__ = ("uid", "route_version")
    UID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_VERSION_FIELD_NUMBER: _ClassVar[int]
    uid: int
    route_version: int
    def __init__(self, uid: _Optional[int] = ..., route_version: _Optional[int] = ...) -> None: ...

class NextResponse(_message.Message):
    __slots__ = ("seq", "route_table")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ROUTE_TABLE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    route_table: RouteTable
    def __init__(self, seq: _Optional[int] = ..., route_table: _Optional[_Union[RouteTable, _Mapping]] = ...) -> None: ...

class NextBatchRequest(_message.Message):
    __slots__ = ("uids", "route_version", "independent")
    UIDS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_VERSION_FIELD_NUMBER: _ClassVar[int]
    INDEPENDENT_FIELD_NUMBER: _ClassVar[int]
    uids: _containers.RepeatedScalarFieldContainer[int]
    route_version: int
    independent: bool
    def __init__(self, uids: _Optional[_Iterable[int]] = ..., route_version: _Optional[int] = ..., independent: _Optional[bool] = ...) -> None: ...

class NextBatchResponse(_message.Message):
    __slots__ = ("seqs", "route_table")
    SEQS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_TABLE_FIELD_NUMBER: _ClassVar[int]
    seqs: _containers.RepeatedScalarFieldContainer[int]
    route_table: RouteTable
    def __init__(self, seqs: _Optional[_Iterable[int]] = ..., route_table: _Optional[_Union[RouteTable, _Mapping]] = ...) -> None: ...

class NextStreamRequest(_message.Message):
    __slots__ = ("batch_id", "uids", "route_version", "timeout_ms")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    UIDS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_VERSION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    uids: _containers.RepeatedScalarFieldContainer[int]
    route_version: int
    timeout_ms: int
    def __init__(self, batch_id: _Optional[int] = ..., uids: _Optional[_Iterable[int]] = ..., route_version: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class NextStreamReply(_message.Message):
    __slots__ = ("batch_id", "seqs", "route_table", "code", "message")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SEQS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_TABLE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    seqs: _containers.RepeatedScalarFieldContainer[int]
    route_table: RouteTable
    code: int
    message: str
    def __init__(self, batch_id: _Optional[int] = ..., seqs: _Optional[_Iterable[int]] = ..., route_table: _Optional[_Union[RouteTable, _Mapping]] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class CurrentRequest(_message.Message):
    __slots__ = ("uid", "route_version")
    UID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_VERSION_FIELD_NUMBER: _ClassVar[int]
    uid: int
    route_version: int
    def __init__(self, uid: _Optional[int] = ..., route_version: _Optional[int] = ...) -> None: ...

class CurrentResponse(_message.Message):
    __slots__ = ("seq", "route_table")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ROUTE_TABLE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    route_table: RouteTable
    def __init__(self, seq: _Optional[int] = ..., route_table: _Optional[_Union[RouteTable, _Mapping]] = ...) -> None: ...

class GetRouteTableRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetRouteTableResponse(_message.Message):
    __slots__ = ("route_table",)
    ROUTE_TABLE_FIELD_NUMBER: _ClassVar[int]
    route_table: RouteTable
    def __init__(self, route_table: _Optional[_Union[RouteTable, _Mapping]] = ...) -> None: ...

class RouteTable(_message.Message):
    __slots__ = ("set_id", "version", "uid_begin", "uid_end", "section_size", "entries")
    SET_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UID_BEGIN_FIELD_NUMBER: _ClassVar[int]
    UID_END_FIELD_NUMBER: _ClassVar[int]
    SECTION_SIZE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    set_id: int
    version: int
    uid_begin: int
    uid_end: int
    section_size: int
    entries: _containers.RepeatedCompositeFieldContainer[RouteEntry]
    def __init__(self, set_id: _Optional[int] = ..., version: _Optional[int] = ..., uid_begin: _Optional[int] = ..., uid_end: _Optional[int] = ..., section_size: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[RouteEntry, _Mapping]]] = ...) -> None: ...

class RouteEntry(_message.Message):
    __slots__ = ("section_begin", "section_end", "alloc_id", "addr")
    SECTION_BEGIN_FIELD_NUMBER: _ClassVar[int]
    SECTION_END_FIELD_NUMBER: _ClassVar[int]
    ALLOC_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    section_begin: int
    section_end: int
    alloc_id: int
    addr: str
    def __init__(self, section_begin: _Optional[int] = ..., section_end: _Optional[int] = ..., alloc_id: _Optional[int] = ..., addr: _Optional[str] = ...) -> None: ...

class NextIdsRequest(_message.Message):
    __slots__ = ("scheme", "count", "business", "session_type", "session_id", "session_hash", "packed_ids128", "packed_ids64")
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    BUSINESS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_HASH_FIELD_NUMBER: _ClassVar[int]
    PACKED_IDS128_FIELD_NUMBER: _ClassVar[int]
    PACKED_IDS64_FIELD_NUMBER: _ClassVar[int]
    scheme: str
    count: int
    business: int
    session_type: int
    session_id: str
    session_hash: int
    packed_ids128: bool
    packed_ids64: bool
    def __init__(self, scheme: _Optional[str] = ..., count: _Optional[int] = ..., business: _Optional[int] = ..., session_type: _Optional[int] = ..., session_id: _Optional[str] = ..., session_hash: _Optional[int] = ..., packed_ids128: _Optional[bool] = ..., packed_ids64: _Optional[bool] = ...) -> None: ...

class NextIdsResponse(_message.Message):
    __slots__ = ("ids", "ids128", "worker_id", "session_uid", "ids128_packed", "ids64_packed")
    IDS_FIELD_NUMBER: _ClassVar[int]
    IDS128_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_UID_FIELD_NUMBER: _ClassVar[int]
    IDS128_PACKED_FIELD_NUMBER: _ClassVar[int]
    IDS64_PACKED_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    ids128: _containers.RepeatedScalarFieldContainer[bytes]
    worker_id: int
    session_uid: int
    ids128_packed: bytes
    ids64_packed: bytes
    def __init__(self, ids: _Optional[_Iterable[int]] = ..., ids128: _Optional[_Iterable[bytes]] = ..., worker_id: _Optional[int] = ..., session_uid: _Optional[int] = ..., ids128_packed: _Optional[bytes] = ..., ids64_packed: _Optional[bytes] = ...) -> None: ...

class DecodeIdRequest(_message.Message):
    __slots__ = ("scheme", "text", "id")
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    scheme: str
    text: str
    id: int
    def __init__(self, scheme: _Optional[str] = ..., text: _Optional[str] = ..., id: _Optional[int] = ...) -> None: ...

class DecodeIdResponse(_message.Message):
    __slots__ = ("time_units", "unix_ms", "time_rfc3339", "worker", "business", "session_type", "session_hash", "sequence", "rand", "text", "layout")
    TIME_UNITS_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TIME_RFC3339_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    BUSINESS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    SESSION_HASH_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RAND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    time_units: int
    unix_ms: int
    time_rfc3339: str
    worker: int
    business: int
    session_type: int
    session_hash: int
    sequence: int
    rand: int
    text: str
    layout: str
    def __init__(self, time_units: _Optional[int] = ..., unix_ms: _Optional[int] = ..., time_rfc3339: _Optional[str] = ..., worker: _Optional[int] = ..., business: _Optional[int] = ..., session_type: _Optional[int] = ..., session_hash: _Optional[int] = ..., sequence: _Optional[int] = ..., rand: _Optional[int] = ..., text: _Optional[str] = ..., layout: _Optional[str] = ...) -> None: ...
