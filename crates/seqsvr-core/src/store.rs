//! The StoreSvr state machine: one `max_seq` per section of a set, plus the control state the
//! arbiter (the Raft leader) keeps: the AllocSvr registry, the section → AllocSvr assignment
//! with lease epochs, and the route table version.
//!
//! Every member applies the same committed commands in the same order, so `apply` is
//! deterministic. Input that can be refused up front is refused before proposing
//! ([`validate_advance`], [`validate_read`]); what can only be judged against the state at the
//! moment of apply (fencing: is the caller the section's current owner at this epoch?) is judged
//! in `apply`, which then changes nothing and returns [`Rejected`].
//!
//! Invariants:
//! - I4: a section's `max_seq` never decreases (`apply` only takes `max`), and lease epochs only
//!   grow (`last_lease_epoch` is bumped by every `Assign`).
//! - I3 (store side): an `AdvanceMaxSeq` from an AllocSvr applies only if that AllocSvr owns
//!   every named section at the named epoch and the hand-over fence has passed. The lease timing
//!   itself (`lease`, `margin`) is replicated state, changed only by `SetLease`, so every leader
//!   grants and waits with the same numbers (DESIGN §8).
//! - No `max_seq` above [`MAX_SEQ_CEILING`] is ever proposed ([`validate_advance`]), and `apply`
//!   does no arithmetic that can overflow: a counter that would wrap rejects its command.

use crate::assign::{Assignment, Owner};
use crate::ids::{AllocId, LeaseEpoch, RouteVersion, SectionId, Seq};
use crate::lease::LeaseConfig;
use crate::section::{SectionRange, MAX_SEQ_CEILING};
use crate::teeth::Tooth;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One section of an `AdvanceMaxSeq`: raise `section` to at least `max_seq`, as the owner at
/// `lease_epoch` (ignored for operator advances).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionAdvance {
    pub section: SectionId,
    pub max_seq: Seq,
    pub lease_epoch: LeaseEpoch,
}

/// A replicated command, the payload of one Raft log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Raise each listed section's `max_seq` to at least the given value. `alloc: None` is an
    /// operator raise (seqctl): unfenced, which is safe because raising only creates gaps.
    AdvanceMaxSeq { alloc: Option<AllocId>, sections: Vec<SectionAdvance> },
    /// A new AllocSvr incarnation at `addr`. An older registration with the same address is
    /// marked replaced: it is never granted again and its sections are handed over.
    /// `identity`: the certificate identity that registered (`None` on a plaintext cluster);
    /// only that identity may later act for the registration (`ControlState::check_holder`).
    RegisterAlloc {
        addr: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        identity: Option<String>,
    },
    /// Give section ranges to AllocSvrs under one new lease epoch. `settled`: the arbiter knows
    /// every previous owner's lease is over, so the new owner may serve at once.
    Assign { moves: Vec<(SectionRange, AllocId)>, settled: bool },
    /// The fence of `lease_epoch` has passed: its owners may serve.
    Settle { lease_epoch: LeaseEpoch },
    /// A draining AllocSvr gets no sections; the arbiter moves its sections away.
    SetDraining { alloc: AllocId, draining: bool },
    /// Forget a registration that owns nothing.
    RemoveAlloc { alloc: AllocId },
    /// The AllocSvr `alloc` stopped serving for good (a graceful shutdown) and says so: it is
    /// never granted again, and its settled sections may move at once, without waiting for its
    /// lease to run out. Only the AllocSvr itself sends this, after it has stopped serving
    /// (`allocsvr/src/lease.rs::hand_back`).
    ReleaseAlloc { alloc: AllocId },
    /// Replace the replicated lease timing; the one it replaces becomes `previous_lease` (grants
    /// under it may still run). Applies only if exactly `after_change` lease changes applied
    /// before it (compare-and-set), so two changes proposed on the same state cannot both apply:
    /// the arbiter allows a change only once the lease before the last change is surely over
    /// (`Arbiter::lease_change`), which needs the last change to be the one it saw.
    SetLease { lease: LeaseConfig, after_change: u64 },
    /// Lease a worker id of id scheme `scheme` to `alloc`: the one it holds already, else a
    /// free one in `[pool_begin, pool_end)` (the proposer's set's share): a never-used one
    /// first (`StoreState::acquire_worker`). Free means no holder: a holder is cleared only by
    /// `FreeWorkers`, which the arbiter proposes once that holder's lease must be over.
    /// `layout`: the AllocSvr's [`crate::idscheme::Layout::fingerprint`]; with the pool it
    /// must match what the scheme was first leased under (`ControlState::schemes`).
    /// Proposed by builds before `AcquireWorkerAt`; still applied as they applied it.
    AcquireWorker {
        alloc: AllocId,
        scheme: String,
        pool_begin: u64,
        pool_end: u64,
        #[serde(default)]
        layout: String,
    },
    /// `AcquireWorker` that reuses a free worker id whose high-water mark passed at least
    /// [`WORKER_REUSE_AFTER_MS`] before `proposed_at_ms` (the proposing leader's wall clock,
    /// Unix ms, in the entry so that every member chooses alike) before a never-used one. A
    /// command of its own, not a field of `AcquireWorker`: a member of an older build would
    /// ignore an unknown field and choose differently (diverging silently); an unknown command
    /// stops it with a storage fault instead (README "Upgrading").
    AcquireWorkerAt {
        alloc: AllocId,
        scheme: String,
        pool_begin: u64,
        pool_end: u64,
        layout: String,
        proposed_at_ms: u64,
    },
    /// Raise the high-water mark of `scheme`'s `worker` to at least `up_to_ms` (Unix ms), if
    /// `alloc` holds it: ids with times up to it may be issued from then on. Never lowers it.
    ReserveTime {
        alloc: AllocId,
        scheme: String,
        worker: u64,
        up_to_ms: u64,
        #[serde(default)]
        layout: String,
    },
    /// `alloc`'s lease is over (or it released): every worker id it holds becomes free, each
    /// keeping its high-water mark, above which the next holder starts.
    FreeWorkers { alloc: AllocId },
    /// Raise the time mark of the `rongcloud` scheme `scheme`'s sessions routed to `section` to
    /// at least `up_to_ms` (Unix ms), as the section's owner at `lease_epoch`: fenced exactly
    /// like a sequence advance (issue 10: a session's ids have one owner, its section's). Every
    /// id of those sessions has a time at or below the mark; a new owner starts above the mark
    /// as it was before its own first reservation (`Applied::SessionMark::before`). `layout`:
    /// the scheme's fingerprint, session uid range included; fixed once recorded. A command an
    /// older build stops on (README "Upgrading").
    ReserveSessionTime {
        alloc: AllocId,
        scheme: String,
        layout: String,
        section: SectionId,
        lease_epoch: LeaseEpoch,
        up_to_ms: u64,
    },
    /// Record what each named scheme is (`(name, fingerprint)`), unless recorded already: the
    /// leader records its config's `rongcloud` schemes as soon as the set runs, so that every
    /// set, not only the ones that served a session, refuses a changed session uid range.
    /// Never overwrites a record.
    RecordSchemes { schemes: Vec<(String, String)> },
    /// Record what each named scheme is, with this set's worker ids for the schemes that have
    /// them, unless recorded already. The leader records every scheme of its config (worker-id
    /// schemes with their pool, `rongcloud` ones with an empty pool) as soon as the set runs:
    /// so that a changed `workers_per_set` is refused by every set that ran the scheme's first
    /// split, not only by the sets that leased one of its worker ids (a set that never leased
    /// would take a new share that overlaps ids another set still issues). Never overwrites a
    /// record. Supersedes `RecordSchemes` (still applied as it was); a command an older build
    /// stops on (README "Upgrading").
    RecordSchemePools { schemes: Vec<(String, SchemeRecord)> },
    /// Raise the set's commands version ([`ControlState::commands_version`]) to `version`:
    /// from then on the leader proposes every command that needs it. The leader proposes it
    /// only once every member of the set reported (in its Raft message batches) a build that
    /// applies commands up to `version`; never lowers the version. A member whose build knows
    /// less stops on it with a storage fault, naming the version to upgrade to.
    RaiseCommandsVersion { version: u32 },
    /// Record how the set maps uids to sections ([`SetLayout`]), unless recorded already: the
    /// leader records its config's as soon as the set runs (and the set's version allows it).
    /// `max_seq` is kept per section number, so a changed `section_size` or uid range would
    /// move a uid to a section whose `max_seq` may be lower: once recorded, a member whose
    /// config differs refuses to start, a running one stops when it applies or installs the
    /// record (`storesvr` `driver/ready.rs`), and an AllocSvr whose config differs from the
    /// route table takes no grant. Never overwrites.
    /// A command an older build stops on (README "Upgrading").
    RecordLayout { layout: SetLayout },
}

/// The commands version of this build: it applies every [`Command`] whose
/// [`Command::needs_version`] is at most this. Builds before the version gate know no version
/// (they report none, which counts as 0) and apply the commands of version 0. Raise it, and
/// give the new command its version in [`Command::needs_version`], whenever a command (or a
/// snapshot field an older build would drop) is added: the leader proposes it only after the
/// set raised its version (every member runs a build that knows it), so a rolling upgrade never
/// hands an older member a command it cannot apply (README "Upgrading"). The same goes for a
/// change in how an existing command applies: that is a new command (`AcquireWorkerAt` beside
/// `AcquireWorker`) of a new version, never an edit of the old one's apply, or members of two
/// builds would apply one entry differently without noticing.
pub const COMMANDS_VERSION: u32 = 2;

/// `AcquireWorkerAt` reuses a free worker id only once its high-water mark is this far behind
/// the leader's clock: a new holder whose clock runs behind the leader's by less (a clock set
/// back by minutes, as the nemesis does) starts without waiting for it, as with a never-used
/// id. Records then grow with the ids freed in the last ten minutes, not with every restart.
pub const WORKER_REUSE_AFTER_MS: u64 = 10 * 60 * 1000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("undecodable store command or snapshot: {0}")]
    Decode(String),
}

impl Command {
    /// The lowest commands version whose builds apply this command: 0 for the commands every
    /// build since worker ids (issue 10's first release) applies; 1 for those added after it,
    /// which builds before the version gate stop on, and for the gate itself. A leader proposes
    /// a command only while [`ControlState::commands_version`] is at least this (the fallbacks
    /// are in `storesvr/src/driver`), except [`Command::RaiseCommandsVersion`], which it
    /// proposes once every member reported a version at least as high.
    pub fn needs_version(&self) -> u32 {
        match self {
            Command::AdvanceMaxSeq { .. }
            | Command::RegisterAlloc { .. }
            | Command::Assign { .. }
            | Command::Settle { .. }
            | Command::SetDraining { .. }
            | Command::RemoveAlloc { .. }
            | Command::ReleaseAlloc { .. }
            | Command::SetLease { .. }
            | Command::AcquireWorker { .. }
            | Command::ReserveTime { .. }
            | Command::FreeWorkers { .. } => 0,
            Command::AcquireWorkerAt { .. }
            | Command::ReserveSessionTime { .. }
            | Command::RecordSchemes { .. }
            | Command::RecordSchemePools { .. } => 1,
            Command::RecordLayout { .. } => 2,
            Command::RaiseCommandsVersion { version } => (*version).max(1),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        // Serializing enums of integers and strings to JSON cannot fail: if it did, writing
        // empty bytes into the log would be far worse than stopping.
        serde_json::to_vec(self).expect("a command serializes to JSON")
    }

    pub fn decode(bytes: &[u8]) -> Result<Command, CodecError> {
        serde_json::from_slice(bytes).map_err(|e| CodecError::Decode(e.to_string()))
    }
}

/// Input the store refuses before proposing anything (→ `INVALID_ARGUMENT`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    #[error("empty batch: name at least one section")]
    EmptyBatch,
    #[error("batch of {len} sections exceeds the limit of {max}")]
    BatchTooLarge { len: usize, max: usize },
    #[error("section {section} is outside this set's sections [{begin}, {end})")]
    SectionOutOfRange { section: SectionId, begin: SectionId, end: SectionId },
    #[error("section {0} appears more than once in the batch")]
    DuplicateSection(SectionId),
    #[error(
        "section {section}: max_seq {max_seq} is above the ceiling {MAX_SEQ_CEILING} (2^63) that \
         no section's max_seq may pass"
    )]
    AboveCeiling { section: SectionId, max_seq: Seq },
    #[error(
        "section {section}: raising max_seq from {from} to {to} adds more than \
         store.max_operator_raise ({max}) in one operator raise; raise in smaller steps if you \
         mean it"
    )]
    RaiseTooFar { section: SectionId, from: u64, to: u64, max: u64 },
    #[error("invalid lease: {0}")]
    InvalidLease(String),
}

