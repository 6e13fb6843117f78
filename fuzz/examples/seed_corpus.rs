//! Writes the seed corpora: a handful of real encodings per fuzz target, into
//! `fuzz/corpus/<target>/seed-*` (deterministic; scripts/fuzz.sh runs it before fuzzing).
//! Usage: `seed_corpus <fuzz dir>`.

use prost::Message as _;
use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeSingle, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType,
    HardState, Message, MessageType, Snapshot,
};
use seqsvr_core::arbiter::LeaseConfig;
use seqsvr_core::ids::{AllocId, LeaseEpoch, SectionId, Seq};
use seqsvr_core::idscheme::{Fields, LayoutSpec, Scheme};
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::{Command, SectionAdvance, StoreState};
use seqsvr_proto::v1 as pb;
use std::path::{Path, PathBuf};

struct Out(PathBuf);

impl Out {
    fn put(&self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.0.join("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("creates the corpus dir");
        std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("writes a seed");
    }
}

fn with(selector: u8, bytes: &[u8]) -> Vec<u8> {
    [&[selector][..], bytes].concat()
}

fn commands() -> Vec<(&'static str, Command)> {
    let range = |b, e| SectionRange::new(SectionId(b), SectionId(e)).expect("a range");
    vec![
        ("register", Command::RegisterAlloc { addr: "127.0.0.1:7201".into(), identity: None }),
        (
            "register-tls",
            Command::RegisterAlloc { addr: "alloc1:7201".into(), identity: Some("alloc-1".into()) },
        ),
        (
            "set-lease",
            Command::SetLease {
                lease: LeaseConfig { lease_ms: 5000, margin_ms: 500 },
                after_change: 0,
            },
        ),
        (
            "assign",
            Command::Assign {
                moves: vec![(range(0, 100), AllocId(1)), (range(100, 200), AllocId(2))],
                settled: false,
            },
        ),
        ("settle", Command::Settle { lease_epoch: LeaseEpoch(1) }),
        (
            "advance",
            Command::AdvanceMaxSeq {
                alloc: Some(AllocId(1)),
                sections: vec![SectionAdvance {
                    section: SectionId(3),
                    max_seq: Seq(10_000),
                    lease_epoch: LeaseEpoch(1),
                }],
            },
        ),
        (
            "operator-advance",
            Command::AdvanceMaxSeq {
                alloc: None,
                sections: vec![SectionAdvance {
                    section: SectionId(150),
                    max_seq: Seq(1 << 20),
                    lease_epoch: LeaseEpoch(0),
                }],
            },
        ),
        ("drain", Command::SetDraining { alloc: AllocId(2), draining: true }),
        ("release", Command::ReleaseAlloc { alloc: AllocId(2) }),
        ("remove", Command::RemoveAlloc { alloc: AllocId(3) }),
    ]
}

fn entry(t: EntryType, index: u64, data: Vec<u8>) -> Entry {
    let mut e = Entry::default();
    e.set_entry_type(t);
    e.set_term(2);
    e.set_index(index);
    e.set_data(data.into());
    e
}

fn conf_change() -> ConfChange {
    let mut c = ConfChange::default();
    c.set_change_type(ConfChangeType::AddLearnerNode);
    c.set_node_id(4);
    c.set_context(b"127.0.0.1:7104".to_vec().into());
    c
}

fn conf_change_v2() -> ConfChangeV2 {
    let mut s = ConfChangeSingle::default();
    s.set_change_type(ConfChangeType::AddNode);
    s.set_node_id(4);
    let mut c = ConfChangeV2::default();
    c.set_changes(vec![s].into());
    c
}

fn conf_state() -> ConfState {
    let mut cs = ConfState::default();
    cs.set_voters(vec![1, 2, 3]);
    cs.set_learners(vec![4]);
    cs
}

fn snapshot(state: &StoreState) -> Snapshot {
    let mut s = Snapshot::default();
    s.set_data(state.encode_snapshot().into());
    let meta = s.mut_metadata();
    meta.set_index(40);
    meta.set_term(2);
    meta.set_conf_state(conf_state());
    s
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let out = Out(Path::new(&dir).to_path_buf());

    // The state machine after a realistic run of commands.
    let mut state = StoreState::new();
    for (name, c) in commands() {
        state.apply(&c);
        out.put("store_command", name, &c.encode());
    }
    out.put("store_control_state", "after-run", &state.control().encode());
    out.put("store_control_state", "empty", &StoreState::new().control().encode());
    out.put("store_snapshot", "after-run", &state.encode_snapshot());
    out.put("store_snapshot", "empty", &StoreState::new().encode_snapshot());

    // Raft messages as peers send them.
    let data: Vec<Entry> = commands()
        .into_iter()
        .take(4)
        .enumerate()
        .map(|(i, (_, c))| entry(EntryType::EntryNormal, 10 + i as u64, c.encode()))
        .collect();
    let mut append = Message::default();
    append.set_msg_type(MessageType::MsgAppend);
    append.set_to(2);
    append.set_from(1);
    append.set_term(2);
    append.set_log_term(2);
    append.set_index(9);
    append.set_commit(9);
    let mut entries = data.clone();
    entries.push(entry(EntryType::EntryConfChange, 14, conf_change().write_to_bytes().unwrap()));
    entries.push(entry(
        EntryType::EntryConfChangeV2,
        15,
        conf_change_v2().write_to_bytes().unwrap(),
    ));
    append.set_entries(entries.into());
    let mut heartbeat = Message::default();
    heartbeat.set_msg_type(MessageType::MsgHeartbeat);
    heartbeat.set_to(3);
    heartbeat.set_from(1);
    heartbeat.set_term(2);
    heartbeat.set_commit(9);
    heartbeat.set_context(b"read-7".to_vec().into());
    let mut vote = Message::default();
    vote.set_msg_type(MessageType::MsgRequestPreVote);
    vote.set_from(2);
    vote.set_term(3);
    vote.set_log_term(2);
    vote.set_index(15);
    vote.set_priority(-1);
    let mut snap = Message::default();
    snap.set_msg_type(MessageType::MsgSnapshot);
    snap.set_to(4);
    snap.set_from(1);
    snap.set_term(2);
    snap.set_snapshot(snapshot(&state));
    for (name, m) in
        [("append", &append), ("heartbeat", &heartbeat), ("prevote", &vote), ("snapshot", &snap)]
    {
        out.put("raft_message", name, &m.write_to_bytes().unwrap());
    }
    // raft_encoded builds its messages from raw bytes: a few arbitrary byte strings.
    for (i, n) in [16usize, 64, 256].into_iter().enumerate() {
        let bytes: Vec<u8> = (0..n).map(|j| (j * 37 + i * 11) as u8).collect();
        out.put("raft_encoded", &format!("bytes-{n}"), &bytes);
    }

    // Raft records as storage keeps them: selector (0 entry … 5 snapshot) then the record.
    let mut hard = HardState::default();
    hard.set_term(2);
    hard.set_vote(1);
    hard.set_commit(9);
    out.put("raft_storage", "entry", &with(0, &data[0].write_to_bytes().unwrap()));
    let cc = entry(EntryType::EntryConfChange, 14, conf_change().write_to_bytes().unwrap());
    out.put("raft_storage", "entry-conf-change", &with(0, &cc.write_to_bytes().unwrap()));
    out.put("raft_storage", "hard-state", &with(1, &hard.write_to_bytes().unwrap()));
    out.put("raft_storage", "conf-state", &with(2, &conf_state().write_to_bytes().unwrap()));
    out.put("raft_storage", "conf-change", &with(3, &conf_change().write_to_bytes().unwrap()));
    out.put(
        "raft_storage",
        "conf-change-v2",
        &with(4, &conf_change_v2().write_to_bytes().unwrap()),
    );
    out.put("raft_storage", "snapshot", &with(5, &snapshot(&state).write_to_bytes().unwrap()));

    // Cluster configs: the repository's own.
    let root = Path::new(&dir).join("..").join("config");
    for name in ["cluster.toml", "compose.toml", "compose-2sets.toml"] {
        if let Ok(text) = std::fs::read(root.join(name)) {
            out.put("cluster_config", name, &text);
        }
    }
    out.put(
        "cluster_config",
        "tls.toml",
        br#"section_size = 100
[[sets]]
id = 0
uid_begin = 0
uid_end = 1000
stores = [{ id = 1, addr = "store1:7101" }, { id = 2, addr = "store2:7101" }]
allocs = ["alloc1:7201"]
[tls]
server_name = "seqsvr.test"
client_ca = "ca/client.pem"
store_ca = "ca/store.pem"
peer_ca = "ca/peer.pem"
[tls.identities]
"app-1" = "client"
"alloc-1" = "alloc"
"ops" = "admin"
"store-1" = { role = "peer", set = 0, node = 1 }
"#,
    );

    // Id text forms: selector (the scheme) then an id's text, or its 16 little-endian bytes.
    const NOW_MS: u64 = 1_700_000_000_000;
    for (i, scheme) in Scheme::ALL.into_iter().enumerate() {
        let layout = LayoutSpec::of(scheme).load(NOW_MS).expect("default layouts load");
        let fields = Fields {
            time: 1_000_000,
            worker: if layout.width(seqsvr_core::idscheme::Part::Worker) > 0 { 5 } else { 0 },
            sequence: 7,
            ..Fields::default()
        };
        let id = layout.encode(&fields).expect("encodes");
        let text = layout.format(id).expect("formats");
        out.put("id_text", &format!("{scheme}-text"), &with(i as u8, text.as_bytes()));
        out.put("id_text", &format!("{scheme}-bits"), &with(i as u8, &id.to_le_bytes()));
    }

    // gRPC messages: selector (see proto_messages.rs) then the message.
    let route = pb::RouteTable {
        set_id: 0,
        version: 3,
        uid_begin: 0,
        uid_end: 10_000_000,
        section_size: 100_000,
        entries: vec![pb::RouteEntry {
            section_begin: 0,
            section_end: 100,
            alloc_id: 1,
            addr: "127.0.0.1:7201".into(),
        }],
    };
    out.put("proto_messages", "route-table", &with(17, &route.encode_to_vec()));
    let next =
        pb::NextBatchRequest { uids: vec![1, 2, 3, 100_000], route_version: 3, independent: false };
    out.put("proto_messages", "next-batch", &with(1, &next.encode_to_vec()));
    let advance = pb::AdvanceMaxSeqRequest {
        alloc_id: 1,
        sections: vec![pb::SectionMaxSeq { section: 3, max_seq: 20_000, lease_epoch: 1 }],
    };
    out.put("proto_messages", "advance", &with(3, &advance.encode_to_vec()));
    let batch = pb::RaftMessageBatch {
        set_id: 0,
        from: 1,
        messages: vec![heartbeat.write_to_bytes().unwrap()],
        from_addr: "127.0.0.1:7101".into(),
        sender_vote_blocked: false,
        sender_commands_version: 1,
        sender_layout: None,
    };
    out.put("proto_messages", "raft-batch", &with(16, &batch.encode_to_vec()));
    out.put("proto_messages", "grpc-timeout", &with(23, b"1500m"));
}
