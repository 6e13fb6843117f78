//! `seqsvr_core::store::ControlState::decode`: the arbiter's replicated state (AllocSvr registry,
//! section assignment, lease), as a member reads it back from RocksDB. Never panics; what
//! decodes re-encodes and decodes back equal; and what a member does with it right after
//! loading (route table, grants, lease holds, a new leader's plan) does not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seqsvr_core::arbiter::{grant_for, Arbiter, LeaseConfig};
use seqsvr_core::ids::SectionId;
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::ControlState;

fn exercise(control: &ControlState) {
    let _ = control.route_entries();
    let _ = control.longest_hold_ms();
    let _ = control.assignment.load();
    let all = SectionRange::new(SectionId(0), SectionId(u64::MAX)).expect("a range");
    let _ = control.assignment.unassigned(all);
    let small = SectionRange::new(SectionId(0), SectionId(1000)).expect("a range");
    for (&alloc, _) in control.allocs.iter().take(8) {
        let _ = control.is_current(alloc);
        let _ = control.check_holder(alloc, Some("x"));
        let _ = grant_for(control, alloc);
    }
    let lease = LeaseConfig { lease_ms: 5_000, margin_ms: 500 };
    let mut arbiter = Arbiter::new(0, lease);
    for &alloc in control.allocs.keys().take(8) {
        arbiter.on_granted(alloc, 0);
    }
    for now in [0, 1_000_000, u64::MAX] {
        let _ = arbiter.plan(now, control, small);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(control) = ControlState::decode(data) else { return };
    let encoded = control.encode();
    assert_eq!(ControlState::decode(&encoded).as_ref(), Ok(&control));
    exercise(&control);
});
