//! Durable state of one StoreSvr member in RocksDB: the Raft log, hard state, conf state, the
//! truncation point, and the state machine with its applied index.
//!
//! `NodeStorage` implements raft-rs's [`Storage`] with the same semantics as `MemStorage` (the unit
//! tests check both side by side) and owns the [`StoreState`], because raft-rs asks the storage
//! for snapshots of it.
//!
//! Durability rules:
//! - [`NodeStorage::persist`] writes a Ready's snapshot, entries and hard state in ONE synced
//!   `WriteBatch`; the driver sends persisted messages only after it returns.
//! - [`NodeStorage::commit_apply`] writes applied state without fsync: everything it holds can be
//!   re-derived from the synced log. RocksDB's WAL is sequential, so the next synced write (every
//!   `persist` and `compact`) makes it durable before any log entry it depends on is deleted.
//! - Any failed write is fatal to the process: the caller must stop rather than acknowledge.
//!
//! Key layout (one column family, big-endian integers so keys sort by index):
//! `m:identity`, `m:vote_blocked`, `r:hard_state`, `r:conf_state`, `r:members` (the replicated
//! member directory: id → address, JSON), `r:truncated` (index, term), `s:applied`,
//! `l:<index>` → `Entry`, `s:sec:<section>` → `max_seq`, `s:control` → the arbiter's
//! `ControlState` (small: rewritten whole when it changes).
//!
//! Bootstrap ([`Bootstrap`]): an empty data dir becomes either one of a new set's initial voters
//! (`--initial-cluster-state new`) or an empty member with no configuration that may not vote
//! (`existing`): a member whose disk was lost must never count as a returning voter, since the
//! entries it acknowledged before are gone (DESIGN §8).

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};
use rocksdb::{
    DBRecoveryMode, Direction, IteratorMode, Options, ReadOptions, WriteBatch, WriteOptions, DB,
};
use seqsvr_core::ids::{NodeId, SectionId, SetId};
use seqsvr_core::store::{ControlState, StoreState};
use seqsvr_core::teeth::Tooth;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

const KEY_IDENTITY: &[u8] = b"m:identity";
const KEY_VOTE_BLOCKED: &[u8] = b"m:vote_blocked";
const KEY_MEMBERS: &[u8] = b"r:members";
/// Snapshots carry the member directory in front of the state machine's own encoding.
const SNAPSHOT_MAGIC: &[u8] = b"SQSNAP2\0";
const KEY_HARD_STATE: &[u8] = b"r:hard_state";
const KEY_CONF_STATE: &[u8] = b"r:conf_state";
const KEY_TRUNCATED: &[u8] = b"r:truncated";
const KEY_APPLIED: &[u8] = b"s:applied";
const KEY_CONTROL: &[u8] = b"s:control";
const PREFIX_LOG: &[u8] = b"l:";
const PREFIX_SECTION: &[u8] = b"s:sec:";

fn log_key(index: u64) -> Vec<u8> {
    [PREFIX_LOG, &index.to_be_bytes()].concat()
}

fn section_key(section: SectionId) -> Vec<u8> {
    [PREFIX_SECTION, &section.0.to_be_bytes()].concat()
}

/// The first key past every key starting with `prefix` (prefixes here end below 0xff).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

