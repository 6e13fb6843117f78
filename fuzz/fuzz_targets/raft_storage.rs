//! Raft records as storesvr reads them back from RocksDB (crates/storesvr/src/storage.rs) and
//! applies them (crates/storesvr/src/driver/ready.rs): `Entry`, `HardState`, `ConfState`, and the
//! data of conf-change entries (`ConfChange`, `ConfChangeV2`), each by `parse_from_bytes`; the
//! data of a normal entry by `Command::decode`. The first byte picks the record. Every record is
//! judged by `raft_wire::check` first (which must not panic) and then parsed whatever it said
//! (a disk record does not go through the peer check): neither may panic; what parses
//! re-encodes to bytes that parse back equal, and that the check still accepts if it accepted
//! the original.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, ConfState, Entry, EntryType, HardState, Snapshot};
use seqsvr_core::raft_wire::{self, Schema};
use seqsvr_core::store::Command;

fn round_trip<M: protobuf::Message + PartialEq + std::fmt::Debug>(
    schema: Schema,
    bytes: &[u8],
) -> Option<M> {
    let accepted = raft_wire::check(schema, bytes).is_ok();
    let m = M::parse_from_bytes(bytes).ok()?;
    let again = m.write_to_bytes().expect("a parsed record encodes");
    if accepted {
        // Re-encoding keeps every payload byte, so what passed still passes. (Not so for any
        // record that parses: the parser skips top-level groups the check refuses, and keeps
        // conf-change data it does not look at.)
        assert_eq!(raft_wire::check(schema, &again), Ok(()), "re-encoding refused: {m:?}");
    }
    let back = M::parse_from_bytes(&again).expect("raft's own encoding parses");
    // Equal known fields (see raft_message.rs for why not `back == m`), then a fixed point.
    assert_eq!(format!("{back:?}"), format!("{m:?}"));
    let twice = back.write_to_bytes().expect("encodes");
    assert_eq!(M::parse_from_bytes(&twice).expect("parses"), back);
    Some(m)
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else { return };
    match which % 6 {
        0 => {
            let Some(e) = round_trip::<Entry>(Schema::Entry, bytes) else { return };
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    if let Ok(c) = Command::decode(e.get_data()) {
                        assert_eq!(Command::decode(&c.encode()), Ok(c));
                    }
                }
                EntryType::EntryConfChange => {
                    let _ = ConfChange::parse_from_bytes(e.get_data());
                }
                EntryType::EntryConfChangeV2 => {
                    let _ = ConfChangeV2::parse_from_bytes(e.get_data());
                }
            }
        }
        1 => {
            round_trip::<HardState>(Schema::HardState, bytes);
        }
        2 => {
            round_trip::<ConfState>(Schema::ConfState, bytes);
        }
        3 => {
            round_trip::<ConfChange>(Schema::ConfChange, bytes);
        }
        4 => {
            round_trip::<ConfChangeV2>(Schema::ConfChangeV2, bytes);
        }
        _ => {
            round_trip::<Snapshot>(Schema::Snapshot, bytes);
        }
    }
});