/// Checks a read request: non-empty, within the batch limit, each section in range and once.
pub fn validate_read(
    range: SectionRange,
    max_batch: usize,
    sections: &[SectionId],
) -> Result<(), InputError> {
    if sections.is_empty() {
        return Err(InputError::EmptyBatch);
    }
    if sections.len() > max_batch {
        return Err(InputError::BatchTooLarge { len: sections.len(), max: max_batch });
    }
    let mut seen = BTreeSet::new();
    for &section in sections {
        if !range.contains(section) {
            return Err(InputError::SectionOutOfRange {
                section,
                begin: range.begin(),
                end: range.end(),
            });
        }
        if !seen.insert(section) {
            return Err(InputError::DuplicateSection(section));
        }
    }
    Ok(())
}

/// Checks an advance request the same way as a read, and that no target is above
/// [`MAX_SEQ_CEILING`] (operator raises included: a section near `u64::MAX` would make its
/// AllocSvr's `max_seq + step` overflow).
pub fn validate_advance(
    range: SectionRange,
    max_batch: usize,
    sections: &[SectionAdvance],
) -> Result<(), InputError> {
    let ids: Vec<SectionId> = sections.iter().map(|a| a.section).collect();
    validate_read(range, max_batch, &ids)?;
    match sections.iter().find(|a| a.max_seq.0 > MAX_SEQ_CEILING) {
        Some(a) => Err(InputError::AboveCeiling { section: a.section, max_seq: a.max_seq }),
        None => Ok(()),
    }
}

/// Checks an operator raise (an unfenced advance) against the committed `max_seq` of each
/// section (`current`; a section missing from it counts as 0): none may add more than
/// `max_raise`. A guard against a mistyped target, checked before proposing: two raises racing
/// can each pass it, so it bounds one raise, not the sum of concurrent ones.
pub fn validate_operator_raise(
    current: &[(SectionId, u64)],
    sections: &[SectionAdvance],
    max_raise: u64,
) -> Result<(), InputError> {
    for a in sections {
        let from = current.iter().find(|(s, _)| *s == a.section).map_or(0, |(_, v)| *v);
        if a.max_seq.0.saturating_sub(from) > max_raise {
            return Err(InputError::RaiseTooFar {
                section: a.section,
                from,
                to: a.max_seq.0,
                max: max_raise,
            });
        }
    }
    Ok(())
}

/// Checks a lease before a `SetLease` is proposed (see [`LeaseConfig::check`]).
pub fn validate_lease(lease: &LeaseConfig) -> Result<(), InputError> {
    lease.check().map_err(InputError::InvalidLease)
}

/// Why a committed command changed nothing. Deterministic: every member rejects alike.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejected {
    #[error(
        "NOT_OWNER: alloc {alloc} at lease epoch {lease_epoch} does not own section {section} \
         (owner: {owner})"
    )]
    NotOwner { alloc: AllocId, lease_epoch: LeaseEpoch, section: SectionId, owner: String },
    #[error("unknown or replaced alloc {0}")]
    UnknownAlloc(AllocId),
    #[error("alloc {alloc} still owns {n_sections} sections")]
    AllocOwnsSections { alloc: AllocId, n_sections: u64 },
    #[error(
        "lease change refused: it was proposed after lease change {after_change}, but {lease_changes} \
         changes have applied (another change applied first); read the lease and retry"
    )]
    StaleLeaseChange { after_change: u64, lease_changes: u64 },
    #[error("invalid lease: {0}")]
    InvalidLease(String),
    /// A counter (`what`) would pass `u64::MAX`: refused rather than wrapped or panicking.
    #[error("{what} is exhausted (at u64::MAX); the command changed nothing")]
    Exhausted { what: String },
    #[error(
        "every worker id of id scheme {scheme:?} in this set's share [{pool_begin}, {pool_end}) is \
         held; one is freed a lease after its holder stops heartbeating"
    )]
    NoFreeWorker { scheme: String, pool_begin: u64, pool_end: u64 },
    #[error("NOT_HOLDER: alloc {alloc} does not hold worker id {worker} of id scheme {scheme:?} ({holder})")]
    NotWorkerHolder { alloc: AllocId, scheme: String, worker: u64, holder: String },
    #[error(
        "id scheme {scheme:?} changed: its worker ids were leased under {recorded:?}, this asks \
         under {asked:?}; a changed layout or worker split would reissue old ids, so give the \
         new one a new scheme name"
    )]
    SchemeChanged { scheme: String, recorded: String, asked: String },
    #[error("alloc {alloc} still holds {n_workers} worker ids")]
    AllocHoldsWorkers { alloc: AllocId, n_workers: u64 },
}

/// What a command produced for its proposer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The committed value of each section, in command order.
    MaxSeq(Vec<(SectionId, u64)>),
    Registered(AllocId),
    Assigned {
        lease_epoch: LeaseEpoch,
    },
    /// A `SetLease` applied; `lease_changes` counts the changes so far, this one included.
    LeaseChanged {
        lease_changes: u64,
    },
    /// `AcquireWorker`: the worker id now held and its high-water mark (Unix ms).
    Worker {
        worker: u64,
        high_water_ms: u64,
    },
    /// `ReserveTime`: the worker's high-water mark now.
    HighWater(u64),
    /// A section's session time mark before and after a `ReserveSessionTime`.
    SessionMark {
        before: u64,
        after: u64,
    },
    Done,
}

/// What applying one command did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyOutcome {
    pub result: Result<Applied, Rejected>,
    /// Sections whose value changed, with their new value: what the caller must persist.
    pub changed: Vec<(SectionId, u64)>,
    /// The control state changed: the caller must persist it.
    pub control_changed: bool,
}

impl ApplyOutcome {
    fn control(result: Result<Applied, Rejected>) -> ApplyOutcome {
        let control_changed = result.is_ok();
        ApplyOutcome { result, changed: Vec::new(), control_changed }
    }
}

/// One AllocSvr registration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocRecord {
    pub addr: String,
    pub draining: bool,
    /// A newer registration took this address: never granted again.
    pub replaced: bool,
    /// The AllocSvr released its sections and serves nothing any more (`ReleaseAlloc`).
    #[serde(default)]
    pub released: bool,
    /// The certificate identity that registered; `None` when registered over plaintext.
    /// Fixed for the life of the registration (ids are never reused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

/// Why a caller may not act for an AllocSvr registration (`ControlState::check_holder`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HolderRefused {
    #[error("alloc {0} is not registered (or its registration is not applied here yet)")]
    Unknown(AllocId),
    #[error(
        "identity {caller:?} may not act for alloc {alloc}: it was registered by {}",
        registered.as_deref().map_or("a plaintext (identity-less) caller".to_string(), |r| format!("{r:?}"))
    )]
    NotTheHolder { alloc: AllocId, caller: String, registered: Option<String> },
}

/// The arbiter's replicated state. Small (a few runs per AllocSvr): persisted as one record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlState {
    pub allocs: BTreeMap<AllocId, AllocRecord>,
    pub assignment: Assignment,
    /// The last id handed out; ids are never reused.
    pub last_alloc_id: u64,
    /// Invariant: every owner's `lease_epoch` is <= this, and it never decreases (I4).
    pub last_lease_epoch: LeaseEpoch,
    /// Bumped whenever the route table (assignment or addresses) changes.
    pub route_version: RouteVersion,
    /// The lease timing every grant and every wait uses. `None` until the first `SetLease`
    /// applied (a new set, or data written before the lease was replicated): no leader grants
    /// until then.
    #[serde(default)]
    pub lease: Option<LeaseConfig>,
    /// The lease the last `SetLease` replaced (for the first one: the lease it set, as the
    /// leaders before it are assumed to have used their config's lease, the same one). Grants
    /// under it may still run, so every wait covers its hold too.
    #[serde(default)]
    pub previous_lease: Option<LeaseConfig>,
    /// Number of `SetLease` commands applied: the compare-and-set token of the next one.
    #[serde(default)]
    pub lease_changes: u64,
    /// Id scheme name → worker id → its lease and high-water mark. A record is never removed:
    /// its high-water mark must outlive every holder.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workers: BTreeMap<String, BTreeMap<u64, WorkerRecord>>,
    /// Id scheme name → what its worker ids were first leased under: fixed from then on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schemes: BTreeMap<String, SchemeRecord>,
    /// `rongcloud` scheme name → section → time mark (Unix ms): every id of the sessions routed
    /// to the section has a time at or below it. Only grows; never removed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub session_marks: BTreeMap<String, BTreeMap<SectionId, u64>>,
    /// The set's commands version: every member runs a build that applies the commands of this
    /// version ([`Command::needs_version`]), so the leader may propose them. 0 until the first
    /// `RaiseCommandsVersion` (and for data written before the gate). Only grows.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub commands_version: u32,
    /// How the set maps uids to sections, recorded once (`RecordLayout`); `None` until then
    /// (a new set before its version reached 2, or data written before the record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<SetLayout>,
}

/// How a set maps uids to the sections whose `max_seq` it keeps: `section = uid /
/// section_size`, for the uids `[uid_begin, uid_end)`. Fixed once recorded: the same uid must
/// map to the same section for as long as the set's `max_seq` values live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetLayout {
    pub section_size: u64,
    pub uid_begin: u64,
    pub uid_end: u64,
}

impl std::fmt::Display for SetLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "section_size {}, uids [{}, {})", self.section_size, self.uid_begin, self.uid_end)
    }
}

impl SetLayout {
    /// `None` if `config` is this layout; else what an operator reads: both layouts and what to
    /// do.
    pub fn mismatch(recorded: Option<&SetLayout>, config: &SetLayout) -> Option<String> {
        let recorded = recorded.filter(|r| *r != config && !Tooth::NoLayoutCheck.on())?;
        Some(format!(
            "this set recorded its layout as {recorded}, but this process's cluster config says \
             {config}: a uid would map to another section, whose max_seq may be lower, and its \
             values could repeat. Restore section_size and the set's uid_begin/uid_end in the \
             cluster file; a layout cannot be changed in place"
        ))
    }
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// The layout and this set's worker ids an id scheme was first leased under.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemeRecord {
    pub layout: String,
    pub pool_begin: u64,
    pub pool_end: u64,
}

impl SchemeRecord {
    /// This set's worker ids of the scheme; None for a scheme without worker ids (`rongcloud`,
    /// whose sessions are owned by sections instead).
    pub fn pool(&self) -> Option<std::ops::Range<u64>> {
        (self.pool_begin < self.pool_end).then_some(self.pool_begin..self.pool_end)
    }

    /// The layout fingerprint and the worker ids, as error messages and logs show them.
    pub fn describe(&self) -> String {
        format!("{}; worker ids [{}, {})", self.layout, self.pool_begin, self.pool_end)
    }
}

/// One worker id of one id scheme.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// The registration holding it; `None`: free (no holder's lease can still run).
    pub holder: Option<AllocId>,
    /// Unix ms: every id this worker id ever carried has a time at or below it. Only grows.
    pub high_water_ms: u64,
}