#[derive(Debug, thiserror::Error)]
pub enum StorageFault {
    #[error("RocksDB at {path}: {source}")]
    Rocks { path: PathBuf, source: rocksdb::Error },
    #[error(
        "data dir {path} is not usable: {reason}. Refusing to start; it will not be \
         re-initialised. Move it away only if this member's data is to be discarded."
    )]
    Unusable { path: PathBuf, reason: String },
    #[error("corrupt store in {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// RocksDB found a damaged record while opening (see [`db_options`]).
    #[error(
        "data dir {path} is damaged: cannot open RocksDB ({source}). Refusing to start; it \
         will not be re-initialised or repaired. Write-ahead log files: {wal_files}; RocksDB's \
         own log {path}/LOG names a damaged one (\"dropping N bytes\"). The store holds writes \
         this member acknowledged: opening without them could bring back an older vote or a \
         shorter log, and elect a leader that lacks committed entries. Keep the dir for \
         diagnosis and replace this member as README \"Replace a dead member\" says: `seqctl \
         store remove`, move the dir away, start it again on an empty data dir with \
         `--initial-cluster-state existing`, then `seqctl store add-learner` and `promote`."
    )]
    Damaged { path: PathBuf, wal_files: String, source: rocksdb::Error },
    /// The set recorded a layout (`Command::RecordLayout`) other than this member's cluster
    /// file's, learned while running (the record applied, or came in a snapshot): the member
    /// stops, as it refuses to start on it (`Driver::new`). Not a fault of the disk, but of the
    /// same weight: it must take no further part in the set (no vote, no leadership, no answer).
    #[error(
        "refusing to run: {why}. This member stopped (it no longer votes, leads or answers); \
         it refuses to start until its cluster file is restored"
    )]
    LayoutMismatch { why: String },
}

/// In-memory encodes of our own records cannot fail; if one did, writing empty bytes to disk
/// would be far worse than stopping the process.
const ENCODES: &str = "encoding an in-memory record cannot fail";

/// Who this data dir belongs to; written once at creation and checked at every start, so a data
/// dir is never served by the wrong member or set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub set_id: SetId,
    pub node_id: NodeId,
}

/// Where a new set's log starts: its initial configuration is folded into a "snapshot" at this
/// index and term (as TiKV's RAFT_INIT_LOG_INDEX), so the log never holds the entries before the
/// configuration existed and a member added later can only catch up by a snapshot, which
/// carries the configuration. (Replaying index 1 onward on an empty member would apply the first
/// membership change to an empty configuration.)
pub const BOOTSTRAP_LOG_INDEX: u64 = 5;
pub const BOOTSTRAP_LOG_TERM: u64 = 5;

/// The replicated member directory: node id → the address the others dial.
pub type Members = std::collections::BTreeMap<u64, String>;

/// What an empty data dir becomes (a dir that holds a store ignores it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// One of a new set's initial members: these are the voters, with their addresses.
    NewSet(Vec<(NodeId, String)>),
    /// A member of an existing set: no configuration, may not vote until a membership change
    /// applied from the log makes it a voter (it is added as a learner, caught up, promoted).
    Join,
}

/// A snapshot's payload: the member directory and the state machine.
pub fn encode_snapshot_data(members: &Members, state: &[u8]) -> Vec<u8> {
    let members = serde_json::to_vec(members).expect(ENCODES);
    let mut out = Vec::with_capacity(SNAPSHOT_MAGIC.len() + 4 + members.len() + state.len());
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.extend_from_slice(&(members.len() as u32).to_be_bytes());
    out.extend_from_slice(&members);
    out.extend_from_slice(state);
    out
}

/// Splits a snapshot's payload; a snapshot from before the directory existed has none.
pub fn decode_snapshot_data(data: &[u8]) -> Result<(Option<Members>, &[u8]), String> {
    let Some(rest) = data.strip_prefix(SNAPSHOT_MAGIC) else { return Ok((None, data)) };
    let len = rest
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or("snapshot header cut short")?;
    let members = rest.get(4..4 + len).ok_or("snapshot member directory cut short")?;
    let members: Members =
        serde_json::from_slice(members).map_err(|e| format!("snapshot member directory: {e}"))?;
    Ok((Some(members), &rest[4 + len..]))
}

/// What applying a run of committed entries changed, persisted by [`NodeStorage::commit_apply`].
#[derive(Debug, Default)]
pub struct AppliedBatch {
    pub applied_index: u64,
    pub changed: Vec<(SectionId, u64)>,
    /// The control state changed (registry, assignment): rewrite it.
    pub control_changed: bool,
    pub conf_state: Option<ConfState>,
    /// The member directory changed (a membership change applied).
    pub members: Option<Members>,
    /// A membership change applied from the log made this vote-blocked member a voter.
    pub vote_unblocked: bool,
    pub commit_index: Option<u64>,
}

