//! `NodeStorage` against raft-rs's `MemStorage`: the same operations must give the same answers,
//! and everything must survive a reopen.

use super::*;
use proptest::prelude::*;
use raft::storage::MemStorage;
use raft::Storage;
use seqsvr_core::store::{Applied, Command, SectionAdvance};

fn advance(sections: &[(u64, u64)]) -> Command {
    Command::AdvanceMaxSeq {
        alloc: None,
        sections: sections
            .iter()
            .map(|&(s, v)| SectionAdvance {
                section: SectionId(s),
                max_seq: seqsvr_core::ids::Seq(v),
                lease_epoch: seqsvr_core::ids::LeaseEpoch(0),
            })
            .collect(),
    }
}

fn identity() -> Identity {
    Identity { set_id: SetId(0), node_id: NodeId(1) }
}

fn voters() -> Bootstrap {
    Bootstrap::NewSet((1..=3).map(|id| (NodeId(id), format!("127.0.0.1:{}", 7100 + id))).collect())
}

fn entry(index: u64, term: u64) -> Entry {
    let mut e = Entry { index, term, ..Default::default() };
    e.set_data(format!("entry {index}@{term}").into_bytes().into());
    e
}

/// A new set in raft-rs's `MemStorage` layout (log from index 1), to compare against it.
fn open(dir: &Path) -> NodeStorage {
    NodeStorage::open_with_log_start(dir, identity(), &voters(), 0).expect("open")
}