impl ControlState {
    /// The longest hold (`lease + margin`) a grant that may still run was made with: of the
    /// current and the previous lease. `None` while no lease is replicated.
    pub fn longest_hold_ms(&self) -> Option<u64> {
        let current = self.lease?.hold_ms();
        Some(current.max(self.previous_lease.map_or(0, |l| l.hold_ms())))
    }

    /// An alloc that may hold sections: registered, not replaced, not released.
    pub fn is_current(&self, alloc: AllocId) -> bool {
        self.allocs.get(&alloc).is_some_and(|r| !r.replaced && !r.released)
    }

    /// May the caller with certificate identity `caller` act for `alloc` (heartbeat, fenced
    /// advance, release)? `None`: a plaintext server, where there is no identity to check.
    /// Exact wherever the registration is present: its identity never changes. Absent, the
    /// answer is "unknown" — never "yes", as the registration may not be applied here yet.
    pub fn check_holder(&self, alloc: AllocId, caller: Option<&str>) -> Result<(), HolderRefused> {
        let Some(caller) = caller.filter(|_| !Tooth::NoHolderCheck.on()) else {
            return Ok(());
        };
        let record = self.allocs.get(&alloc).ok_or(HolderRefused::Unknown(alloc))?;
        if record.identity.as_deref() == Some(caller) {
            Ok(())
        } else {
            Err(HolderRefused::NotTheHolder {
                alloc,
                caller: caller.to_string(),
                registered: record.identity.clone(),
            })
        }
    }

    /// The worker ids `alloc` holds: `(scheme, worker, record)`.
    pub fn workers_of(
        &self,
        alloc: AllocId,
    ) -> impl Iterator<Item = (&str, u64, WorkerRecord)> + '_ {
        self.workers.iter().flat_map(move |(scheme, ws)| {
            ws.iter()
                .filter(move |(_, r)| r.holder == Some(alloc))
                .map(move |(&w, &r)| (scheme.as_str(), w, r))
        })
    }

    /// The route table: each run's owner and its address, in section order.
    pub fn route_entries(&self) -> Vec<(SectionRange, AllocId, String)> {
        self.assignment
            .runs()
            .map(|(r, o)| {
                let addr = self.allocs.get(&o.alloc).map(|a| a.addr.clone()).unwrap_or_default();
                (r, o.alloc, addr)
            })
            .collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("the control state serializes to JSON")
    }

    pub fn decode(bytes: &[u8]) -> Result<ControlState, CodecError> {
        let control: ControlState =
            serde_json::from_slice(bytes).map_err(|e| CodecError::Decode(e.to_string()))?;
        control.check_commands_version()?;
        Ok(control)
    }

    /// A state of a set raised past this build may hold what this build would drop (fields it
    /// does not know): refused, never loaded.
    fn check_commands_version(&self) -> Result<(), CodecError> {
        if self.commands_version > COMMANDS_VERSION {
            return Err(CodecError::Decode(format!(
                "the set runs commands version {} and this build applies only up to \
                 {COMMANDS_VERSION}: run the build the other members run",
                self.commands_version
            )));
        }
        Ok(())
    }
}

/// `v + 1`, or a rejection naming `what` where that would pass `u64::MAX` (an overflow in
/// `apply` would panic every member at the same entry, forever).
fn bump(v: u64, what: &str) -> Result<u64, Rejected> {
    v.checked_add(1).ok_or_else(|| Rejected::Exhausted { what: what.to_string() })
}

/// The in-memory state machine. The storage layer persists each `ApplyOutcome` together with
/// the applied index in one write, so disk and memory never disagree after a crash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreState {
    /// Invariant: only sections ever advanced are present, and no value is 0.
    max_seq: BTreeMap<SectionId, u64>,
    control: ControlState,
}

/// Serialized form of the whole state machine: a Raft snapshot's data.
#[derive(Serialize, Deserialize)]
struct SnapshotData {
    format: u32,
    max_seq: Vec<(SectionId, u64)>,
    control: ControlState,
}

/// 3: the control state may hold worker ids (issue 10). A build that reads only 2 refuses a 3
/// rather than silently dropping the high-water marks. 4: it may hold `rongcloud` session time
/// marks, which a build reading 3 would drop (an unknown field). 5: the set raised its commands
/// version, which a build before the gate would drop (and then apply commands as version 0):
/// such a build refuses the snapshot instead. This build reads all four.
const SNAPSHOT_FORMAT: u32 = 5;

impl StoreState {
    pub fn new() -> StoreState {
        StoreState::default()
    }

    /// Rebuilds the state from persisted parts (storage load path).
    pub fn from_parts(
        max_seq: impl IntoIterator<Item = (SectionId, u64)>,
        control: ControlState,
    ) -> StoreState {
        StoreState { max_seq: max_seq.into_iter().filter(|&(_, v)| v > 0).collect(), control }
    }

    /// The committed `max_seq` of a section; 0 if it was never advanced.
    pub fn max_seq(&self, section: SectionId) -> u64 {
        self.max_seq.get(&section).copied().unwrap_or(0)
    }

    pub fn n_sections_advanced(&self) -> usize {
        self.max_seq.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (SectionId, u64)> + '_ {
        self.max_seq.iter().map(|(&s, &v)| (s, v))
    }