pub struct NodeStorage {
    db: DB,
    path: PathBuf,
    identity: Identity,
    hard_state: HardState,
    conf_state: ConfState,
    /// Index and term of the last entry folded into the state (compaction or snapshot).
    /// Invariant: truncated_index <= applied_index <= last_index.
    truncated_index: u64,
    truncated_term: u64,
    /// Terms of log entries `truncated_index + 1 ..= last_index`, in order.
    terms: VecDeque<u64>,
    applied_index: u64,
    state: StoreState,
    members: Members,
    /// Started empty in an existing set: must not vote or campaign (see [`Bootstrap::Join`]).
    vote_blocked: bool,
}

/// The RocksDB options of a member's store (this file is the only place that opens one).
///
/// WAL recovery: every write the member acknowledges is in a synced `WriteBatch`, so the WAL
/// must replay whole. `TolerateCorruptedTailRecords` accepts only a last record cut short (a
/// write a power cut interrupted: never acknowledged, or an unsynced `commit_apply` that the
/// log re-derives) and refuses to open on any damaged record before the end. RocksDB's default,
/// `PointInTime`, would silently stop the replay there and open without everything after it
/// (an older hard state: a vote forgotten, a shorter log). `AbsoluteConsistency` would also
/// refuse the torn tail of every power cut. WAL tracking in the MANIFEST is left off: it checks
/// only WALs closed before a crash, which with one column family are gone once flushed.
pub(crate) fn db_options(create_if_missing: bool) -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(create_if_missing);
    opts.set_keep_log_file_num(4);
    opts.set_wal_recovery_mode(DBRecoveryMode::TolerateCorruptedTailRecords);
    opts
}

/// The write-ahead log files (`*.log`) in `path` with their sizes, for a refusal's message.
fn wal_files(path: &Path) -> String {
    let mut files: Vec<String> = match std::fs::read_dir(path) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
            .map(|e| {
                let len = e.metadata().map_or_else(|_| "?".into(), |m| m.len().to_string());
                format!("{} ({len} bytes)", e.path().display())
            })
            .collect(),
        Err(e) => return format!("cannot list {}: {e}", path.display()),
    };
    files.sort();
    if files.is_empty() {
        "none".into()
    } else {
        files.join(", ")
    }
}

fn rocks(path: &Path) -> impl Fn(rocksdb::Error) -> StorageFault + '_ {
    move |source| StorageFault::Rocks { path: path.to_path_buf(), source }
}