/// Compares every read the Raft core makes on the two storages.
fn check_same(ours: &NodeStorage, mem: &MemStorage) {
    assert_eq!(ours.first_index().unwrap(), mem.first_index().unwrap(), "first_index");
    assert_eq!(ours.last_index().unwrap(), mem.last_index().unwrap(), "last_index");
    let first = ours.first_index().unwrap();
    let last = ours.last_index().unwrap();
    for idx in first..=last + 1 {
        assert_eq!(
            ours.term(idx).map_err(|e| e.to_string()),
            mem.term(idx).map_err(|e| e.to_string()),
            "term({idx})"
        );
    }
    // The term of the truncated index must answer (MemStorage only keeps it after a snapshot).
    assert!(ours.term(first - 1).is_ok(), "term of truncated index {}", first - 1);
    if first >= 2 {
        assert!(matches!(ours.term(first - 2), Err(raft::Error::Store(StorageError::Compacted))));
        assert!(matches!(
            ours.entries(first - 1, last + 1, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
    }
    if last >= first {
        let ctx = || GetEntriesContext::empty(false);
        assert_eq!(
            ours.entries(first, last + 1, None, ctx()).unwrap(),
            mem.entries(first, last + 1, None, ctx()).unwrap()
        );
        let one = ours.entries(first, last + 1, Some(0), ctx()).unwrap();
        assert_eq!(one.len(), 1, "max_size 0 still returns one entry");
    }
}

#[test]
fn fresh_store_starts_like_mem_storage_with_conf_state() {
    let dir = tempfile::tempdir().unwrap();
    let ours = open(dir.path());
    let mem = MemStorage::new_with_conf_state(ConfState::from((vec![1, 2, 3], vec![])));
    check_same(&ours, &mem);
    assert_eq!(ours.initial_state().unwrap().conf_state.voters, vec![1, 2, 3]);
    assert_eq!(ours.applied_index(), 0);
}

#[test]
fn append_overwrite_compact_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut ours = open(dir.path());
    let mem = MemStorage::new_with_conf_state(ConfState::from((vec![1, 2, 3], vec![])));
    let ents: Vec<Entry> = (1..=10).map(|i| entry(i, 1)).collect();
    ours.persist(None, &ents, None).unwrap();
    mem.wl().append(&ents).unwrap();
    check_same(&ours, &mem);

    // A new leader overwrites a conflicting suffix.
    let newer: Vec<Entry> = (7..=8).map(|i| entry(i, 2)).collect();
    ours.persist(None, &newer, None).unwrap();
    mem.wl().append(&newer).unwrap();
    check_same(&ours, &mem);

    // Compaction keeps the term of the truncated index.
    ours.commit_apply(AppliedBatch { applied_index: 6, ..Default::default() }).unwrap();
    ours.compact(5).unwrap();
    mem.wl().compact(6).unwrap(); // MemStorage keeps entry `compact_index` as its dummy.
    assert_eq!(ours.first_index().unwrap(), 6);
    assert_eq!(ours.term(5).unwrap(), 1);
    assert!(matches!(ours.term(4), Err(raft::Error::Store(StorageError::Compacted))));
    let hs = HardState { term: 2, commit: 7, vote: 3, ..Default::default() };
    ours.persist(None, &[], Some(&hs)).unwrap();

    drop(ours);
    let again = open(dir.path());
    assert_eq!(again.hard_state(), &hs);
    assert_eq!(again.first_index().unwrap(), 6);
    assert_eq!(again.last_index().unwrap(), 8);
    assert_eq!(again.term(8).unwrap(), 2);
    assert_eq!(again.term(5).unwrap(), 1);
    assert_eq!(again.applied_index(), 6);
    assert_eq!(
        again.entries(6, 9, None, GetEntriesContext::empty(false)).unwrap(),
        mem.entries(6, 9, None, GetEntriesContext::empty(false)).unwrap()
    );
}

#[test]
fn applied_state_survives_reopen_and_snapshots_carry_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut ours = open(dir.path());
    ours.persist(None, &[entry(1, 1), entry(2, 1)], None).unwrap();
    let out = ours.state_mut().apply(&advance(&[(4, 500), (9, 7)]));
    let reg =
        ours.state_mut().apply(&Command::RegisterAlloc { addr: "a:1".into(), identity: None });
    assert!(matches!(reg.result, Ok(Applied::Registered(_))));
    ours.commit_apply(AppliedBatch {
        applied_index: 2,
        changed: out.changed,
        control_changed: true,
        ..Default::default()
    })
    .unwrap();
    let snap = ours.snapshot(0, 2).unwrap();
    assert_eq!(snap.get_metadata().index, 2);
    assert_eq!(snap.get_metadata().term, 1);
    assert!(matches!(
        ours.snapshot(3, 2),
        Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable))
    ));
    drop(ours);
    let again = open(dir.path());
    assert_eq!(again.state().max_seq(SectionId(4)), 500);
    assert_eq!(again.state().control().allocs.len(), 1, "control state persisted");
    assert_eq!(again.state().max_seq(SectionId(9)), 7);

    // A member far behind installs the snapshot and agrees.
    let dir2 = tempfile::tempdir().unwrap();
    let mut behind = NodeStorage::open_with_log_start(
        dir2.path(),
        Identity { set_id: SetId(0), node_id: NodeId(2) },
        &voters(),
        0,
    )
    .unwrap();
    behind.persist(Some(&snap), &[entry(3, 1)], None).unwrap();
    assert_eq!(behind.state(), again.state());
    assert_eq!(behind.applied_index(), 2);
    assert_eq!(behind.first_index().unwrap(), 3);
    assert_eq!(behind.term(2).unwrap(), 1);
    assert_eq!(behind.hard_state().commit, 2);
    drop(behind);
    let behind = NodeStorage::open(
        dir2.path(),
        Identity { set_id: SetId(0), node_id: NodeId(2) },
        &voters(),
    )
    .unwrap();
    assert_eq!(behind.state(), again.state());
    assert_eq!(behind.last_index().unwrap(), 3);
}

#[test]
fn snapshot_that_lowers_a_section_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut ours = open(dir.path());
    ours.persist(None, &[entry(1, 1)], None).unwrap();
    let out = ours.state_mut().apply(&advance(&[(1, 100)]));
    ours.commit_apply(AppliedBatch {
        applied_index: 1,
        changed: out.changed,
        ..Default::default()
    })
    .unwrap();
    let mut snap = Snapshot::default();
    snap.set_data(StoreState::new().encode_snapshot().into());
    snap.mut_metadata().index = 5;
    snap.mut_metadata().term = 2;
    let err = ours.persist(Some(&snap), &[], None).unwrap_err().to_string();
    assert!(err.contains("section 1's max_seq would go from 100 down to 0"), "{err}");
    assert_eq!(ours.state().max_seq(SectionId(1)), 100, "nothing changed");
}

