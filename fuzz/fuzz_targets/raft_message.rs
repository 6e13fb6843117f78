//! A Raft transport message from a peer, as storesvr's `RaftTransport::send` takes it
//! (crates/storesvr/src/service.rs): the wire pre-check first (`seqsvr_core::raft_wire`), then
//! `raft::eraftpb::Message::parse_from_bytes` only on what it accepts. Neither may panic or
//! overflow the stack; what parses re-encodes to bytes the check accepts and that parse back to
//! the same message (known fields; unknown ones from the second round trip on).
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
    // Equal known fields. (Not `back == m`: protobuf 2.28 clears a repeated singular message
    // field, leaving its unknown-field map allocated but empty, which `==` tells from none.)
    assert_eq!(format!("{back:?}"), format!("{m:?}"));
    // And from there on, encoding and parsing are a fixed point.
    let again = back.write_to_bytes().expect("encodes");
    assert_eq!(Message::parse_from_bytes(&again).expect("parses"), back);
});