impl NodeStorage {
    /// Whether `path` is missing or an empty dir (what `open` would initialise).
    pub fn is_fresh(path: &Path) -> Result<bool, StorageFault> {
        match std::fs::read_dir(path) {
            Ok(mut entries) => Ok(entries.next().is_none()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(e) => Err(StorageFault::Unusable { path: path.into(), reason: e.to_string() }),
        }
    }

    /// Opens the member's data dir, creating and initialising it only if it does not exist or is
    /// empty, as `bootstrap` says.
    pub fn open(
        path: &Path,
        identity: Identity,
        bootstrap: &Bootstrap,
    ) -> Result<NodeStorage, StorageFault> {
        Self::open_with_log_start(path, identity, bootstrap, BOOTSTRAP_LOG_INDEX)
    }

    /// `open`, with a new set's log starting after `log_start` (0: raft-rs's `MemStorage`
    /// layout, which the storage tests compare against).
    pub(crate) fn open_with_log_start(
        path: &Path,
        identity: Identity,
        bootstrap: &Bootstrap,
        log_start: u64,
    ) -> Result<NodeStorage, StorageFault> {
        let fresh = Self::is_fresh(path)?;
        let db = DB::open(&db_options(fresh), path).map_err(|e| {
            if e.kind() == rocksdb::ErrorKind::Corruption {
                // Logged by the caller (the process stops with it).
                StorageFault::Damaged { path: path.into(), wal_files: wal_files(path), source: e }
            } else {
                StorageFault::Unusable {
                    path: path.into(),
                    reason: format!("cannot open RocksDB: {e}"),
                }
            }
        })?;
        if fresh {
            let (cs, members, vote_blocked, start) = match bootstrap {
                Bootstrap::NewSet(voters) => (
                    ConfState {
                        voters: voters.iter().map(|v| v.0 .0).collect(),
                        ..Default::default()
                    },
                    voters.iter().map(|(id, addr)| (id.0, addr.clone())).collect(),
                    false,
                    log_start,
                ),
                Bootstrap::Join => (ConfState::default(), Members::new(), true, 0),
            };
            let start_term = if start == 0 { 0 } else { BOOTSTRAP_LOG_TERM };
            let hard_state =
                HardState { term: start_term, vote: 0, commit: start, ..Default::default() };
            let mut batch = WriteBatch::default();
            batch.put(KEY_IDENTITY, serde_json::to_vec(&identity).expect(ENCODES));
            batch.put(KEY_MEMBERS, serde_json::to_vec(&members).expect(ENCODES));
            if vote_blocked {
                batch.put(KEY_VOTE_BLOCKED, [1u8]);
            }
            batch.put(KEY_HARD_STATE, hard_state.write_to_bytes().expect(ENCODES));
            batch.put(KEY_CONF_STATE, cs.write_to_bytes().expect(ENCODES));
            batch.put(KEY_TRUNCATED, encode_pair(start, start_term));
            batch.put(KEY_APPLIED, start.to_be_bytes());
            db.write_opt(batch, &synced()).map_err(rocks(path))?;
        }
        Self::load(db, path, identity)
    }

    fn load(db: DB, path: &Path, expected: Identity) -> Result<NodeStorage, StorageFault> {
        let unusable = |reason: String| StorageFault::Unusable { path: path.into(), reason };
        let corrupt = |reason: String| StorageFault::Corrupt { path: path.into(), reason };
        let get = |key: &[u8]| db.get(key).map_err(rocks(path));

        let identity: Identity = match get(KEY_IDENTITY)? {
            None => {
                return Err(unusable(
                    "it holds a RocksDB without a seqsvr identity record (not a seqsvr store?)"
                        .into(),
                ))
            }
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| corrupt(format!("identity record: {e}")))?,
        };
        if identity != expected {
            return Err(unusable(format!(
                "it belongs to set {} member {}, but this process is set {} member {}",
                identity.set_id, identity.node_id, expected.set_id, expected.node_id
            )));
        }
        let required = |key: &[u8]| -> Result<Vec<u8>, StorageFault> {
            get(key)?.ok_or_else(|| corrupt(format!("missing {}", String::from_utf8_lossy(key))))
        };
        let hard_state = HardState::parse_from_bytes(&required(KEY_HARD_STATE)?)
            .map_err(|e| corrupt(format!("hard state: {e}")))?;
        let conf_state = ConfState::parse_from_bytes(&required(KEY_CONF_STATE)?)
            .map_err(|e| corrupt(format!("conf state: {e}")))?;
        let (truncated_index, truncated_term) = decode_pair(&required(KEY_TRUNCATED)?)
            .ok_or_else(|| corrupt("truncated state".into()))?;
        let applied_index =
            decode_u64(&required(KEY_APPLIED)?).ok_or_else(|| corrupt("applied index".into()))?;

        let mut terms = VecDeque::new();
        let mut expected_index = truncated_index + 1;
        for item in db.iterator_opt(
            IteratorMode::From(&log_key(expected_index), Direction::Forward),
            bounded(PREFIX_LOG),
        ) {
            let (key, value) = item.map_err(rocks(path))?;
            let entry = Entry::parse_from_bytes(&value)
                .map_err(|e| corrupt(format!("log entry {:?}: {e}", key)))?;
            if log_key(entry.index) != *key || entry.index != expected_index {
                return Err(corrupt(format!(
                    "log gap or misplaced entry: expected index {expected_index}, found {} under key {:?}",
                    entry.index, key
                )));
            }
            terms.push_back(entry.term);
            expected_index += 1;
        }
        let last_index = expected_index - 1;

        let mut sections = Vec::new();
        for item in db.iterator_opt(
            IteratorMode::From(PREFIX_SECTION, Direction::Forward),
            bounded(PREFIX_SECTION),
        ) {
            let (key, value) = item.map_err(rocks(path))?;
            let section = decode_u64(&key[PREFIX_SECTION.len()..])
                .ok_or_else(|| corrupt(format!("section key {key:?}")))?;
            let max_seq =
                decode_u64(&value).ok_or_else(|| corrupt(format!("section {section} value")))?;
            sections.push((SectionId(section), max_seq));
        }

        let members: Members = match get(KEY_MEMBERS)? {
            None => Members::new(), // a store from before the directory: the file has them
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| corrupt(format!("member directory: {e}")))?,
        };
        let vote_blocked = get(KEY_VOTE_BLOCKED)?.is_some();
        let control = match get(KEY_CONTROL)? {
            None => ControlState::default(),
            Some(bytes) => {
                ControlState::decode(&bytes).map_err(|e| corrupt(format!("control state: {e}")))?
            }
        };

