//! A Raft transport message from a peer, as storesvr's `RaftTransport::send` takes it
//! (crates/storesvr/src/service.rs): the wire pre-check first (`seqsvr_core::raft_wire`), then
//! `raft::eraftpb::Message::parse_from_bytes` only on what it accepts. Neither may panic or
//! overflow the stack; what parses re-encodes to bytes the check accepts and that parse back to
//! the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protobuf::Message as _;
use raft::eraftpb::Message;
use seqsvr_core::raft_wire;

fuzz_target!(|data: &[u8]| {
    if raft_wire::check_message(data).is_err() {
        return; // refused before the parser, as storesvr does
    }
    let Ok(m) = Message::parse_from_bytes(data) else { return };
    let bytes = m.write_to_bytes().expect("a parsed message encodes");
    assert_eq!(raft_wire::check_message(&bytes), Ok(()), "raft's own encoding refused: {m:?}");
    let back = Message::parse_from_bytes(&bytes).expect("raft's own encoding parses");
    assert_eq!(back, m);
});
