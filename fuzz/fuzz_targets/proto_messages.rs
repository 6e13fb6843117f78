//! The gRPC messages servers and clients decode from the network (`seqsvr-proto`, prost), and
//! the route table a client decodes from the binary metadata of a NOT_OWNER answer
//! (`seqsvr-client`'s `route_table_of`). The first byte picks the message; the rest is its
//! bytes. Never panics; what decodes re-encodes to bytes that decode equal. Also the text
//! decoders of gRPC metadata the servers read (`parse_grpc_timeout`, `request_id_of`), and the
//! 64- and 128-bit ids of a `NextIds` answer (`ids64_of`, `ids128_of`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use seqsvr_proto::v1 as pb;

fn round_trip<M: Message + Default + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
    let Ok(m) = M::decode(bytes) else { return };
    let again = m.encode_to_vec();
    assert_eq!(M::decode(again.as_slice()).as_ref(), Ok(&m));
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else { return };
    match which % 25 {
        // What clients send to an AllocSvr (SeqService).
        0 => round_trip::<pb::NextRequest>(bytes),
        1 => round_trip::<pb::NextBatchRequest>(bytes),
        2 => round_trip::<pb::CurrentRequest>(bytes),
        // What AllocSvrs and admins send to a StoreSvr (StoreService, StoreAdmin).
        3 => round_trip::<pb::AdvanceMaxSeqRequest>(bytes),
        4 => round_trip::<pb::GetMaxSeqRequest>(bytes),
        5 => round_trip::<pb::LoadSectionsRequest>(bytes),
        6 => round_trip::<pb::RegisterAllocRequest>(bytes),
        7 => round_trip::<pb::HeartbeatRequest>(bytes),
        8 => round_trip::<pb::ReleaseAllocRequest>(bytes),
        9 => round_trip::<pb::TransferLeaderRequest>(bytes),
        10 => round_trip::<pb::AddLearnerRequest>(bytes),
        11 => round_trip::<pb::PromoteLearnerRequest>(bytes),
        12 => round_trip::<pb::RemoveMemberRequest>(bytes),
        13 => round_trip::<pb::SetLeaseRequest>(bytes),
        14 => round_trip::<pb::MoveSectionsRequest>(bytes),
        15 => round_trip::<pb::DrainAllocRequest>(bytes),
        // What peers send (RaftTransport); the messages inside go through raft_message.
        16 => round_trip::<pb::RaftMessageBatch>(bytes),
        // What clients and AllocSvrs decode from servers.
        17 => round_trip::<pb::RouteTable>(bytes),
        18 => round_trip::<pb::NextBatchResponse>(bytes),
        19 => round_trip::<pb::HeartbeatResponse>(bytes),
        20 => round_trip::<pb::GetMaxSeqResponse>(bytes),
        21 => round_trip::<pb::LeasesResponse>(bytes),
        22 => round_trip::<pb::StoreStatusResponse>(bytes),
        // The ids of a NextIds answer: read from either field (64- and 128-bit), whole or refused.
        23 => {
            round_trip::<pb::NextIdsResponse>(bytes);
            let Ok(r) = pb::NextIdsResponse::decode(bytes) else { return };
            if let Ok(ids) = seqsvr_proto::ids128_of(&r) {
                assert_eq!(ids.len(), seqsvr_proto::ids128_count(&r));
            }
            let count64 = seqsvr_proto::ids64_count(&r);
            if let Ok(ids) = seqsvr_proto::ids64_of(&r) {
                assert_eq!(ids.len(), count64);
            }
        }
        // gRPC metadata text: a deadline and a request id.
        _ => {
            let Ok(text) = std::str::from_utf8(bytes) else { return };
            let _ = seqsvr_proto::parse_grpc_timeout(text);
            let mut metadata = tonic::metadata::MetadataMap::new();
            if let Ok(value) = text.parse() {
                metadata.insert(seqsvr_proto::REQUEST_ID_METADATA, value);
                if let Some(id) = seqsvr_proto::request_id_of(&metadata) {
                    assert!((1..=64).contains(&id.len()));
                }
            }
        }
    }
});
