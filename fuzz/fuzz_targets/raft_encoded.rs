//! No false refusals: any `eraftpb::Message` raft-rs can build (every field, entries of every
//! type with conf-change payloads, snapshots with conf states), encoded by protobuf 2.28 as a
//! peer's raft-rs would, passes the wire pre-check (`seqsvr_core::raft_wire`) and parses back.
#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use protobuf::{Message as _, RepeatedField};
use raft::eraftpb::{
    ConfChange, ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, ConfState,
    Entry, EntryType, Message, MessageType, Snapshot, SnapshotMetadata,
};
use seqsvr_core::raft_wire;

fn bytes(u: &mut Unstructured) -> Result<Vec<u8>> {
    let n = u.int_in_range(0..=64)?;
    Ok(u.bytes(n)?.to_vec())
}

fn ids(u: &mut Unstructured) -> Result<Vec<u64>> {
    let n = u.int_in_range(0..=5)?;
    (0..n).map(|_| u.arbitrary()).collect()
}

fn conf_change_type(u: &mut Unstructured) -> Result<ConfChangeType> {
    Ok(*u.choose(&[
        ConfChangeType::AddNode,
        ConfChangeType::RemoveNode,
        ConfChangeType::AddLearnerNode,
    ])?)
}

fn entry(u: &mut Unstructured) -> Result<Entry> {
    let mut e = Entry::default();
    let t = *u.choose(&[
        EntryType::EntryNormal,
        EntryType::EntryConfChange,
        EntryType::EntryConfChangeV2,
    ])?;
    e.set_entry_type(t);
    e.set_term(u.arbitrary()?);
    e.set_index(u.arbitrary()?);
    let data = match t {
        EntryType::EntryNormal => bytes(u)?,
        EntryType::EntryConfChange => {
            let mut c = ConfChange::default();
            c.set_id(u.arbitrary()?);
            c.set_change_type(conf_change_type(u)?);
            c.set_node_id(u.arbitrary()?);
            c.set_context(bytes(u)?.into());
            c.write_to_bytes().expect("encodes")
        }
        EntryType::EntryConfChangeV2 => {
            let mut c = ConfChangeV2::default();
            c.set_transition(*u.choose(&[
                ConfChangeTransition::Auto,
                ConfChangeTransition::Implicit,
                ConfChangeTransition::Explicit,
            ])?);
            let n = u.int_in_range(0..=4)?;
            let mut changes = Vec::new();
            for _ in 0..n {
                let mut s = ConfChangeSingle::default();
                s.set_change_type(conf_change_type(u)?);
                s.set_node_id(u.arbitrary()?);
                changes.push(s);
            }
            c.set_changes(RepeatedField::from_vec(changes));
            c.set_context(bytes(u)?.into());
            c.write_to_bytes().expect("encodes")
        }
    };
    e.set_data(data.into());
    e.set_context(bytes(u)?.into());
    e.set_sync_log(u.arbitrary()?);
    Ok(e)
}

fn message(u: &mut Unstructured) -> Result<Message> {
    let mut m = Message::default();
    let types = [
        MessageType::MsgHup,
        MessageType::MsgBeat,
        MessageType::MsgPropose,
        MessageType::MsgAppend,
        MessageType::MsgAppendResponse,
        MessageType::MsgRequestVote,
        MessageType::MsgRequestVoteResponse,
        MessageType::MsgSnapshot,
        MessageType::MsgHeartbeat,
        MessageType::MsgHeartbeatResponse,
        MessageType::MsgUnreachable,
        MessageType::MsgSnapStatus,
        MessageType::MsgCheckQuorum,
        MessageType::MsgTransferLeader,
        MessageType::MsgTimeoutNow,
        MessageType::MsgReadIndex,
        MessageType::MsgReadIndexResp,
        MessageType::MsgRequestPreVote,
        MessageType::MsgRequestPreVoteResponse,
    ];
    m.set_msg_type(*u.choose(&types)?);
    m.set_to(u.arbitrary()?);
    m.set_from(u.arbitrary()?);
    m.set_term(u.arbitrary()?);
    m.set_log_term(u.arbitrary()?);
    m.set_index(u.arbitrary()?);
    let n = u.int_in_range(0..=4)?;
    let mut entries = Vec::new();
    for _ in 0..n {
        entries.push(entry(u)?);
    }
    m.set_entries(entries.into());
    m.set_commit(u.arbitrary()?);
    m.set_commit_term(u.arbitrary()?);
    if u.arbitrary()? {
        let mut cs = ConfState::default();
        cs.set_voters(ids(u)?);
        cs.set_learners(ids(u)?);
        cs.set_voters_outgoing(ids(u)?);
        cs.set_learners_next(ids(u)?);
        cs.set_auto_leave(u.arbitrary()?);
        let mut meta = SnapshotMetadata::default();
        meta.set_conf_state(cs);
        meta.set_index(u.arbitrary()?);
        meta.set_term(u.arbitrary()?);
        let mut s = Snapshot::default();
        s.set_data(bytes(u)?.into());
        s.set_metadata(meta);
        m.set_snapshot(s);
    }
    m.set_request_snapshot(u.arbitrary()?);
    m.set_reject(u.arbitrary()?);
    m.set_reject_hint(u.arbitrary()?);
    m.set_context(bytes(u)?.into());
    m.set_deprecated_priority(u.arbitrary()?);
    m.set_priority(u.arbitrary()?);
    Ok(m)
}

fuzz_target!(|data: &[u8]| {
    let Ok(m) = message(&mut Unstructured::new(data)) else { return };
    let bytes = m.write_to_bytes().expect("a built message encodes");
    if let Err(e) = raft_wire::check_message(&bytes) {
        panic!("raft's own encoding refused: {e}\n{m:?}");
    }
    assert_eq!(Message::parse_from_bytes(&bytes).expect("parses"), m);
});