    /// Advanced sections within `range`, in order.
    pub fn range(&self, range: SectionRange) -> impl Iterator<Item = (SectionId, u64)> + '_ {
        self.max_seq.range(range.begin()..range.end()).map(|(&s, &v)| (s, v))
    }

    pub fn control(&self) -> &ControlState {
        &self.control
    }

    pub fn apply(&mut self, command: &Command) -> ApplyOutcome {
        match command {
            Command::AdvanceMaxSeq { alloc, sections } => self.advance(*alloc, sections),
            Command::RegisterAlloc { addr, identity } => {
                let c = &mut self.control;
                // Whatever identity registers, an older registration at the address is replaced
                // (its sections move fenced, after its lease): refusing another identity here
                // would lock out an AllocSvr whose certificate name changed, for as long as the
                // old registration owns sections, i.e. for good in a one-AllocSvr set.
                let id = match bump(c.last_alloc_id, "the alloc id space") {
                    Ok(id) => id,
                    Err(e) => return ApplyOutcome::control(Err(e)),
                };
                c.last_alloc_id = id;
                let id = AllocId(id);
                for r in c.allocs.values_mut().filter(|r| r.addr == *addr) {
                    r.replaced = true;
                }
                c.allocs.insert(
                    id,
                    AllocRecord {
                        addr: addr.clone(),
                        draining: false,
                        replaced: false,
                        released: false,
                        identity: identity.clone(),
                    },
                );
                ApplyOutcome::control(Ok(Applied::Registered(id)))
            }
            Command::Assign { moves, settled } => {
                if let Some(&(_, bad)) = moves.iter().find(|(_, a)| !self.control.is_current(*a)) {
                    return ApplyOutcome::control(Err(Rejected::UnknownAlloc(bad)));
                }
                let c = &mut self.control;
                let bumped = bump(c.last_lease_epoch.0, "the lease epoch").and_then(|e| {
                    Ok((LeaseEpoch(e), RouteVersion(bump(c.route_version.0, "the route version")?)))
                });
                let (lease_epoch, route_version) = match bumped {
                    Ok(b) => b,
                    Err(e) => return ApplyOutcome::control(Err(e)),
                };
                c.last_lease_epoch = lease_epoch;
                for &(range, alloc) in moves {
                    c.assignment.assign(range, Owner { alloc, lease_epoch, settled: *settled });
                }
                c.route_version = route_version;
                ApplyOutcome::control(Ok(Applied::Assigned { lease_epoch }))
            }
            Command::Settle { lease_epoch } => {
                let changed = self.control.assignment.settle(*lease_epoch);
                ApplyOutcome {
                    result: Ok(Applied::Done),
                    changed: Vec::new(),
                    control_changed: changed,
                }
            }
            Command::ReleaseAlloc { alloc } => {
                match self.control.allocs.get_mut(alloc) {
                    Some(r) => {
                        r.released = true;
                        r.draining = true;
                    }
                    None => return ApplyOutcome::control(Err(Rejected::UnknownAlloc(*alloc))),
                }
                ApplyOutcome::control(Ok(Applied::Done))
            }
            Command::SetDraining { alloc, draining } => {
                match self.control.allocs.get_mut(alloc) {
                    Some(r) => r.draining = *draining,
                    None => return ApplyOutcome::control(Err(Rejected::UnknownAlloc(*alloc))),
                }
                ApplyOutcome::control(Ok(Applied::Done))
            }
            Command::RemoveAlloc { alloc } => {
                let owned = self.control.assignment.load().get(alloc).copied().unwrap_or(0);
                if owned > 0 {
                    return ApplyOutcome::control(Err(Rejected::AllocOwnsSections {
                        alloc: *alloc,
                        n_sections: owned,
                    }));
                }
                if !self.control.allocs.contains_key(alloc) {
                    return ApplyOutcome::control(Err(Rejected::UnknownAlloc(*alloc)));
                }
                let n_workers = self.control.workers_of(*alloc).count() as u64;
                if n_workers > 0 {
                    return ApplyOutcome::control(Err(Rejected::AllocHoldsWorkers {
                        alloc: *alloc,
                        n_workers,
                    }));
                }
                let route_version = match bump(self.control.route_version.0, "the route version") {
                    Ok(v) => RouteVersion(v),
                    Err(e) => return ApplyOutcome::control(Err(e)),
                };
                self.control.allocs.remove(alloc);
                self.control.route_version = route_version;
                ApplyOutcome::control(Ok(Applied::Done))
            }
            Command::SetLease { lease, after_change } => {
                // Judged again at apply (deterministically): a hand-made entry cannot install a
                // lease the leader would have refused.
                if let Err(why) = lease.check() {
                    return ApplyOutcome::control(Err(Rejected::InvalidLease(why)));
                }
                let c = &mut self.control;
                if *after_change != c.lease_changes {
                    return ApplyOutcome::control(Err(Rejected::StaleLeaseChange {
                        after_change: *after_change,
                        lease_changes: c.lease_changes,
                    }));
                }
                let lease_changes = match bump(c.lease_changes, "the lease change count") {
                    Ok(n) => n,
                    Err(e) => return ApplyOutcome::control(Err(e)),
                };
                c.previous_lease = Some(c.lease.unwrap_or(*lease));
                c.lease = Some(*lease);
                c.lease_changes = lease_changes;
                ApplyOutcome::control(Ok(Applied::LeaseChanged { lease_changes }))
            }
            Command::AcquireWorker { alloc, scheme, pool_begin, pool_end, layout } => {
                self.apply_acquire_worker(*alloc, scheme, *pool_begin..*pool_end, layout, None)
            }
            Command::AcquireWorkerAt {
                alloc,
                scheme,
                pool_begin,
                pool_end,
                layout,
                proposed_at_ms,
            } => {
                let reuse_marks_up_to = proposed_at_ms.saturating_sub(WORKER_REUSE_AFTER_MS);
                let pool = *pool_begin..*pool_end;
                self.apply_acquire_worker(*alloc, scheme, pool, layout, Some(reuse_marks_up_to))
            }
            Command::ReserveTime { alloc, scheme, worker, up_to_ms, layout } => {
                if let Some(recorded) = self.control.schemes.get(scheme) {
                    if recorded.layout != *layout {
                        return ApplyOutcome::control(Err(Rejected::SchemeChanged {
                            scheme: scheme.clone(),
                            recorded: recorded.describe(),
                            asked: layout.clone(),
                        }));
                    }
                }
                let record = self.control.workers.get_mut(scheme).and_then(|ws| ws.get_mut(worker));
                match record {
                    Some(r) if r.holder == Some(*alloc) => {
                        let before = r.high_water_ms;
                        r.high_water_ms = before.max(*up_to_ms);
                        ApplyOutcome {
                            result: Ok(Applied::HighWater(r.high_water_ms)),
                            changed: Vec::new(),
                            control_changed: r.high_water_ms != before,
                        }
                    }
                    other => ApplyOutcome::control(Err(Rejected::NotWorkerHolder {
                        alloc: *alloc,
                        scheme: scheme.clone(),
                        worker: *worker,
                        holder: match other.and_then(|r| r.holder) {
                            Some(h) => format!("held by alloc {h}"),
                            None => "free".into(),
                        },
                    })),
                }
            }
            Command::ReserveSessionTime {
                alloc,
                scheme,
                layout,
                section,
                lease_epoch,
                up_to_ms,
            } => {
                self.reserve_session_time(*alloc, scheme, layout, *section, *lease_epoch, *up_to_ms)
            }
            Command::RecordSchemes { schemes } => {
                let records = schemes.iter().map(|(name, fingerprint)| {
                    let record =
                        SchemeRecord { layout: fingerprint.clone(), pool_begin: 0, pool_end: 0 };
                    (name.clone(), record)
                });
                self.record_schemes(records)
            }
            Command::RecordSchemePools { schemes } => self.record_schemes(schemes.iter().cloned()),
            Command::RaiseCommandsVersion { version } => {
                let raised = *version > self.control.commands_version;
                if raised {
                    self.control.commands_version = *version;
                }
                ApplyOutcome {
                    result: Ok(Applied::Done),
                    changed: Vec::new(),
                    control_changed: raised,
                }
            }
            Command::RecordLayout { layout } => {
                let record = self.control.layout.is_none();
                if record {
                    self.control.layout = Some(*layout);
                }
                ApplyOutcome {
                    result: Ok(Applied::Done),
                    changed: Vec::new(),
                    control_changed: record,
                }
            }
            Command::FreeWorkers { alloc } => {
                let mut freed = false;
                for ws in self.control.workers.values_mut() {
                    for r in ws.values_mut().filter(|r| r.holder == Some(*alloc)) {
                        r.holder = None;
                        freed = true;
                    }
                }
                ApplyOutcome {
                    result: Ok(Applied::Done),
                    changed: Vec::new(),
                    control_changed: freed,
                }
            }
        }
    }

    /// `RecordSchemes` / `RecordSchemePools`: adds the records of the names not recorded yet.
    fn record_schemes(
        &mut self,
        records: impl Iterator<Item = (String, SchemeRecord)>,
    ) -> ApplyOutcome {
        let mut control_changed = false;
        for (name, record) in records {
            if let std::collections::btree_map::Entry::Vacant(e) = self.control.schemes.entry(name)
            {
                e.insert(record);
                control_changed = true;
            }
        }
        ApplyOutcome { result: Ok(Applied::Done), changed: Vec::new(), control_changed }
    }

    /// `AcquireWorker` / `AcquireWorkerAt`: refused if the scheme was first leased under
    /// another layout or pool; the scheme's record is written with its first lease only.
    fn apply_acquire_worker(
        &mut self,
        alloc: AllocId,
        scheme: &str,
        pool: std::ops::Range<u64>,
        layout: &str,
        reuse_marks_up_to: Option<u64>,
    ) -> ApplyOutcome {
        let asked =
            SchemeRecord { layout: layout.to_string(), pool_begin: pool.start, pool_end: pool.end };
        if let Some(recorded) = self.control.schemes.get(scheme) {
            if *recorded != asked {
                return ApplyOutcome::control(Err(Rejected::SchemeChanged {
                    scheme: scheme.to_string(),
                    recorded: recorded.describe(),
                    asked: asked.describe(),
                }));
            }
        }
        let leased = self.acquire_worker(alloc, scheme, pool, reuse_marks_up_to);
        if leased.is_ok() {
            // Recorded with the first lease, in the same persisted change.
            self.control.schemes.entry(scheme.to_string()).or_insert(asked);
        }
        ApplyOutcome::control(leased)
    }

    /// Which free worker id a new holder gets. Its holder starts strictly above the id's
    /// high-water mark, so a mark still in the future makes it wait for its clock, while every
    /// never-used id adds a record that stays in the control state (rewritten with each of its
    /// changes) for good. With `reuse_marks_up_to` (`AcquireWorkerAt`): a free id whose mark is
    /// at most that (the lowest mark; ties: the lowest id), else a never-used one (the lowest),
    /// else the free one with the lowest mark (one a clock far ahead pushed into the future is
    /// taken last). Records then grow with the most ids held at once, not with every restart.
    /// Without it (`AcquireWorker`, older builds): a never-used id first, as those builds chose.
    fn acquire_worker(
        &mut self,
        alloc: AllocId,
        scheme: &str,
        pool: std::ops::Range<u64>,
        reuse_marks_up_to: Option<u64>,
    ) -> Result<Applied, Rejected> {
        if !self.control.is_current(alloc) {
            return Err(Rejected::UnknownAlloc(alloc));
        }
        let no_free = || Rejected::NoFreeWorker {
            scheme: scheme.to_string(),
            pool_begin: pool.start,
            pool_end: pool.end,
        };
        let workers = self.control.workers.entry(scheme.to_string()).or_default();
        if let Some((&worker, r)) =
            workers.range(pool.clone()).find(|(_, r)| r.holder == Some(alloc))
        {
            return Ok(Applied::Worker { worker, high_water_ms: r.high_water_ms });
        }
        let lowest_free = workers
            .range(pool.clone())
            .filter(|(_, r)| r.holder.is_none())
            .min_by_key(|&(&w, r)| (r.high_water_ms, w))
            .map(|(&w, r)| (w, r.high_water_ms));
        // The lowest never-used id: the first gap in the records.
        let mut gap = pool.start;
        for &w in workers.range(pool.clone()).map(|(w, _)| w) {
            if w > gap {
                break;
            }
            gap = w + 1;
        }
        let candidate = match lowest_free {
            Some((w, mark)) if reuse_marks_up_to.is_some_and(|up_to| mark <= up_to) => w,
            _ if gap < pool.end => gap,
            Some((w, _)) => w,
            None => return Err(no_free()),
        };
        let record = workers.entry(candidate).or_default();
        assert!(record.holder.is_none(), "the chosen worker id is free");
        record.holder = Some(alloc);
        Ok(Applied::Worker { worker: candidate, high_water_ms: record.high_water_ms })
    }

    /// Fencing, judged at apply so a write racing a reassignment cannot slip through: `alloc`
    /// must own `section` at `lease_epoch`, settled.
    fn fence(
        &self,
        alloc: AllocId,
        section: SectionId,
        lease_epoch: LeaseEpoch,
    ) -> Result<(), Rejected> {
        let owner = self.control.assignment.get(section);
        let ok =
            owner.is_some_and(|o| o.alloc == alloc && o.lease_epoch == lease_epoch && o.settled);
        if ok || Tooth::NoFencing.on() {
            return Ok(());
        }
        let owner = match owner {
            Some(o) => format!(
                "alloc {} at epoch {}{}",
                o.alloc,
                o.lease_epoch,
                if o.settled { "" } else { ", in hand-over" }
            ),
            None => "none".into(),
        };
        Err(Rejected::NotOwner { alloc, lease_epoch, section, owner })
    }

    fn reserve_session_time(
        &mut self,
        alloc: AllocId,
        scheme: &str,
        layout: &str,
        section: SectionId,
        lease_epoch: LeaseEpoch,
        up_to_ms: u64,
    ) -> ApplyOutcome {
        if let Some(recorded) = self.control.schemes.get(scheme) {
            if recorded.layout != layout {
                return ApplyOutcome::control(Err(Rejected::SchemeChanged {
                    scheme: scheme.to_string(),
                    recorded: recorded.describe(),
                    asked: layout.to_string(),
                }));
            }
        }
        if let Err(e) = self.fence(alloc, section, lease_epoch) {
            return ApplyOutcome::control(Err(e));
        }
        let mut control_changed = false;
        if !self.control.schemes.contains_key(scheme) {
            let record = SchemeRecord { layout: layout.to_string(), pool_begin: 0, pool_end: 0 };
            self.control.schemes.insert(scheme.to_string(), record);
            control_changed = true;
        }
        let before = self
            .control
            .session_marks
            .get(scheme)
            .and_then(|marks| marks.get(&section))
            .copied()
            .unwrap_or(0);
        let after = before.max(up_to_ms);
        if after > before {
            let marks = self.control.session_marks.entry(scheme.to_string()).or_default();
            marks.insert(section, after);
            control_changed = true;
        }
        ApplyOutcome {
            result: Ok(Applied::SessionMark { before, after }),
            changed: Vec::new(),
            control_changed,
        }
    }

    fn advance(&mut self, alloc: Option<AllocId>, sections: &[SectionAdvance]) -> ApplyOutcome {
        if let Some(alloc) = alloc {
            for a in sections {
                if let Err(e) = self.fence(alloc, a.section, a.lease_epoch) {
                    return ApplyOutcome {
                        result: Err(e),
                        changed: Vec::new(),
                        control_changed: false,
                    };
                }
            }
        }
        let mut results = Vec::with_capacity(sections.len());
        let mut changed = Vec::new();
        for a in sections {
            let current = self.max_seq(a.section);
            let next = current.max(a.max_seq.0);
            assert!(next >= current, "I4: max_seq of section {} would decrease", a.section);
            if next > current {
                self.max_seq.insert(a.section, next);
                changed.push((a.section, next));
            }
            results.push((a.section, next));
        }
        ApplyOutcome { result: Ok(Applied::MaxSeq(results)), changed, control_changed: false }
    }

    pub fn encode_snapshot(&self) -> Vec<u8> {
        // Format 2 while no id scheme was ever leased: a member of an older build (during a
        // rolling upgrade) can still install it; one with worker ids needs this build.
        let ids_used = !self.control.workers.is_empty() || !self.control.schemes.is_empty();
        let format = if self.control.commands_version > 0 {
            SNAPSHOT_FORMAT
        } else if !self.control.session_marks.is_empty() {
            4
        } else if ids_used {
            3
        } else {
            2
        };
        let data =
            SnapshotData { format, max_seq: self.iter().collect(), control: self.control.clone() };
        serde_json::to_vec(&data).expect("a snapshot serializes to JSON")
    }

    pub fn decode_snapshot(bytes: &[u8]) -> Result<StoreState, CodecError> {
        let data: SnapshotData =
            serde_json::from_slice(bytes).map_err(|e| CodecError::Decode(e.to_string()))?;
        if !(2..=SNAPSHOT_FORMAT).contains(&data.format) {
            return Err(CodecError::Decode(format!(
                "snapshot format {} (this build reads {SNAPSHOT_FORMAT})",
                data.format
            )));
        }
        data.control.check_commands_version()?;
        Ok(StoreState::from_parts(data.max_seq, data.control))
    }

    /// The first value that would go down if `self` were replaced by `newer`: a snapshot is
    /// always of a later state, so any such value means corruption (I4).
    pub fn first_regression(&self, newer: &StoreState) -> Option<Regression> {
        let (ours, theirs) = (self.control.last_lease_epoch, newer.control.last_lease_epoch);
        if theirs < ours {
            return Some(Regression::LeaseEpoch { ours, theirs });
        }
        let (ours, theirs) = (self.control.commands_version, newer.control.commands_version);
        if theirs < ours {
            // A snapshot from a member of a build that dropped the version (a downgrade).
            return Some(Regression::CommandsVersion { ours, theirs });
        }
        if let Some(ours) = self.control.layout.filter(|l| newer.control.layout != Some(*l)) {
            return Some(Regression::Layout { ours, theirs: newer.control.layout });
        }
        for (scheme, ws) in &self.control.workers {
            for (&worker, r) in ws {
                let theirs = newer
                    .control
                    .workers
                    .get(scheme)
                    .and_then(|t| t.get(&worker))
                    .map_or(0, |t| t.high_water_ms);
                if theirs < r.high_water_ms {
                    return Some(Regression::HighWater {
                        scheme: scheme.clone(),
                        worker,
                        ours: r.high_water_ms,
                        theirs,
                    });
                }
            }
        }
        for (scheme, marks) in &self.control.session_marks {
            for (&section, &ours) in marks {
                let theirs = newer
                    .control
                    .session_marks
                    .get(scheme)
                    .and_then(|t| t.get(&section))
                    .copied()
                    .unwrap_or(0);
                if theirs < ours {
                    return Some(Regression::SessionMark {
                        scheme: scheme.clone(),
                        section,
                        ours,
                        theirs,
                    });
                }
            }
        }
        self.iter().find(|&(s, v)| newer.max_seq(s) < v).map(|(section, ours)| Regression::MaxSeq {
            section,
            ours: Seq(ours),
            theirs: Seq(newer.max_seq(section)),
        })
    }
}