#[test]
fn refuses_foreign_or_mismatched_data_dirs() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    let other = Identity { set_id: SetId(0), node_id: NodeId(2) };
    let err = NodeStorage::open(dir.path(), other, &voters()).err().unwrap().to_string();
    assert!(err.contains("belongs to set 0 member 1"), "{err}");

    let junk = tempfile::tempdir().unwrap();
    std::fs::write(junk.path().join("notes.txt"), "not a database").unwrap();
    let err = NodeStorage::open(junk.path(), identity(), &voters()).err().unwrap().to_string();
    assert!(err.contains("Refusing to start"), "{err}");
    assert!(junk.path().join("notes.txt").exists(), "nothing was re-initialised");

    // A RocksDB without our identity record (e.g. another program's) is refused too.
    let foreign = tempfile::tempdir().unwrap();
    {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        let db = DB::open(&opts, foreign.path()).unwrap();
        db.put(b"k", b"v").unwrap();
    }
    let err = NodeStorage::open(foreign.path(), identity(), &voters()).err().unwrap().to_string();
    assert!(err.contains("identity"), "{err}");
}

#[test]
fn corrupt_log_is_detected_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut ours = open(dir.path());
    ours.persist(None, &(1..=3).map(|i| entry(i, 1)).collect::<Vec<_>>(), None).unwrap();
    ours.db.delete(log_key(2)).unwrap();
    drop(ours);
    let err = NodeStorage::open(dir.path(), identity(), &voters()).err().unwrap().to_string();
    assert!(err.contains("log gap"), "{err}");
}

/// Finding 7 of issue 30: `n` Readies, each one synced batch (an entry of ~400 bytes and the
/// hard state that commits it), so that the WAL spans several 32 KiB blocks.
fn persist_many(ours: &mut NodeStorage, n: u64) {
    for i in 1..=n {
        let mut e = entry(i, 1 + i / 100);
        e.set_data(vec![b'x'; 400].into());
        let hs = HardState { term: 1 + i / 100, vote: 2, commit: i, ..Default::default() };
        ours.persist(None, &[e], Some(&hs)).unwrap();
    }
}

/// The data dir's one write-ahead log file (RocksDB's `NNNNNN.log`).
fn the_wal(dir: &Path) -> PathBuf {
    let logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    assert_eq!(logs.len(), 1, "one WAL expected: {logs:?}");
    logs.into_iter().next().unwrap()
}

/// A record damaged in the middle of the WAL, valid records after it: RocksDB's default
/// (point-in-time recovery) would open without everything from the damage on (an older hard
/// state: a vote forgotten, a shorter log). The store must refuse, naming the WAL file and
/// what to do.
#[test]
fn a_damaged_wal_record_with_valid_records_after_it_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut ours = open(dir.path());
    persist_many(&mut ours, 300);
    drop(ours);
    let wal = the_wal(dir.path());
    let mut bytes = std::fs::read(&wal).unwrap();
    assert!(bytes.len() > 3 * 32 * 1024, "the WAL spans several blocks: {} bytes", bytes.len());
    // In the first block, past the bootstrap batch: about entry 45 of 300.
    let at = 20_000;
    bytes[at] ^= 0x20;
    std::fs::write(&wal, &bytes).unwrap();

    let err = match NodeStorage::open(dir.path(), identity(), &voters()) {
        Ok(s) => panic!(
            "opened a store with a damaged WAL record: last index {}, hard state {:?}",
            s.last_index().unwrap(),
            s.hard_state()
        ),
        Err(e) => e,
    };
    assert!(matches!(err, StorageFault::Damaged { .. }), "{err}");
    let msg = err.to_string();
    let name = wal.file_name().unwrap().to_string_lossy().into_owned();
    assert!(msg.contains(&name), "names the WAL file {name}: {msg}");
    assert!(msg.contains("Replace a dead member"), "says what to do: {msg}");
    // Refusing changed nothing: the damaged file is still there, as it was.
    assert_eq!(std::fs::read(&wal).unwrap(), bytes, "the WAL is left for diagnosis");
}