        if !(truncated_index <= applied_index && applied_index <= last_index.max(hard_state.commit))
        {
            return Err(corrupt(format!(
                "inconsistent indexes: truncated {truncated_index}, applied {applied_index}, last {last_index}, commit {}",
                hard_state.commit
            )));
        }
        if hard_state.commit > last_index {
            return Err(corrupt(format!(
                "commit index {} is past the last log entry {last_index}",
                hard_state.commit
            )));
        }
        Ok(NodeStorage {
            db,
            path: path.into(),
            identity,
            hard_state,
            conf_state,
            truncated_index,
            truncated_term,
            terms,
            applied_index,
            state: StoreState::from_parts(sections, control),
            members,
            vote_blocked,
        })
    }

    /// The replicated member directory (id → address) as of the applied index.
    pub fn members(&self) -> &Members {
        &self.members
    }

    /// True while this member may not vote or campaign (see [`Bootstrap::Join`]).
    pub fn vote_blocked(&self) -> bool {
        self.vote_blocked
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn state(&self) -> &StoreState {
        &self.state
    }

    /// Mutable access for the driver's apply loop; changes must go to disk via `commit_apply`.
    pub fn state_mut(&mut self) -> &mut StoreState {
        &mut self.state
    }

    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    pub fn truncated_index(&self) -> u64 {
        self.truncated_index
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    fn first_log_index(&self) -> u64 {
        self.truncated_index + 1
    }

    fn last_log_index(&self) -> u64 {
        self.truncated_index + self.terms.len() as u64
    }

    /// Persists one Ready: snapshot (if any), then entries, then hard state, in one synced batch.
    pub fn persist(
        &mut self,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
        hard_state: Option<&HardState>,
    ) -> Result<(), StorageFault> {
        let mut batch = WriteBatch::default();
        let mut restored = None;
        if let Some(snap) = snapshot.filter(|s| !s.is_empty()) {
            let meta = snap.get_metadata();
            let corrupt_snapshot = |e: String| StorageFault::Corrupt {
                path: self.path.clone(),
                reason: format!("snapshot at index {} from the leader: {e}", meta.index),
            };
            let (members, state_bytes) =
                decode_snapshot_data(snap.get_data()).map_err(corrupt_snapshot)?;
            let new_state =
                StoreState::decode_snapshot(state_bytes).map_err(|e| StorageFault::Corrupt {
                    path: self.path.clone(),
                    reason: format!("snapshot at index {} from the leader: {e}", meta.index),
                })?;
            if let Some(regression) = self.state.first_regression(&new_state) {
                // I4: a snapshot is of a later state than ours, so this is corruption or a bug.
                return Err(StorageFault::Corrupt {
                    path: self.path.clone(),
                    reason: format!("snapshot at index {}: {regression}", meta.index),
                });
            }
            assert!(meta.index >= self.first_log_index(), "snapshot older than our compacted log");
            batch.delete_range(PREFIX_LOG, &prefix_end(PREFIX_LOG));
            batch.delete_range(PREFIX_SECTION, &prefix_end(PREFIX_SECTION));
            for (section, max_seq) in new_state.iter() {
                batch.put(section_key(section), max_seq.to_be_bytes());
            }
            batch.put(KEY_CONTROL, new_state.control().encode());
            batch.put(KEY_TRUNCATED, encode_pair(meta.index, meta.term));
            batch.put(KEY_APPLIED, meta.index.to_be_bytes());
            batch.put(KEY_CONF_STATE, meta.get_conf_state().write_to_bytes().expect(ENCODES));
            if let Some(m) = &members {
                batch.put(KEY_MEMBERS, serde_json::to_vec(m).expect(ENCODES));
            }
            restored =
                Some((meta.index, meta.term, meta.get_conf_state().clone(), new_state, members));
        }
        // Where the log stands once the snapshot (if any) is in.
        let (truncated_index, mut terms) = match &restored {
            Some((index, ..)) => (*index, VecDeque::new()),
            None => (self.truncated_index, self.terms.clone()),
        };
        if let Some(first) = entries.first() {
            let last_before = truncated_index + terms.len() as u64;
            assert!(first.index > truncated_index, "append of compacted index {}", first.index);
            assert!(
                first.index <= last_before + 1,
                "gap in log: last {last_before}, append {}",
                first.index
            );
            // Drop the conflicting suffix that the new entries replace.
            if first.index <= last_before {
                batch.delete_range(log_key(first.index), log_key(last_before + 1));
                terms.truncate((first.index - truncated_index - 1) as usize);
            }
            for (i, e) in entries.iter().enumerate() {
                assert_eq!(e.index, first.index + i as u64, "entries of one Ready are contiguous");
                batch.put(log_key(e.index), e.write_to_bytes().expect(ENCODES));
                terms.push_back(e.term);
            }
        }
        let mut new_hard_state = hard_state.cloned();
        if let Some((index, term, ..)) = &restored {
            let hs = new_hard_state.get_or_insert_with(|| self.hard_state.clone());
            hs.term = hs.term.max(*term);
            hs.commit = hs.commit.max(*index);
        }
        if let Some(hs) = &new_hard_state {
            batch.put(KEY_HARD_STATE, hs.write_to_bytes().expect(ENCODES));
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.db.write_opt(batch, &synced()).map_err(rocks(&self.path))?;

        // Only now, with everything on disk, does memory move.
        if let Some((index, term, conf_state, state, members)) = restored {
            self.truncated_index = index;
            self.truncated_term = term;
            self.applied_index = index;
            self.conf_state = conf_state;
            self.state = state;
            if let Some(m) = members {
                self.members = m;
            }
        }
        self.terms = terms;
        if let Some(hs) = new_hard_state {
            self.hard_state = hs;
        }
        Ok(())
    }

    /// Records the effect of applied entries (sections changed, conf state, applied index).
    pub fn commit_apply(&mut self, applied: AppliedBatch) -> Result<(), StorageFault> {
        assert!(applied.applied_index >= self.applied_index, "applied index went back");
        let mut batch = WriteBatch::default();
        // A section raised by several entries of the batch is written once, at its last value.
        let changed: std::collections::BTreeMap<SectionId, u64> =
            applied.changed.iter().copied().collect();
        for (section, max_seq) in changed {
            assert_eq!(
                self.state.max_seq(section),
                max_seq,
                "I4: persisted value differs from memory"
            );
            batch.put(section_key(section), max_seq.to_be_bytes());
        }
        if applied.control_changed && !Tooth::NoControlPersist.on() {
            batch.put(KEY_CONTROL, self.state.control().encode());
        }
        if let Some(cs) = &applied.conf_state {
            batch.put(KEY_CONF_STATE, cs.write_to_bytes().expect(ENCODES));
        }
        if let Some(m) = &applied.members {
            batch.put(KEY_MEMBERS, serde_json::to_vec(m).expect(ENCODES));
        }
        if applied.vote_unblocked {
            batch.delete(KEY_VOTE_BLOCKED);
        }
        let mut hs = None;
        if let Some(commit) = applied.commit_index.filter(|&c| c > self.hard_state.commit) {
            let mut h = self.hard_state.clone();
            h.commit = commit;
            batch.put(KEY_HARD_STATE, h.write_to_bytes().expect(ENCODES));
            hs = Some(h);
        }
        batch.put(KEY_APPLIED, applied.applied_index.to_be_bytes());
        self.db.write(batch).map_err(rocks(&self.path))?;
        self.applied_index = applied.applied_index;
        if let Some(cs) = applied.conf_state {
            self.conf_state = cs;
        }
        if let Some(m) = applied.members {
            self.members = m;
        }
        if applied.vote_unblocked {
            self.vote_blocked = false;
        }
        if let Some(h) = hs {
            self.hard_state = h;
        }
        Ok(())
    }

    /// Discards log entries up to and including `compact_index` (which must be applied), keeping
    /// its term for matching. Synced, and so makes earlier unsynced applied state durable first.
    pub fn compact(&mut self, compact_index: u64) -> Result<(), StorageFault> {
        if compact_index <= self.truncated_index {
            return Ok(());
        }
        assert!(compact_index <= self.applied_index, "compacting unapplied entries");
        let term = raft::Storage::term(self, compact_index).map_err(|e| StorageFault::Corrupt {
            path: self.path.clone(),
            reason: format!("term of applied index {compact_index}: {e}"),
        })?;
        let mut batch = WriteBatch::default();
        batch.delete_range(log_key(self.first_log_index()), log_key(compact_index + 1));
        batch.put(KEY_TRUNCATED, encode_pair(compact_index, term));
        self.db.write_opt(batch, &synced()).map_err(rocks(&self.path))?;
        let n = (compact_index - self.truncated_index) as usize;
        self.terms.drain(..n);
        self.truncated_index = compact_index;
        self.truncated_term = term;
        Ok(())
    }

    fn store_err(&self, what: &str, e: impl std::fmt::Display) -> raft::Error {
        raft::Error::Store(StorageError::Other(
            format!("{what} in {}: {e}", self.path.display()).into(),
        ))
    }
}

impl raft::Storage for NodeStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard_state.clone(), self.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first_log_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_log_index() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let mut entries = Vec::with_capacity((high - low) as usize);
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(log_key(high));
        for item in
            self.db.iterator_opt(IteratorMode::From(&log_key(low), Direction::Forward), opts)
        {
            let (_, value) = item.map_err(|e| self.store_err("reading log", e))?;
            let entry =
                Entry::parse_from_bytes(&value).map_err(|e| self.store_err("decoding log", e))?;
            entries.push(entry);
        }
        if entries.len() as u64 != high - low {
            return Err(
                self.store_err("reading log", format!("entries [{low}, {high}) are missing"))
            );
        }
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.truncated_index {
            return Ok(self.truncated_term);
        }
        if idx < self.truncated_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        let offset = (idx - self.truncated_index - 1) as usize;
        self.terms.get(offset).copied().ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first_log_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_log_index())
    }

    /// The whole state machine at the applied index: small (a few MB at most), built on demand.
    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.applied_index < request_index {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        let mut snap = Snapshot::default();
        snap.set_data(encode_snapshot_data(&self.members, &self.state.encode_snapshot()).into());
        let meta = snap.mut_metadata();
        meta.index = self.applied_index;
        meta.term = self.term(self.applied_index)?;
        meta.set_conf_state(self.conf_state.clone());
        Ok(snap)
    }
}

fn synced() -> WriteOptions {
    let mut opts = WriteOptions::default();
    opts.set_sync(true);
    opts
}

fn bounded(prefix: &[u8]) -> ReadOptions {
    let mut opts = ReadOptions::default();
    opts.set_iterate_upper_bound(prefix_end(prefix));
    opts
}

fn encode_pair(a: u64, b: u64) -> Vec<u8> {
    [a.to_be_bytes(), b.to_be_bytes()].concat()
}

fn decode_pair(bytes: &[u8]) -> Option<(u64, u64)> {
    Some((decode_u64(bytes.get(..8)?)?, decode_u64(bytes.get(8..)?)?))
}

fn decode_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests;
