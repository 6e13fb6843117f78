//! `seqsvr_core::store::Command::decode`: the payload of every normal Raft log entry, which a
//! follower receives from its leader (MsgAppend) and every member reads back from RocksDB.
//! Never panics; what decodes re-encodes and decodes back equal, and applying it to a small
//! state (what a member does with a committed entry) does not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seqsvr_core::store::{Command, StoreState};

fuzz_target!(|data: &[u8]| {
    let Ok(command) = Command::decode(data) else { return };
    let encoded = command.encode();
    assert_eq!(Command::decode(&encoded).as_ref(), Ok(&command));
    // The driver stops with a storage fault on a command above this build's version
    // (`storesvr/src/driver/ready.rs`): it is never applied.
    if command.needs_version() > seqsvr_core::store::COMMANDS_VERSION {
        return;
    }
    let mut state = StoreState::new();
    state.apply(&Command::RegisterAlloc { addr: "a:1".into(), identity: None });
    state.apply(&Command::RegisterAlloc { addr: "b:1".into(), identity: Some("b".into()) });
    let _ = state.apply(&command);
    let snapshot = state.encode_snapshot();
    assert_eq!(StoreState::decode_snapshot(&snapshot).as_ref(), Ok(&state));
});