/// The last record cut short (the write a power cut interrupted, never acknowledged): the store
/// opens without it, with everything before it.
#[test]
fn a_wal_whose_last_record_was_cut_short_opens_without_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut ours = open(dir.path());
    persist_many(&mut ours, 50);
    drop(ours);
    let wal = the_wal(dir.path());
    let len = std::fs::metadata(&wal).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&wal).unwrap().set_len(len - 100).unwrap();

    let again = open(dir.path());
    assert_eq!(again.last_index().unwrap(), 49, "only the cut record is gone");
    assert_eq!(again.hard_state().commit, 49, "with the hard state of its batch");
    let entries = again.entries(1, 50, None, GetEntriesContext::empty(false)).unwrap();
    assert_eq!(entries.len(), 49);
}

#[derive(Clone, Debug)]
enum Op {
    /// Append `n` entries of `term` starting `back` entries before the end (overwriting).
    Append {
        back: u64,
        n: u64,
        term_bump: u64,
    },
    /// Apply and compact up to a fraction of the log.
    Compact {
        permille: u64,
    },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..4, 1u64..6, 0u64..2).prop_map(|(back, n, term_bump)| Op::Append { back, n, term_bump }),
        1 => (0u64..1000).prop_map(|permille| Op::Compact { permille }),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random appends (with overwrites), compactions and reopens: `NodeStorage` answers like
    /// `MemStorage` after every step.
    #[test]
    fn behaves_like_mem_storage(ops in prop::collection::vec(op(), 1..30)) {
        let dir = tempfile::tempdir().unwrap();
        let mut ours = Some(open(dir.path()));
        let mem = MemStorage::new_with_conf_state(ConfState::from((vec![1, 2, 3], vec![])));
        let mut term = 1;
        for op in ops {
            let s = ours.as_mut().unwrap();
            match op {
                Op::Append { back, n, term_bump } => {
                    term += term_bump;
                    let last = s.last_index().unwrap();
                    let first = s.first_index().unwrap();
                    let start = (last + 1).saturating_sub(back).max(first).max(s.applied_index() + 1);
                    let ents: Vec<Entry> = (start..start + n).map(|i| entry(i, term)).collect();
                    s.persist(None, &ents, None).unwrap();
                    mem.wl().append(&ents).unwrap();
                }
                Op::Compact { permille } => {
                    let (first, last) = (s.first_index().unwrap(), s.last_index().unwrap());
                    // MemStorage forgets its first index if compacted empty: keep one entry.
                    if last > first {
                        let to = first + (last - first) * permille / 1000;
                        s.commit_apply(AppliedBatch { applied_index: to.max(s.applied_index()), ..Default::default() }).unwrap();
                        s.compact(to).unwrap();
                        mem.wl().compact(to + 1).unwrap();
                    }
                }
                Op::Reopen => {
                    drop(ours.take());
                    ours = Some(open(dir.path()));
                }
            }
            check_same(ours.as_ref().unwrap(), &mem);
        }
    }
}

#[test]
fn a_section_raised_by_several_entries_of_one_batch_persists_its_last_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut ours = open(dir.path());
    ours.persist(None, &[entry(1, 1), entry(2, 1)], None).unwrap();
    let mut changed = Vec::new();
    for v in [49, 105] {
        let out = ours.state_mut().apply(&advance(&[(3, v)]));
        changed.extend(out.changed);
    }
    ours.commit_apply(AppliedBatch { applied_index: 2, changed, ..Default::default() }).unwrap();
    drop(ours);
    assert_eq!(open(dir.path()).state().max_seq(SectionId(3)), 105);
}

