//! The `seqsvr.v1` wire API, generated from `proto/` by tonic/prost.
//!
//! Wire types stay at the edge: servers and clients convert them to `seqsvr-core` types by hand,
//! so the `.proto` files and the state machine can change independently.

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("seqsvr.v1");

    /// Encoded `FileDescriptorSet` of the API, for gRPC server reflection (grpcurl).
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("seqsvr_v1_descriptor");
}

/// The section → owner lookup on `v1::RouteTable` (inherent methods: `owner_of_section`, …).
mod route;

/// gRPC metadata key a non-leader StoreSvr sets on its UNAVAILABLE answer: the leader's member id.
pub const LEADER_ID_METADATA: &str = "seqsvr-leader-id";
/// gRPC metadata key a non-leader StoreSvr sets on its UNAVAILABLE answer: the leader's address.
pub const LEADER_ADDR_METADATA: &str = "seqsvr-leader-addr";

/// Binary gRPC metadata key carrying an encoded `RouteTable` on NOT_OWNER answers.
pub const ROUTE_TABLE_METADATA: &str = "seqsvr-route-table-bin";

/// The route table a NOT_OWNER answer carries under [`ROUTE_TABLE_METADATA`], if it carries
/// one that decodes.
pub fn route_table_of(status: &tonic::Status) -> Option<v1::RouteTable> {
    use prost::Message as _;
    let bytes = status.metadata().get_bin(ROUTE_TABLE_METADATA)?.to_bytes().ok()?;
    v1::RouteTable::decode(bytes.as_ref()).ok()
}

/// `status` carrying `table` under [`ROUTE_TABLE_METADATA`], where [`route_table_of`] finds
/// it: how an AllocSvr's NOT_OWNER answer carries its route table.
pub fn with_route_table(mut status: tonic::Status, table: &v1::RouteTable) -> tonic::Status {
    use prost::Message as _;
    status.metadata_mut().insert_bin(
        ROUTE_TABLE_METADATA,
        tonic::metadata::MetadataValue::from_bytes(&table.encode_to_vec()),
    );
    status
}

/// gRPC metadata key an AllocSvr sets on a `rongcloud` NextIds NOT_OWNER answer: the uid the
/// session is routed by (its owner is that uid's section's).
pub const SESSION_UID_METADATA: &str = "x-seqsvr-session-uid";

/// gRPC metadata key a caller sets (value `1`) to be answered only by the AllocSvr it called:
/// without it, an AllocSvr forwards a call for a uid (or a `rongcloud` session) another
/// AllocSvr owns to that owner, one hop at most. The Rust SDK sets it on every call (it follows
/// route tables itself), and an AllocSvr forwarding a call does too, so a forwarded call is
/// never forwarded again; an AllocSvr's own identity (role `alloc`) may call `SeqService` and
/// `IdService` only with it.
pub const NO_FORWARD_METADATA: &str = "seqsvr-no-forward";

/// Does `metadata` ask not to be forwarded ([`NO_FORWARD_METADATA`] is `1`)?
pub fn no_forward(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata.get(NO_FORWARD_METADATA).is_some_and(|v| v.as_bytes() == b"1")
}

/// gRPC metadata key of a request id: taken from the caller when it sends one, passed by an
/// AllocSvr to the store on the advance a waiting call triggered, and logged with both.
pub const REQUEST_ID_METADATA: &str = "x-request-id";

/// The caller's request id, if it sent a usable one: 1 to 64 printable ASCII characters.
pub fn request_id_of(metadata: &tonic::metadata::MetadataMap) -> Option<&str> {
    let id = metadata.get(REQUEST_ID_METADATA)?.to_str().ok()?;
    let usable = (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic());
    usable.then_some(id)
}

const MIB: usize = 1024 * 1024;

