//! `seqsvr_core::store::StoreState::decode_snapshot`: the state machine inside a Raft snapshot,
//! which a follower receives from its leader (MsgSnapshot) and a member reads back from RocksDB.
//! Never panics; what decodes re-encodes and decodes back equal; comparing it with a live state
//! (the regression check a member runs before installing a snapshot) does not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seqsvr_core::ids::SectionId;
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::{Command, StoreState};

fuzz_target!(|data: &[u8]| {
    let Ok(state) = StoreState::decode_snapshot(data) else { return };
    let encoded = state.encode_snapshot();
    assert_eq!(StoreState::decode_snapshot(&encoded).as_ref(), Ok(&state));
    let mut live = StoreState::new();
    live.apply(&Command::RegisterAlloc { addr: "a:1".into(), identity: None });
    let _ = live.first_regression(&state);
    let _ = state.first_regression(&live);
    let _ = state.n_sections_advanced();
    let r = SectionRange::new(SectionId(0), SectionId(u64::MAX)).expect("a range");
    let _ = state.range(r).count();
    let _ = state.control().route_entries();
});