#[test]
fn an_empty_dir_of_an_existing_set_has_no_configuration_and_may_not_vote() {
    let dir = tempfile::tempdir().unwrap();
    let joined = NodeStorage::open(dir.path(), identity(), &Bootstrap::Join).unwrap();
    assert!(joined.vote_blocked());
    assert!(joined.conf_state().voters.is_empty(), "no configuration until the leader sends one");
    assert!(joined.members().is_empty());
    drop(joined);
    // Reopened: still blocked, whatever the start flag says now.
    let again = NodeStorage::open(dir.path(), identity(), &voters()).unwrap();
    assert!(again.vote_blocked(), "the block survives a restart");
    assert!(again.conf_state().voters.is_empty(), "a stored dir ignores the bootstrap");
}

#[test]
fn a_new_set_starts_its_log_after_the_bootstrap_index_so_joiners_need_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let ours = NodeStorage::open(dir.path(), identity(), &voters()).unwrap();
    assert_eq!(ours.first_index().unwrap(), BOOTSTRAP_LOG_INDEX + 1);
    assert_eq!(ours.last_index().unwrap(), BOOTSTRAP_LOG_INDEX);
    assert_eq!(ours.term(BOOTSTRAP_LOG_INDEX).unwrap(), BOOTSTRAP_LOG_TERM);
    assert_eq!(ours.applied_index(), BOOTSTRAP_LOG_INDEX);
    assert_eq!(ours.hard_state().commit, BOOTSTRAP_LOG_INDEX);
    assert!(matches!(
        ours.entries(1, BOOTSTRAP_LOG_INDEX + 1, None, GetEntriesContext::empty(false)),
        Err(raft::Error::Store(StorageError::Compacted))
    ));
    // A snapshot of it carries the configuration to a joiner.
    let snap = raft::Storage::snapshot(&ours, 0, 4).unwrap();
    assert_eq!(snap.get_metadata().index, BOOTSTRAP_LOG_INDEX);
    assert_eq!(snap.get_metadata().get_conf_state().voters, vec![1, 2, 3]);
}

#[test]
fn a_new_set_bootstraps_voters_and_the_member_directory() {
    let dir = tempfile::tempdir().unwrap();
    let ours = open(dir.path());
    assert!(!ours.vote_blocked());
    assert_eq!(ours.conf_state().voters, vec![1, 2, 3]);
    assert_eq!(ours.members().get(&2).map(String::as_str), Some("127.0.0.1:7102"));
}

#[test]
fn the_block_lifts_only_through_commit_apply_and_stays_lifted() {
    let dir = tempfile::tempdir().unwrap();
    let mut joined = NodeStorage::open(dir.path(), identity(), &Bootstrap::Join).unwrap();
    let mut members = Members::new();
    members.insert(1, "127.0.0.1:1".into());
    members.insert(4, "127.0.0.1:4".into());
    joined
        .commit_apply(AppliedBatch {
            applied_index: 0,
            members: Some(members.clone()),
            vote_unblocked: true,
            ..Default::default()
        })
        .unwrap();
    assert!(!joined.vote_blocked());
    drop(joined);
    let again = NodeStorage::open(dir.path(), identity(), &Bootstrap::Join).unwrap();
    assert!(!again.vote_blocked());
    assert_eq!(again.members(), &members);
}

#[test]
fn snapshots_carry_the_member_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut ours = open(dir.path());
    ours.persist(None, &[entry(1, 1)], None).unwrap();
    ours.commit_apply(AppliedBatch { applied_index: 1, ..Default::default() }).unwrap();
    let snap = raft::Storage::snapshot(&ours, 1, 2).unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let mut joined = NodeStorage::open(
        dir2.path(),
        Identity { set_id: SetId(0), node_id: NodeId(2) },
        &Bootstrap::Join,
    )
    .unwrap();
    joined.persist(Some(&snap), &[], None).unwrap();
    assert_eq!(joined.members(), ours.members());
    assert!(joined.vote_blocked(), "a snapshot never lifts the block");
    // A snapshot from before the directory existed is still understood.
    let (members, state) = decode_snapshot_data(b"{}").unwrap();
    assert!(members.is_none());
    assert_eq!(state, b"{}");
}