// Message size limits, per service (a server's decoding limit is what it accepts; its encoding
// limit what it sends; a client's are the mirror image). Only Raft needs a large one.
//
// - `SeqService` requests: [`seq_request_max_bytes`] of the AllocSvr's `max_batch_uids`
//   (171 KiB for the default 10 000); clients encode at most [`SEQ_REQUEST_MAX_BYTES`].
// - `StoreService` and `StoreAdmin` requests: [`STORE_REQUEST_MAX_BYTES`].
// - Replies of those three: [`REPLY_MAX_BYTES`].
// - `RaftTransport`, both ways: [`RAFT_MESSAGE_MAX_BYTES`].
//
// A message over a limit is refused by tonic before it reaches a handler (`OUT_OF_RANGE`).

/// Most bytes of one `SeqService` request an AllocSvr accepts: a `NextBatch` of
/// `max_batch_uids` uids (a uid is at most 10 bytes as a varint, 11 with slack) plus 64 KiB for
/// the rest of the message. The default 10 000 uids give 171 KiB.
pub fn seq_request_max_bytes(max_batch_uids: usize) -> usize {
    max_batch_uids.saturating_mul(11).saturating_add(64 * 1024)
}

/// Most bytes of one `SeqService` request the SDK encodes (the AllocSvr's own limit, derived from
/// its config by [`seq_request_max_bytes`], is usually far lower and is the one that counts).
pub const SEQ_REQUEST_MAX_BYTES: usize = 4 * MIB;

/// Most bytes of one `StoreService` or `StoreAdmin` request: an `AdvanceMaxSeq` of the default
/// 4096 sections is about 100 KiB; nothing else the store is asked comes near it.
pub const STORE_REQUEST_MAX_BYTES: usize = 4 * MIB;

/// Most bytes of one reply of `SeqService`, `StoreService` or `StoreAdmin` (servers encode,
/// clients decode): the largest are route tables and `LoadSections` answers, about 2 MiB for a
/// set of 43k sections each with its own owner.
pub const REPLY_MAX_BYTES: usize = 16 * MIB;

/// Most bytes of one `RaftTransport` message, both ways: snapshots carry a whole set's state
/// machine. The only large limit; no other service accepts it.
pub const RAFT_MESSAGE_MAX_BYTES: usize = 256 * MIB;