/// What [`StoreState::first_regression`] found going down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Regression {
    LeaseEpoch {
        ours: LeaseEpoch,
        theirs: LeaseEpoch,
    },
    MaxSeq {
        section: SectionId,
        ours: Seq,
        theirs: Seq,
    },
    HighWater {
        scheme: String,
        worker: u64,
        ours: u64,
        theirs: u64,
    },
    SessionMark {
        scheme: String,
        section: SectionId,
        ours: u64,
        theirs: u64,
    },
    CommandsVersion {
        ours: u32,
        theirs: u32,
    },
    /// A recorded layout a snapshot drops or changes (it is fixed once recorded).
    Layout {
        ours: SetLayout,
        theirs: Option<SetLayout>,
    },
}

impl std::fmt::Display for Regression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Regression::LeaseEpoch { ours, theirs } => {
                write!(f, "the last lease epoch would go from {ours} down to {theirs}")
            }
            Regression::MaxSeq { section, ours, theirs } => {
                write!(f, "section {section}'s max_seq would go from {ours} down to {theirs}")
            }
            Regression::HighWater { scheme, worker, ours, theirs } => write!(
                f,
                "the high-water mark of worker id {worker} of id scheme {scheme:?} would go from \
                 {ours} ms down to {theirs} ms"
            ),
            Regression::SessionMark { scheme, section, ours, theirs } => write!(
                f,
                "the session time mark of section {section} of id scheme {scheme:?} would go \
                 from {ours} ms down to {theirs} ms"
            ),
            Regression::CommandsVersion { ours, theirs } => write!(
                f,
                "the set's commands version would go from {ours} down to {theirs} (a snapshot \
                 from a member of an older build: do not downgrade a raised set)"
            ),
            Regression::Layout { ours, theirs } => match theirs {
                Some(theirs) => {
                    write!(f, "the set's recorded layout would change from {ours} to {theirs}")
                }
                None => write!(f, "the set's recorded layout ({ours}) would be dropped"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An `AcquireWorker` as older builds proposed it (no leader clock).
    fn acquire(
        state: &mut StoreState,
        alloc: AllocId,
        pool: std::ops::Range<u64>,
    ) -> Result<Applied, Rejected> {
        let command = Command::AcquireWorker {
            alloc,
            scheme: "snowflake".into(),
            pool_begin: pool.start,
            pool_end: pool.end,
            layout: "L1".into(),
        };
        state.apply(&command).result
    }

    /// An `AcquireWorkerAt` proposed at `proposed_at_ms` on the leader's clock.
    fn acquire_at(
        state: &mut StoreState,
        alloc: AllocId,
        pool: std::ops::Range<u64>,
        proposed_at_ms: u64,
    ) -> Result<Applied, Rejected> {
        let command = Command::AcquireWorkerAt {
            alloc,
            scheme: "snowflake".into(),
            pool_begin: pool.start,
            pool_end: pool.end,
            layout: "L1".into(),
            proposed_at_ms,
        };
        state.apply(&command).result
    }

    fn reserve(
        state: &mut StoreState,
        alloc: AllocId,
        worker: u64,
        up_to_ms: u64,
    ) -> Result<Applied, Rejected> {
        let command = Command::ReserveTime {
            alloc,
            scheme: "snowflake".into(),
            worker,
            up_to_ms,
            layout: "L1".into(),
        };
        state.apply(&command).result
    }

    /// Worker ids: the lowest free one of the pool, the same one again for its holder, none
    /// when all are held; a freed one keeps its high-water mark, which only its holder raises
    /// and which never goes down.
    #[test]
    fn worker_ids_are_leased_lowest_first_and_keep_their_high_water_mark() {
        let mut state = StoreState::new();
        let (a, b, c) = (
            registered(&mut state, "a:1"),
            registered(&mut state, "b:1"),
            registered(&mut state, "c:1"),
        );
        assert_eq!(
            acquire(&mut state, a, 10..12),
            Ok(Applied::Worker { worker: 10, high_water_ms: 0 })
        );
        assert_eq!(
            acquire(&mut state, a, 10..12),
            Ok(Applied::Worker { worker: 10, high_water_ms: 0 }),
            "idempotent"
        );
        assert_eq!(
            acquire(&mut state, b, 10..12),
            Ok(Applied::Worker { worker: 11, high_water_ms: 0 })
        );
        assert!(matches!(acquire(&mut state, c, 10..12), Err(Rejected::NoFreeWorker { .. })));
        assert_eq!(reserve(&mut state, a, 10, 5_000), Ok(Applied::HighWater(5_000)));
        assert_eq!(
            reserve(&mut state, a, 10, 4_000),
            Ok(Applied::HighWater(5_000)),
            "never lowered"
        );
        assert!(matches!(reserve(&mut state, b, 10, 9_000), Err(Rejected::NotWorkerHolder { .. })));
        assert!(matches!(reserve(&mut state, a, 11, 9_000), Err(Rejected::NotWorkerHolder { .. })));
        // A registration holding worker ids is not forgotten.
        assert!(matches!(
            state.apply(&Command::RemoveAlloc { alloc: a }).result,
            Err(Rejected::AllocHoldsWorkers { n_workers: 1, .. })
        ));
        let before = state.clone();
        assert_eq!(state.apply(&Command::FreeWorkers { alloc: a }).result, Ok(Applied::Done));
        assert!(
            matches!(reserve(&mut state, a, 10, 9_000), Err(Rejected::NotWorkerHolder { .. })),
            "freed"
        );
        assert_eq!(
            acquire(&mut state, c, 10..12),
            Ok(Applied::Worker { worker: 10, high_water_ms: 5_000 }),
            "the next holder learns the mark it must start above"
        );
        assert_eq!(state.apply(&Command::RemoveAlloc { alloc: a }).result, Ok(Applied::Done));
        // Snapshots carry the records; one whose mark went down is a regression.
        let restored = StoreState::decode_snapshot(&state.encode_snapshot()).unwrap();
        assert_eq!(restored, state);
        assert_eq!(before.first_regression(&state), None);
        let mut lowered = state.clone();
        lowered.control.workers.get_mut("snowflake").unwrap().get_mut(&10).unwrap().high_water_ms =
            1;
        assert!(matches!(
            state.first_regression(&lowered),
            Some(Regression::HighWater { worker: 10, .. })
        ));
        // An unknown or replaced registration leases nothing.
        assert_eq!(
            acquire(&mut state, AllocId(99), 10..12),
            Err(Rejected::UnknownAlloc(AllocId(99)))
        );
        let _b2 = registered(&mut state, "b:1");
        assert_eq!(acquire(&mut state, b, 10..12), Err(Rejected::UnknownAlloc(b)), "replaced");
    }

    /// A lease that fails records no scheme (the record is persisted only with a lease), and a
    /// state that never leased a worker id snapshots in format 2, which older builds read.
    #[test]
    fn a_failed_lease_records_nothing_and_id_free_snapshots_stay_format_2() {
        let mut state = StoreState::new();
        let before = state.clone();
        let unknown = acquire(&mut state, AllocId(7), 0..4);
        assert_eq!(unknown, Err(Rejected::UnknownAlloc(AllocId(7))));
        assert_eq!(state, before, "nothing recorded");
        let format = |s: &StoreState| {
            let v: serde_json::Value = serde_json::from_slice(&s.encode_snapshot()).unwrap();
            v["format"].as_u64().unwrap()
        };
        assert_eq!(format(&state), 2);
        let a = registered(&mut state, "a:1");
        acquire(&mut state, a, 0..4).unwrap();
        assert_eq!(format(&state), 3, "worker ids only: a build reading 3 loses nothing");
        assert_eq!(StoreState::decode_snapshot(&state.encode_snapshot()).unwrap(), state);
    }

    /// The commands version only grows; a raise changes the control state (persisted) and a
    /// repeat or a lower one changes nothing; once raised, snapshots are format 5, which
    /// round-trip, and state without a raise keeps the older formats (and the field stays out
    /// of the JSON an older build reads).
    #[test]
    fn the_commands_version_only_grows_and_a_raised_set_snapshots_in_format_5() {
        let mut state = StoreState::new();
        let format = |s: &StoreState| {
            let v: serde_json::Value = serde_json::from_slice(&s.encode_snapshot()).unwrap();
            v["format"].as_u64().unwrap()
        };
        assert_eq!(format(&state), 2);
        assert!(!String::from_utf8(state.control().encode()).unwrap().contains("commands_version"));
        let raise = |state: &mut StoreState, version| {
            state.apply(&Command::RaiseCommandsVersion { version })
        };
        let raised = raise(&mut state, 1);
        assert_eq!((raised.result, raised.control_changed), (Ok(Applied::Done), true));
        assert_eq!(state.control().commands_version, 1);
        assert_eq!(format(&state), 5);
        assert_eq!(StoreState::decode_snapshot(&state.encode_snapshot()).unwrap(), state);
        for version in [1, 0] {
            let again = raise(&mut state, version);
            assert!(!again.control_changed, "raise to {version} changed something");
            assert_eq!(state.control().commands_version, 1, "lowered by a raise to {version}");
        }
        let decoded = ControlState::decode(&state.control().encode()).unwrap();
        assert_eq!(decoded.commands_version, 1, "persisted with the control state");

        // A snapshot without the version (from a downgraded member) is a regression.
        let unraised = StoreState::new();
        assert_eq!(
            state.first_regression(&unraised),
            Some(Regression::CommandsVersion { ours: 1, theirs: 0 })
        );
        // A state raised past this build is refused, as a snapshot and as persisted state.
        let mut future = state.clone();
        raise(&mut future, COMMANDS_VERSION + 1);
        let refused = StoreState::decode_snapshot(&future.encode_snapshot()).unwrap_err();
        assert!(refused.to_string().contains("applies only up to"), "{refused}");
        assert!(ControlState::decode(&future.control().encode()).is_err());
    }

    /// Every command of this build is of a version it applies; the ones added after worker ids'
    /// first release need version 1 (builds before the gate stop on them), and a raise needs
    /// the version it raises to.
    #[test]
    fn every_command_needs_a_version_this_build_applies() {
        let alloc = AllocId(1);
        let acquire_at = Command::AcquireWorkerAt {
            alloc,
            scheme: "s".into(),
            pool_begin: 0,
            pool_end: 1,
            layout: "L".into(),
            proposed_at_ms: 0,
        };
        let acquire = Command::AcquireWorker {
            alloc,
            scheme: "s".into(),
            pool_begin: 0,
            pool_end: 1,
            layout: "L".into(),
        };
        let records = Command::RecordSchemePools { schemes: Vec::new() };
        assert_eq!(acquire.needs_version(), 0, "what builds before the gate apply");
        assert_eq!(Command::ReleaseAlloc { alloc }.needs_version(), 0);
        assert_eq!(acquire_at.needs_version(), 1);
        assert_eq!(records.needs_version(), 1);
        assert_eq!(Command::RecordSchemes { schemes: Vec::new() }.needs_version(), 1);
        assert_eq!(Command::RaiseCommandsVersion { version: 1 }.needs_version(), 1);
        assert_eq!(Command::RaiseCommandsVersion { version: 7 }.needs_version(), 7);
        let layout = Command::RecordLayout { layout: SetLayout::default() };
        assert_eq!(layout.needs_version(), 2);
        for command in
            [acquire_at, acquire, records, layout, Command::RaiseCommandsVersion { version: 1 }]
        {
            assert!(command.needs_version() <= COMMANDS_VERSION, "{command:?}");
        }
    }

    /// `rongcloud` session time marks: raised only by the section's settled owner at its lease
    /// epoch (a moved section's old owner is refused, as its advances are); the answer carries
    /// the mark before (the new owner's floor) and after; never lowered; the scheme's
    /// fingerprint is recorded by the first reservation and a changed one refused; a snapshot
    /// holding marks is format 4, and one that lowers a mark is a regression.
    #[test]
    fn session_time_marks_are_fenced_like_advances_and_only_grow() {
        let mut state = StoreState::new();
        let (a, b) = (registered(&mut state, "a:1"), registered(&mut state, "b:1"));
        let e1 = LeaseEpoch(assigned(&mut state, 0, 4, a, true));
        let reserve = |state: &mut StoreState, alloc, layout: &str, section, epoch, up_to_ms| {
            let command = Command::ReserveSessionTime {
                alloc,
                scheme: "rong".into(),
                layout: layout.into(),
                section: SectionId(section),
                lease_epoch: epoch,
                up_to_ms,
            };
            state.apply(&command).result
        };
        assert_eq!(
            reserve(&mut state, a, "L", 2, e1, 5_000),
            Ok(Applied::SessionMark { before: 0, after: 5_000 })
        );
        assert_eq!(
            reserve(&mut state, a, "L", 2, e1, 4_000),
            Ok(Applied::SessionMark { before: 5_000, after: 5_000 }),
            "never lowered"
        );
        // A reservation that raises nothing changes nothing to persist (no 0 entry either).
        for (section, up_to_ms) in [(2, 5_000), (3, 0)] {
            let command = Command::ReserveSessionTime {
                alloc: a,
                scheme: "rong".into(),
                layout: "L".into(),
                section: SectionId(section),
                lease_epoch: e1,
                up_to_ms,
            };
            let before = state.clone();
            assert!(!state.apply(&command).control_changed, "section {section}");
            assert_eq!(state, before, "section {section}");
        }
        let before = state.clone();
        assert!(matches!(
            reserve(&mut state, a, "L2", 2, e1, 9_000),
            Err(Rejected::SchemeChanged { .. })
        ));
        assert!(matches!(
            reserve(&mut state, b, "L", 2, e1, 9_000),
            Err(Rejected::NotOwner { .. })
        ));
        assert!(matches!(
            reserve(&mut state, a, "L", 2, LeaseEpoch(e1.0 + 7), 9_000),
            Err(Rejected::NotOwner { .. })
        ));
        assert!(matches!(
            reserve(&mut state, a, "L", 9, e1, 9_000),
            Err(Rejected::NotOwner { .. })
        ));
        assert_eq!(state, before, "refusals change nothing");
        // Moved (unsettled, then settled): the old owner is fenced, the new one starts above.
        let e2 = LeaseEpoch(assigned(&mut state, 2, 3, b, false));
        assert!(matches!(
            reserve(&mut state, b, "L", 2, e2, 9_000),
            Err(Rejected::NotOwner { .. })
        ));
        assert!(matches!(
            reserve(&mut state, a, "L", 2, e1, 9_000),
            Err(Rejected::NotOwner { .. })
        ));
        state.apply(&Command::Settle { lease_epoch: e2 });
        assert_eq!(
            reserve(&mut state, b, "L", 2, e2, 8_000),
            Ok(Applied::SessionMark { before: 5_000, after: 8_000 })
        );
        let format = |s: &StoreState| {
            let v: serde_json::Value = serde_json::from_slice(&s.encode_snapshot()).unwrap();
            v["format"].as_u64().unwrap()
        };
        assert_eq!(format(&state), 4);
        assert_eq!(StoreState::decode_snapshot(&state.encode_snapshot()).unwrap(), state);
        let mut lowered = state.clone();
        lowered.control.session_marks.get_mut("rong").unwrap().insert(SectionId(2), 7_999);
        assert!(matches!(
            state.first_regression(&lowered),
            Some(Regression::SessionMark { ours: 8_000, theirs: 7_999, .. })
        ));
        assert_eq!(state.first_regression(&state.clone()), None);
        // The leader records its config's schemes before anyone reserves; never overwrites.
        let record = |state: &mut StoreState, fingerprint: &str| {
            let schemes = vec![("rong".to_string(), fingerprint.to_string())];
            state.apply(&Command::RecordSchemes { schemes })
        };
        let out = record(&mut state, "L2");
        assert!(!out.control_changed, "recorded by the first reservation already");
        assert_eq!(state.control.schemes["rong"].layout, "L");
        let mut fresh = StoreState::new();
        assert!(record(&mut fresh, "L2").control_changed);
        let c = registered(&mut fresh, "c:1");
        let e = LeaseEpoch(assigned(&mut fresh, 0, 4, c, true));
        assert!(
            matches!(reserve(&mut fresh, c, "L", 2, e, 1_000), Err(Rejected::SchemeChanged { .. })),
            "a set that recorded the scheme refuses another range, though it never reserved"
        );
    }

    /// `RecordLayout` records the first layout and never another one (a member whose config
    /// changed cannot overwrite it); the record lives in the control state and its snapshot.
    #[test]
    fn a_layout_is_recorded_once() {
        let mut state = StoreState::new();
        let first = SetLayout { section_size: 100, uid_begin: 0, uid_end: 1_000 };
        let halved = SetLayout { section_size: 50, ..first };
        assert!(state.apply(&Command::RecordLayout { layout: first }).control_changed);
        assert!(!state.apply(&Command::RecordLayout { layout: halved }).control_changed);
        assert_eq!(state.control.layout, Some(first));
        state.control.commands_version = COMMANDS_VERSION;
        let copy = StoreState::decode_snapshot(&state.encode_snapshot()).expect("decodes");
        assert_eq!(copy.control.layout, Some(first));
        let decoded = ControlState::decode(&state.control.encode()).expect("decodes");
        assert_eq!(decoded.layout, Some(first));
        let mut other = copy.clone();
        other.control.layout = Some(halved);
        let regression = Some(Regression::Layout { ours: first, theirs: Some(halved) });
        assert_eq!(state.first_regression(&other), regression, "a snapshot may not change it");
        other.control.layout = None;
        let regression = Some(Regression::Layout { ours: first, theirs: None });
        assert_eq!(state.first_regression(&other), regression, "nor drop it");
        assert_eq!(state.first_regression(&copy), None);
        assert_eq!(SetLayout::mismatch(Some(&first), &first), None);
        assert_eq!(SetLayout::mismatch(None, &halved), None, "nothing recorded: nothing to refuse");
        let why = SetLayout::mismatch(Some(&first), &halved).expect("a mismatch");
        assert!(why.contains("section_size 100") && why.contains("section_size 50"), "{why}");
    }

    /// A set that recorded a worker scheme's pool at start (`RecordSchemePools`) refuses a
    /// lease under another pool (a changed `workers_per_set`) though it never leased one of
    /// its ids: without the record it would take the new share, which can overlap worker ids
    /// another set still issues. Records are never overwritten.
    #[test]
    fn a_recorded_pool_refuses_a_changed_split_before_any_lease() {
        let mut state = StoreState::new();
        let record = |pool: std::ops::Range<u64>| SchemeRecord {
            layout: "L1".into(),
            pool_begin: pool.start,
            pool_end: pool.end,
        };
        let schemes = vec![("snowflake".to_string(), record(8..16))];
        assert!(state.apply(&Command::RecordSchemePools { schemes }).control_changed);
        let schemes = vec![("snowflake".to_string(), record(4..8))];
        assert!(!state.apply(&Command::RecordSchemePools { schemes }).control_changed);
        assert_eq!(state.control.schemes["snowflake"], record(8..16));
        let a = registered(&mut state, "a:1");
        assert!(
            matches!(acquire_at(&mut state, a, 4..8, 1_000), Err(Rejected::SchemeChanged { .. })),
            "a new split refused by the set that recorded the old one"
        );
        assert!(state.control.workers.is_empty(), "nothing leased");
        assert_eq!(
            acquire_at(&mut state, a, 8..16, 1_000),
            Ok(Applied::Worker { worker: 8, high_water_ms: 0 }),
            "the recorded split leases"
        );
    }

    /// `AcquireWorkerAt` (the leader's clock in the entry): a free id whose mark passed at
    /// least `WORKER_REUSE_AFTER_MS` ago comes before a never-used one (records grow with the
    /// ids held at once, not with every restart); one whose mark passed more recently does
    /// not (its new holder would wait for any clock behind the leader's). `AcquireWorker`
    /// (entries of older builds): never-used first, as those builds chose, so every member
    /// replays an entry alike.
    #[test]
    fn a_free_worker_id_whose_mark_has_passed_is_reused_before_a_never_used_one() {
        const W: u64 = WORKER_REUSE_AFTER_MS;
        let mut state = StoreState::new();
        let ids: Vec<AllocId> =
            (0..6).map(|i| registered(&mut state, &format!("h{i}:1"))).collect();
        assert_eq!(
            acquire_at(&mut state, ids[0], 0..8, 1_000),
            Ok(Applied::Worker { worker: 0, high_water_ms: 0 })
        );
        reserve(&mut state, ids[0], 0, 5_000).unwrap();
        state.apply(&Command::FreeWorkers { alloc: ids[0] });
        let before = state.clone();
        assert_eq!(
            acquire_at(&mut state, ids[1], 0..8, 5_000 + W - 1),
            Ok(Applied::Worker { worker: 1, high_water_ms: 0 }),
            "the mark passed less than the margin ago: a never-used id, no wait"
        );
        let mut replayed = before.clone();
        assert_eq!(
            acquire(&mut replayed, ids[1], 0..8),
            Ok(Applied::Worker { worker: 1, high_water_ms: 0 }),
            "an older build's entry: never-used first"
        );
        assert_eq!(
            acquire_at(&mut state, ids[2], 0..8, 5_000 + W),
            Ok(Applied::Worker { worker: 0, high_water_ms: 5_000 }),
            "the mark has passed: reused, nothing new recorded"
        );
        assert_eq!(state.control().workers["snowflake"].len(), 2);
        // Restarts one after another (each frees its id once its lease is over): two records.
        let mut now = 10 * W;
        let mut holder = ids[2];
        for i in 0..100 {
            let next = registered(&mut state, &format!("r{i}:1"));
            state.apply(&Command::FreeWorkers { alloc: holder });
            let Ok(Applied::Worker { worker, .. }) = acquire_at(&mut state, next, 0..8, now) else {
                panic!("restart {i}: no worker id");
            };
            reserve(&mut state, next, worker, now + 3_000).unwrap();
            holder = next;
            now += W + 3_000;
        }
        assert_eq!(state.control().workers["snowflake"].len(), 2, "no record per restart");
    }

    /// The new choice travels as a command of its own: an older build cannot decode it (it
    /// stops with a storage fault) instead of applying it as `AcquireWorker` and choosing
    /// another worker id; entries of older builds still decode as `AcquireWorker`.
    #[test]
    fn acquire_worker_at_is_a_command_older_builds_cannot_mistake() {
        let at = Command::AcquireWorkerAt {
            alloc: AllocId(1),
            scheme: "s".into(),
            pool_begin: 0,
            pool_end: 4,
            layout: "L".into(),
            proposed_at_ms: 7,
        };
        let json: serde_json::Value = serde_json::from_slice(&at.encode()).unwrap();
        assert!(json.get("AcquireWorkerAt").is_some(), "{json}");
        assert_eq!(Command::decode(&at.encode()).unwrap(), at);
        let old = br#"{"AcquireWorker":{"alloc":1,"scheme":"s","pool_begin":0,"pool_end":4,"layout":"L"}}"#;
        assert!(matches!(Command::decode(old), Ok(Command::AcquireWorker { .. })));
    }

    /// Never-used ids first (the lowest), then the free one with the lowest high-water mark;
    /// never outside the pool; the layout and pool a scheme was first leased under are fixed.
    #[test]
    fn fresh_worker_ids_first_then_the_lowest_mark_and_the_scheme_is_fixed() {
        let mut state = StoreState::new();
        let ids: Vec<AllocId> =
            (0..6).map(|i| registered(&mut state, &format!("h{i}:1"))).collect();
        for (i, &a) in ids.iter().take(3).enumerate() {
            let leased = acquire(&mut state, a, 0..4);
            assert_eq!(leased, Ok(Applied::Worker { worker: i as u64, high_water_ms: 0 }));
        }
        reserve(&mut state, ids[0], 0, 9_000).unwrap();
        reserve(&mut state, ids[1], 1, 7_000).unwrap();
        state.apply(&Command::FreeWorkers { alloc: ids[0] });
        state.apply(&Command::FreeWorkers { alloc: ids[1] });
        let fresh = acquire(&mut state, ids[3], 0..4);
        assert_eq!(fresh, Ok(Applied::Worker { worker: 3, high_water_ms: 0 }), "never used");
        let lowest_mark = acquire(&mut state, ids[4], 0..4);
        assert_eq!(lowest_mark, Ok(Applied::Worker { worker: 1, high_water_ms: 7_000 }));
        assert_eq!(
            acquire(&mut state, ids[5], 0..4),
            Ok(Applied::Worker { worker: 0, high_water_ms: 9_000 })
        );
        let other = registered(&mut state, "o:1");
        assert!(matches!(acquire(&mut state, other, 0..4), Err(Rejected::NoFreeWorker { .. })));
        // Another pool or layout under the same scheme name is refused, changing nothing.
        let before = state.clone();
        assert!(matches!(acquire(&mut state, other, 0..8), Err(Rejected::SchemeChanged { .. })));
        let changed = Command::AcquireWorker {
            alloc: other,
            scheme: "snowflake".into(),
            pool_begin: 0,
            pool_end: 4,
            layout: "L2".into(),
        };
        assert!(matches!(state.apply(&changed).result, Err(Rejected::SchemeChanged { .. })));
        let reserve_l2 = Command::ReserveTime {
            alloc: ids[5],
            scheme: "snowflake".into(),
            worker: 0,
            up_to_ms: 99_000,
            layout: "L2".into(),
        };
        assert!(matches!(state.apply(&reserve_l2).result, Err(Rejected::SchemeChanged { .. })));
        assert_eq!(state, before);
    }

    fn range() -> SectionRange {
        SectionRange::new(SectionId(10), SectionId(20)).unwrap()
    }

    fn adv(section: u64, max_seq: u64, lease_epoch: u64) -> SectionAdvance {
        SectionAdvance {
            section: SectionId(section),
            max_seq: Seq(max_seq),
            lease_epoch: LeaseEpoch(lease_epoch),
        }
    }

    fn operator(sections: Vec<SectionAdvance>) -> Command {
        Command::AdvanceMaxSeq { alloc: None, sections }
    }

    fn values(out: &ApplyOutcome) -> Vec<(SectionId, u64)> {
        match &out.result {
            Ok(Applied::MaxSeq(v)) => v.clone(),
            other => panic!("expected max_seq values, got {other:?}"),
        }
    }

    #[test]
    fn validation_rejects_bad_batches() {
        let r = range();
        assert_eq!(validate_read(r, 4, &[]), Err(InputError::EmptyBatch));
        assert_eq!(
            validate_read(r, 2, &[SectionId(10), SectionId(11), SectionId(12)]),
            Err(InputError::BatchTooLarge { len: 3, max: 2 })
        );
        assert!(matches!(
            validate_read(r, 4, &[SectionId(20)]),
            Err(InputError::SectionOutOfRange { .. })
        ));
        assert_eq!(
            validate_advance(r, 4, &[adv(10, 1, 0), adv(10, 2, 0)]),
            Err(InputError::DuplicateSection(SectionId(10)))
        );
        assert_eq!(validate_advance(r, 4, &[adv(19, 1, 0)]), Ok(()));
    }

    /// What an AllocSvr loads its sections from: every advanced section in the range, with its
    /// value, and nothing outside it. Empty, every section would load at 0 and re-issue values
    /// (found by mutation testing: no core test covered it).
    #[test]
    fn range_lists_exactly_the_advanced_sections_inside_it() {
        let mut s = StoreState::new();
        s.apply(&operator(vec![adv(5, 50, 0), adv(10, 100, 0), adv(15, 150, 0), adv(20, 200, 0)]));
        let r = SectionRange::new(SectionId(10), SectionId(20)).unwrap();
        let got: Vec<_> = s.range(r).collect();
        assert_eq!(got, vec![(SectionId(10), 100), (SectionId(15), 150)]);
        let all: Vec<_> = s.iter().filter(|(id, _)| r.contains(*id)).collect();
        assert_eq!(got, all);
    }

    #[test]
    fn asking_for_less_returns_current() {
        let mut s = StoreState::new();
        assert_eq!(s.apply(&operator(vec![adv(1, 100, 0)])).changed, vec![(SectionId(1), 100)]);
        let out = s.apply(&operator(vec![adv(1, 50, 0)]));
        assert_eq!(values(&out), vec![(SectionId(1), 100)]);
        assert!(out.changed.is_empty());
    }

    fn registered(s: &mut StoreState, addr: &str) -> AllocId {
        match s.apply(&Command::RegisterAlloc { addr: addr.into(), identity: None }).result {
            Ok(Applied::Registered(id)) => id,
            other => panic!("{other:?}"),
        }
    }

    fn assigned(s: &mut StoreState, b: u64, e: u64, to: AllocId, settled: bool) -> u64 {
        let r = SectionRange::new(SectionId(b), SectionId(e)).unwrap();
        match s.apply(&Command::Assign { moves: vec![(r, to)], settled }).result {
            Ok(Applied::Assigned { lease_epoch }) => lease_epoch.0,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_the_registering_identity_acts_for_a_registration() {
        let mut s = StoreState::new();
        let reg = Command::RegisterAlloc { addr: "a:1".into(), identity: Some("alloc-a".into()) };
        let Ok(Applied::Registered(a)) = s.apply(&reg).result else { panic!("not registered") };
        let plain = registered(&mut s, "b:1");
        let c = s.control();
        assert_eq!(c.check_holder(a, Some("alloc-a")), Ok(()));
        assert_eq!(c.check_holder(a, None), Ok(()), "plaintext: nothing to check");
        assert!(matches!(
            c.check_holder(a, Some("alloc-b")),
            Err(HolderRefused::NotTheHolder { registered: Some(r), .. }) if r == "alloc-a"
        ));
        assert!(matches!(
            c.check_holder(plain, Some("alloc-a")),
            Err(HolderRefused::NotTheHolder { registered: None, .. })
        ));
        assert_eq!(
            c.check_holder(AllocId(99), Some("alloc-a")),
            Err(HolderRefused::Unknown(AllocId(99)))
        );
        // The identity survives the log and the persisted control state, and a record written
        // before identities existed decodes as identity-less.
        assert_eq!(Command::decode(&reg.encode()).unwrap(), reg);
        let back = ControlState::decode(&c.encode()).unwrap();
        assert_eq!(back.allocs[&a].identity.as_deref(), Some("alloc-a"));
        // A registration at a1's address under a new identity (its certificate renamed) replaces
        // a1, as a restart does; the new one is bound to the new identity.
        let renamed =
            Command::RegisterAlloc { addr: "a:1".into(), identity: Some("alloc-b".into()) };
        let Ok(Applied::Registered(a2)) = s.apply(&renamed).result else { panic!("refused") };
        assert!(s.control().allocs[&a].replaced && !s.control().allocs[&a2].replaced);
        assert_eq!(s.control().check_holder(a2, Some("alloc-b")), Ok(()));
        let on_plain = Command::RegisterAlloc { addr: "b:1".into(), identity: Some("x".into()) };
        assert!(matches!(s.apply(&on_plain).result, Ok(Applied::Registered(_))));
        assert!(s.control().allocs[&plain].replaced);
        let old = br#"{"RegisterAlloc":{"addr":"c:1"}}"#;
        assert_eq!(
            Command::decode(old).unwrap(),
            Command::RegisterAlloc { addr: "c:1".into(), identity: None }
        );
    }

    #[test]
    fn advances_are_fenced_by_owner_epoch_and_settlement() {
        let mut s = StoreState::new();
        let a = registered(&mut s, "a:1");
        let b = registered(&mut s, "b:1");
        let e1 = assigned(&mut s, 0, 10, a, true);
        let by = |alloc, section, v, e| Command::AdvanceMaxSeq {
            alloc: Some(alloc),
            sections: vec![adv(section, v, e)],
        };
        assert_eq!(values(&s.apply(&by(a, 3, 100, e1))), vec![(SectionId(3), 100)]);
        // Not the owner; wrong epoch: rejected, nothing changes.
        assert!(matches!(s.apply(&by(b, 3, 200, e1)).result, Err(Rejected::NotOwner { .. })));
        assert!(matches!(s.apply(&by(a, 3, 200, e1 + 7)).result, Err(Rejected::NotOwner { .. })));
        // Hand-over to b: a's old epoch is stale at once; b waits for the fence to settle.
        let e2 = assigned(&mut s, 0, 10, b, false);
        assert!(e2 > e1, "lease epochs grow");
        let stale = s.apply(&by(a, 3, 300, e1));
        assert!(matches!(stale.result, Err(Rejected::NotOwner { .. })));
        assert!(stale.changed.is_empty());
        assert!(matches!(s.apply(&by(b, 3, 300, e2)).result, Err(Rejected::NotOwner { .. })));
        s.apply(&Command::Settle { lease_epoch: LeaseEpoch(e2) });
        assert_eq!(values(&s.apply(&by(b, 3, 300, e2))), vec![(SectionId(3), 300)]);
        // A batch with one bad section changes nothing at all.
        let mixed = Command::AdvanceMaxSeq {
            alloc: Some(b),
            sections: vec![adv(4, 999, e2), adv(11, 999, e2)],
        };
        assert!(s.apply(&mixed).result.is_err());
        assert_eq!(s.max_seq(SectionId(4)), 0);
        assert_eq!(s.max_seq(SectionId(3)), 300);
    }

    #[test]
    fn registry_replaces_by_address_and_removes_only_empty_allocs() {
        let mut s = StoreState::new();
        let a1 = registered(&mut s, "a:1");
        assigned(&mut s, 0, 5, a1, true);
        let a2 = registered(&mut s, "a:1");
        assert_ne!(a1, a2, "ids are never reused");
        assert!(!s.control().is_current(a1));
        let r = SectionRange::new(SectionId(5), SectionId(6)).unwrap();
        assert_eq!(
            s.apply(&Command::Assign { moves: vec![(r, a1)], settled: true }).result,
            Err(Rejected::UnknownAlloc(a1)),
            "a replaced registration gets nothing"
        );
        assert!(matches!(
            s.apply(&Command::RemoveAlloc { alloc: a1 }).result,
            Err(Rejected::AllocOwnsSections { .. })
        ));
        assigned(&mut s, 0, 5, a2, false);
        assert_eq!(s.apply(&Command::RemoveAlloc { alloc: a1 }).result, Ok(Applied::Done));
    }

    #[test]
    fn command_and_snapshot_round_trip() {
        let cmd = operator(vec![adv(3, 7, 0), adv(4, 9, 0)]);
        assert_eq!(Command::decode(&cmd.encode()).unwrap(), cmd);
        assert!(Command::decode(b"garbage").is_err());
        let mut s = StoreState::new();
        s.apply(&cmd);
        let a = registered(&mut s, "a:1");
        assigned(&mut s, 0, 5, a, false);
        let back = StoreState::decode_snapshot(&s.encode_snapshot()).unwrap();
        assert_eq!(back, s);
        assert_eq!(
            s.first_regression(&StoreState::new()),
            Some(Regression::LeaseEpoch { ours: LeaseEpoch(1), theirs: LeaseEpoch(0) })
        );
        assert_eq!(StoreState::new().first_regression(&s), None);
    }

    /// One operator raise may add at most `max_raise` to a section's committed `max_seq`
    /// (exactly `max_raise` passes; a section not in `current` counts from 0; lowering or
    /// keeping a value is no raise).
    #[test]
    fn an_operator_raise_past_max_raise_is_refused() {
        let current = [(SectionId(10), 1_000), (SectionId(11), 5)];
        let max = 1 << 40;
        let ok = [adv(10, 1_000 + max, 0), adv(11, 0, 0), adv(12, max, 0)];
        assert_eq!(validate_operator_raise(&current, &ok, max), Ok(()));
        let err = validate_operator_raise(&current, &[adv(11, 6, 0), adv(10, 1_001 + max, 0)], max)
            .unwrap_err();
        assert_eq!(
            err,
            InputError::RaiseTooFar { section: SectionId(10), from: 1_000, to: 1_001 + max, max }
        );
        assert!(err.to_string().contains("store.max_operator_raise"), "{err}");
        assert!(validate_operator_raise(&current, &[adv(12, max + 1, 0)], max).is_err());
        assert!(validate_operator_raise(&[], &[adv(12, MAX_SEQ_CEILING, 0)], max).is_err());
    }

    #[test]
    fn advances_above_the_ceiling_are_refused_before_proposing() {
        let r = range();
        assert_eq!(validate_advance(r, 4, &[adv(10, MAX_SEQ_CEILING, 0)]), Ok(()));
        for target in [MAX_SEQ_CEILING + 1, u64::MAX - 5, u64::MAX] {
            // One bad section refuses the whole batch, operator raise or not.
            let err = validate_advance(r, 4, &[adv(11, 5, 0), adv(12, target, 3)]).unwrap_err();
            assert_eq!(
                err,
                InputError::AboveCeiling { section: SectionId(12), max_seq: Seq(target) }
            );
            let msg = err.to_string();
            assert!(msg.contains("ceiling 9223372036854775808 (2^63)"), "{msg}");
        }
        // The batch checks come first, so a malformed batch reports what is malformed.
        assert_eq!(
            validate_advance(r, 4, &[adv(12, u64::MAX, 0), adv(12, 1, 0)]),
            Err(InputError::DuplicateSection(SectionId(12)))
        );
    }

    #[test]
    fn apply_refuses_rather_than_overflows_its_counters() {
        let mut s = StoreState::new();
        let a = registered(&mut s, "a:1");
        assigned(&mut s, 0, 5, a, true);
        let full = |f: fn(&mut ControlState)| {
            let mut c = s.control().clone();
            f(&mut c);
            StoreState::from_parts(s.iter(), c)
        };
        let r = SectionRange::new(SectionId(5), SectionId(6)).unwrap();
        let lease = LeaseConfig { lease_ms: 3000, margin_ms: 300 };
        let cases: Vec<(StoreState, Command)> = vec![
            (
                full(|c| c.last_alloc_id = u64::MAX),
                Command::RegisterAlloc { addr: "b:1".into(), identity: None },
            ),
            (
                full(|c| c.last_lease_epoch = LeaseEpoch(u64::MAX)),
                Command::Assign { moves: vec![(r, a)], settled: false },
            ),
            (
                full(|c| c.route_version = RouteVersion(u64::MAX)),
                Command::Assign { moves: vec![(r, a)], settled: true },
            ),
            (
                full(|c| {
                    c.allocs.insert(
                        AllocId(9),
                        AllocRecord {
                            addr: "z:1".into(),
                            draining: false,
                            replaced: true,
                            released: false,
                            identity: None,
                        },
                    );
                    c.route_version = RouteVersion(u64::MAX);
                }),
                Command::RemoveAlloc { alloc: AllocId(9) },
            ),
            (
                full(|c| c.lease_changes = u64::MAX),
                Command::SetLease { lease, after_change: u64::MAX },
            ),
        ];
        for (mut state, command) in cases {
            let before = state.clone();
            let out = state.apply(&command);
            assert!(
                matches!(out.result, Err(Rejected::Exhausted { .. })),
                "{command:?}: {:?}",
                out.result
            );
            assert!(!out.control_changed && out.changed.is_empty());
            assert_eq!(state, before, "{command:?} changed something");
        }
        // max_seq takes `max`, never a sum: u64::MAX (from a log written before the ceiling)
        // still applies.
        let out = s.apply(&operator(vec![adv(1, u64::MAX, 0)]));
        assert_eq!(values(&out), vec![(SectionId(1), u64::MAX)]);
        assert_eq!(values(&s.apply(&operator(vec![adv(1, 7, 0)]))), vec![(SectionId(1), u64::MAX)]);
    }

    #[test]
    fn set_lease_is_validated_compare_and_set_and_keeps_the_previous_lease() {
        let mut s = StoreState::new();
        assert_eq!(s.control().longest_hold_ms(), None);
        let l1 = LeaseConfig { lease_ms: 3000, margin_ms: 300 };
        let l2 = LeaseConfig { lease_ms: 1000, margin_ms: 100 };
        let set = |lease, after_change| Command::SetLease { lease, after_change };
        let bad = LeaseConfig { lease_ms: 1000, margin_ms: 600 };
        assert!(matches!(validate_lease(&bad), Err(InputError::InvalidLease(_))));
        let out = s.apply(&set(bad, 0));
        assert!(matches!(out.result, Err(Rejected::InvalidLease(_))));
        assert!(!out.control_changed);
        assert_eq!(s.apply(&set(l1, 0)).result, Ok(Applied::LeaseChanged { lease_changes: 1 }));
        assert_eq!((s.control().lease, s.control().previous_lease), (Some(l1), Some(l1)));
        let stale = s.apply(&set(l2, 0));
        assert_eq!(
            stale.result,
            Err(Rejected::StaleLeaseChange { after_change: 0, lease_changes: 1 })
        );
        assert!(!stale.control_changed);
        let out = s.apply(&set(l2, 1));
        assert_eq!(out.result, Ok(Applied::LeaseChanged { lease_changes: 2 }));
        assert!(out.control_changed, "the caller must persist the new lease");
        assert_eq!((s.control().lease, s.control().previous_lease), (Some(l2), Some(l1)));
        assert_eq!(s.control().longest_hold_ms(), Some(3300));
        // Round trips through commands, the control record and snapshots.
        let cmd = set(l2, 1);
        assert_eq!(Command::decode(&cmd.encode()).unwrap(), cmd);
        assert_eq!(ControlState::decode(&s.control().encode()).unwrap(), *s.control());
        assert_eq!(StoreState::decode_snapshot(&s.encode_snapshot()).unwrap(), s);
    }

    #[test]
    fn control_records_and_snapshots_from_before_the_replicated_lease_still_decode() {
        // Written by the build before `lease`, `previous_lease` and `lease_changes` existed.
        let control = r#"{"allocs":{"1":{"addr":"a:1","draining":false,"replaced":false}},
            "assignment":{"runs":{}},"last_alloc_id":1,"last_lease_epoch":4,"route_version":6}"#;
        let c = ControlState::decode(control.as_bytes()).unwrap();
        assert_eq!((c.lease, c.previous_lease, c.lease_changes), (None, None, 0));
        assert_eq!(
            (c.last_alloc_id, c.last_lease_epoch, c.route_version),
            (1, LeaseEpoch(4), RouteVersion(6))
        );
        let snapshot = format!(r#"{{"format":2,"max_seq":[[3,700]],"control":{control}}}"#);
        let s = StoreState::decode_snapshot(snapshot.as_bytes()).unwrap();
        assert_eq!(s.max_seq(SectionId(3)), 700);
        assert_eq!(*s.control(), c);
        // The same for a record of today's format with the new fields taken out.
        let mut s = StoreState::new();
        let a = registered(&mut s, "a:1");
        assigned(&mut s, 0, 5, a, false);
        let mut v: serde_json::Value = serde_json::from_slice(&s.control().encode()).unwrap();
        for field in ["lease", "previous_lease", "lease_changes"] {
            assert!(v.as_object_mut().unwrap().remove(field).is_some(), "{field}");
        }
        let old = ControlState::decode(&serde_json::to_vec(&v).unwrap()).unwrap();
        assert_eq!(old, *s.control());
    }

    proptest! {
        /// Against a reference model (a map of the largest value ever requested per section):
        /// the state equals the model after every command, and no value ever goes down (I4).
        #[test]
        fn matches_reference_model(
            batches in prop::collection::vec(
                prop::collection::vec((0u64..8, 0u64..1_000), 1..6), 1..40)
        ) {
            let mut state = StoreState::new();
            let mut model: BTreeMap<u64, u64> = BTreeMap::new();
            for batch in batches {
                let before = state.clone();
                let cmd = operator(batch.iter().map(|&(s, v)| adv(s, v, 0)).collect());
                let out = state.apply(&cmd);
                let results = values(&out);
                for (i, &(s, v)) in batch.iter().enumerate() {
                    let m = model.entry(s).or_insert(0);
                    *m = (*m).max(v);
                    // A repeated section in one command sees its earlier raise.
                    prop_assert!(results[i].1 >= v);
                }
                for (&s, &m) in &model {
                    prop_assert_eq!(state.max_seq(SectionId(s)), m);
                }
                prop_assert_eq!(before.first_regression(&state), None);
                // Persisting `changed` in order must leave exactly the in-memory values.
                let mut persisted = BTreeMap::new();
                for &(s, v) in &out.changed {
                    persisted.insert(s, v);
                }
                for (&s, &v) in &persisted {
                    prop_assert_eq!(state.max_seq(s), v);
                }
                // ... and every raised section is in it: one left out would be raised in
                // memory but not on disk, and a restart would lower it (I4).
                for s in 0..8 {
                    let s = SectionId(s);
                    if before.max_seq(s) != state.max_seq(s) {
                        prop_assert_eq!(persisted.get(&s).copied(), Some(state.max_seq(s)));
                    }
                }
            }
        }

        /// Every control-state command that changes the control state reports
        /// `control_changed`: unreported, the change would live in memory only, and a restarted
        /// replica would fence differently from the others.
        #[test]
        fn control_changed_is_reported_whenever_control_changes(
            script in prop::collection::vec((0u8..7, 0u64..4, 10u64..20, 1u64..4), 1..40)
        ) {
            let mut state = StoreState::new();
            for (kind, who, section, len) in script {
                let alloc = AllocId(who + 1);
                let end = (section + len).min(20);
                let r = SectionRange::new(SectionId(section), SectionId(end)).unwrap();
                let lease_epoch = state.control().last_lease_epoch;
                let command = match kind {
                    0 => Command::RegisterAlloc { addr: format!("127.0.0.1:{}", 7200 + who), identity: None },
                    1 => Command::Assign { moves: vec![(r, alloc)], settled: false },
                    2 => Command::Assign { moves: vec![(r, alloc)], settled: true },
                    3 => Command::Settle { lease_epoch },
                    4 => Command::SetDraining { alloc, draining: who % 2 == 0 },
                    5 => Command::ReleaseAlloc { alloc },
                    _ => Command::RemoveAlloc { alloc },
                };
                let before = state.control().clone();
                let out = state.apply(&command);
                // Never under-reported (over-reporting costs a write of an unchanged record).
                prop_assert!(
                    out.control_changed || &before == state.control(),
                    "{:?} -> {:?} changed the control state without saying so",
                    command,
                    out.result
                );
            }
        }
    }
}