/// Parses the gRPC wire format of a timeout (`grpc-timeout` header): digits and a unit
/// (H, M, S, m, u, n). Servers use it to answer before the caller's own deadline.
pub fn parse_grpc_timeout(text: &str) -> Option<std::time::Duration> {
    use std::time::Duration;
    // Checked: a last character of more than one byte is no unit (found by fuzzing).
    let (digits, unit) = text.split_at_checked(text.len().checked_sub(1)?)?;
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Puts the ids of a `NextIds` answer of a 64-bit scheme where the request asked for them:
/// `ids64_packed` (one buffer, 8 big-endian bytes per id) when it set `packed_ids64`, else `ids`
/// (a varint per id, what older SDKs read).
pub fn put_ids64(response: &mut v1::NextIdsResponse, ids: impl Iterator<Item = u64>, packed: bool) {
    if packed {
        let mut buf = Vec::with_capacity(ids.size_hint().0 * 8);
        for id in ids {
            buf.extend_from_slice(&id.to_be_bytes());
        }
        response.ids64_packed = buf;
    } else {
        response.ids = ids.collect();
    }
}

/// The ids of a `NextIds` answer of a 64-bit scheme, from whichever of `ids` and
/// `ids64_packed` holds them (an AllocSvr that predates `packed_ids64` fills `ids` whatever was
/// asked). Err(why) for anything that is not whole 8-byte ids in one of the two fields: the
/// answer is network input.
pub fn ids64_of(response: &v1::NextIdsResponse) -> Result<Vec<u64>, String> {
    match (response.ids.is_empty(), response.ids64_packed.is_empty()) {
        (_, true) => Ok(response.ids.clone()),
        (true, false) => unpack("ids64_packed", &response.ids64_packed, u64::from_be_bytes),
        (false, false) => Err("both ids and ids64_packed hold ids".into()),
    }
}

/// The ids of a packed field (`field`, for the message): whole `N`-byte big-endian ids.
fn unpack<const N: usize, T>(
    field: &str,
    packed: &[u8],
    from_be_bytes: fn([u8; N]) -> T,
) -> Result<Vec<T>, String> {
    if !packed.len().is_multiple_of(N) {
        return Err(format!("{field} has {} bytes, not a multiple of {N}", packed.len()));
    }
    Ok(packed
        .chunks_exact(N)
        .map(|raw| {
            let mut id = [0u8; N];
            id.copy_from_slice(raw);
            from_be_bytes(id)
        })
        .collect())
}

/// How many 64-bit ids an answer holds, in either field, without reading them: a packed buffer
/// that is not whole ids still counts (rounded up), as [`ids128_count`] does.
pub fn ids64_count(response: &v1::NextIdsResponse) -> usize {
    response.ids.len() + response.ids64_packed.len().div_ceil(8)
}

/// Puts the ids of a `NextIds` answer wider than 64 bits (uuidv7, rongcloud) where the request
/// asked for them: `ids128_packed` (one buffer, 16 big-endian bytes per id) when it set
/// `packed_ids128`, else `ids128` (one 16-byte field per id, what older SDKs read).
pub fn put_ids128(response: &mut v1::NextIdsResponse, ids: &[u128], packed: bool) {
    if packed {
        let mut buf = Vec::with_capacity(ids.len() * 16);
        for id in ids {
            buf.extend_from_slice(&id.to_be_bytes());
        }
        response.ids128_packed = buf;
    } else {
        response.ids128 = ids.iter().map(|id| id.to_be_bytes().to_vec()).collect();
    }
}

/// The ids of a `NextIds` answer wider than 64 bits, from whichever of `ids128` and
/// `ids128_packed` holds them (an AllocSvr that predates `packed_ids128` fills `ids128` whatever
/// was asked). Err(why) for anything that is not whole 16-byte ids in one of the two fields: the
/// answer is network input.
pub fn ids128_of(response: &v1::NextIdsResponse) -> Result<Vec<u128>, String> {
    match (response.ids128.is_empty(), response.ids128_packed.is_empty()) {
        (_, true) => response
            .ids128
            .iter()
            .enumerate()
            .map(|(pos, bytes)| {
                <[u8; 16]>::try_from(bytes.as_slice())
                    .map(u128::from_be_bytes)
                    .map_err(|_| format!("ids128[{pos}] has {} bytes, not 16", bytes.len()))
            })
            .collect(),
        (true, false) => unpack("ids128_packed", &response.ids128_packed, u128::from_be_bytes),
        (false, false) => Err("both ids128 and ids128_packed hold ids".into()),
    }
}

/// How many 128-bit ids an answer holds, in either field, without reading them: a packed
/// buffer that is not whole ids still counts (rounded up), so that an answer is never taken for
/// one without 128-bit ids because its buffer is short; [`ids128_of`] refuses it.
pub fn ids128_count(response: &v1::NextIdsResponse) -> usize {
    response.ids128.len() + response.ids128_packed.len().div_ceil(16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ids128_read_back_from_either_field() {
        let ids = [1u128, 7u128 << 76, u128::MAX];
        for packed in [false, true] {
            let mut r = v1::NextIdsResponse::default();
            put_ids128(&mut r, &ids, packed);
            assert_eq!(r.ids128.is_empty(), packed);
            assert_eq!(r.ids128_packed.is_empty(), !packed);
            assert_eq!(ids128_count(&r), 3);
            assert_eq!(ids128_of(&r).unwrap(), ids);
        }
        // Big-endian, the RFC 9562 byte order.
        let mut r = v1::NextIdsResponse::default();
        put_ids128(&mut r, &[0x0102], true);
        assert_eq!(r.ids128_packed[14..], [1, 2]);
    }

    #[test]
    fn ids64_read_back_from_either_field() {
        let ids = [1u64, 7 << 60, u64::MAX];
        for packed in [false, true] {
            let mut r = v1::NextIdsResponse::default();
            put_ids64(&mut r, ids.iter().copied(), packed);
            assert_eq!(r.ids.is_empty(), packed);
            assert_eq!(r.ids64_packed.is_empty(), !packed);
            assert_eq!(ids64_count(&r), 3);
            assert_eq!(ids128_count(&r), 0);
            assert_eq!(ids64_of(&r).unwrap(), ids);
        }
        // Big-endian, as the 128-bit ids.
        let mut r = v1::NextIdsResponse::default();
        put_ids64(&mut r, [0x0102].into_iter(), true);
        assert_eq!(r.ids64_packed, [0, 0, 0, 0, 0, 0, 1, 2]);
        // An empty answer reads as no ids (the caller refuses it for a count it asked).
        assert_eq!(ids64_of(&v1::NextIdsResponse::default()).unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn malformed_ids64_are_errors() {
        let r = v1::NextIdsResponse { ids64_packed: vec![0; 17], ..Default::default() };
        assert_eq!(ids64_of(&r).unwrap_err(), "ids64_packed has 17 bytes, not a multiple of 8");
        let short = v1::NextIdsResponse { ids64_packed: vec![0; 7], ..Default::default() };
        assert_eq!(ids64_count(&short), 1, "a short buffer is not taken for no ids");
        let r =
            v1::NextIdsResponse { ids: vec![1], ids64_packed: vec![0; 8], ..Default::default() };
        assert!(ids64_of(&r).unwrap_err().contains("both"));
    }

    #[test]
    fn malformed_ids128_are_errors() {
        let r = v1::NextIdsResponse { ids128: vec![vec![0; 15]], ..Default::default() };
        assert_eq!(ids128_of(&r).unwrap_err(), "ids128[0] has 15 bytes, not 16");
        let r = v1::NextIdsResponse { ids128_packed: vec![0; 17], ..Default::default() };
        assert_eq!(ids128_of(&r).unwrap_err(), "ids128_packed has 17 bytes, not a multiple of 16");
        let short = v1::NextIdsResponse { ids128_packed: vec![0; 15], ..Default::default() };
        assert_eq!(ids128_count(&short), 1, "a short buffer is not taken for no ids");
        let r = v1::NextIdsResponse {
            ids128: vec![vec![0; 16]],
            ids128_packed: vec![0; 16],
            ..Default::default()
        };
        assert!(ids128_of(&r).unwrap_err().contains("both"));
    }

    #[test]
    fn request_ids_are_short_printable_ascii() {
        let mut m = tonic::metadata::MetadataMap::new();
        assert_eq!(request_id_of(&m), None);
        m.insert(REQUEST_ID_METADATA, "abc-123".parse().unwrap());
        assert_eq!(request_id_of(&m), Some("abc-123"));
        m.insert(REQUEST_ID_METADATA, "x".repeat(65).parse().unwrap());
        assert_eq!(request_id_of(&m), None, "too long");
        m.insert(REQUEST_ID_METADATA, "a b".parse().unwrap());
        assert_eq!(request_id_of(&m), None, "not printable without spaces");
    }

    #[test]
    fn grpc_timeouts_parse() {
        assert_eq!(parse_grpc_timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout(""), None);
        assert_eq!(parse_grpc_timeout("10x"), None);
    }

    /// Regression (fuzz/fuzz_targets/proto_messages.rs, crash input `1\u{2ca}`): a last
    /// character of more than one byte made `split_at` panic off a char boundary.
    #[test]
    fn grpc_timeouts_ending_in_a_multibyte_character_do_not_parse() {
        assert_eq!(parse_grpc_timeout("1\u{2ca}"), None);
        assert_eq!(parse_grpc_timeout("\u{e9}"), None);
        assert_eq!(parse_grpc_timeout("15\u{1f600}"), None);
    }
}
