//! The Raft driver: the one owner of the `RawNode`. Only this module touches raft-rs's node.
//!
//! It runs on a thread of its own (RocksDB fsyncs block), fed by a bounded channel of [`Input`]s:
//! requests from gRPC handlers (each with a oneshot for the answer), messages from peers, and
//! transport reports. Each turn of the loop handles what arrived, ticks on schedule, and then
//! processes the Ready in the order raft-rs prescribes:
//!
//! 1. send the leader's messages (they may go out before the leader's own append is durable);
//! 2. note read states (ReadIndex answers);
//! 3. persist snapshot + entries + hard state in ONE synced `WriteBatch`;
//! 4. apply committed entries (all persisted by earlier Readies) and answer their proposers;
//! 5. send persisted messages (votes, append responses): only now may others rely on them;
//! 6. `advance`, then the light Ready: its messages, its committed entries, `advance_apply`;
//! 7. answer reads whose index is applied; compact the log when it grew past the threshold.
//!
//! On the leader the driver also runs the arbiter (`seqsvr-core::arbiter`): each tick it asks
//! for a plan and proposes it (one round in flight at a time), answers AllocSvr heartbeats with
//! grants after a ReadIndex confirms leadership, and tells the arbiter what applied.
//!
//! # Layout
//! - this file: the [`Driver`], its loop ([`Driver::run`]), the dispatch of each [`Input`], and
//!   proposing / reading through Raft;
//! - `api`: the configuration, requests, answers and admin views (re-exported here);
//! - `replies`: who waits for each pending proposal and read;
//! - `inbound`: Raft messages from peers, and the ones this member must not act on;
//! - `ready`: the Ready steps 1–7 above: persist, apply, answer, compact;
//! - `membership`: membership changes, peer addresses, leadership hand-off;
//! - `leases`: the arbiter of the current term (plans, grants, lease changes);
//! - `health`: quorum in sight, health, metrics and status;
//! - `versions`: the commands version gate (what may be proposed during a rolling upgrade);
//! - `worker_share`: how many worker ids of a scheme one `alloc` identity may hold.
//!
//! The driver reaches its peers through an [`Outbox`] (the gRPC [`crate::transport::Transport`],
//! or the in-memory network of `harness` in tests).

mod api;
mod health;
mod inbound;
mod leases;
mod membership;
mod ready;
mod replies;
mod versions;
mod worker_share;

#[cfg(test)]
mod harness;
#[cfg(test)]
mod tests;

pub use api::{
    channel, peer_reports, Advanced, AllocLeaseView, DriverConfig, DriverHandle, Grant, Input,
    LeasesView, MemberView, MembershipChange, MembershipDone, NodeStatus, ReadDone, RequestError,
    Role, RouteView, Serving, SessionReservation, TimeReservation, DRIVER_QUEUE_MAX,
};
pub use membership::PROMOTE_LAG_MAX;

use crate::leader_state::{Pending, Proposals, TermSlot};
use crate::outbox::{Outbox, PeerReport};
use crate::storage::{NodeStorage, StorageFault};
use raft::{RawNode, SnapshotStatus, StateRole};
use replies::{PendingRead, ProposalReply, ReadKind};
use seqsvr_core::arbiter::Arbiter;
use seqsvr_core::ids::AllocId;
use seqsvr_core::store::{Command, HolderRefused, SetLayout};
use seqsvr_core::teeth::Tooth;
use seqsvr_server::BootInstant;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Proposals awaiting apply at most; past it, callers get UNAVAILABLE (overloaded).
const PENDING_PROPOSALS_MAX: usize = 16_384;
/// Reads awaiting their ReadIndex at most.
const PENDING_READS_MAX: usize = 16_384;
/// Inputs handled per loop turn before processing the Ready (batching without starving ticks).
const INPUTS_PER_TURN_MAX: usize = 512;

pub struct Driver {
    node: RawNode<NodeStorage>,
    config: DriverConfig,
    /// Where Raft messages go: the gRPC transport, or an in-memory network in tests.
    outbox: Box<dyn Outbox>,
    /// Proposals by log index. Invariant: every key is > the applied index.
    proposals: Proposals<ProposalReply>,
    reads: HashMap<u64, PendingRead>,
    next_read_id: u64,
    /// When each peer was last heard from: the leader proposes only with a quorum in sight.
    last_heard: HashMap<u64, Instant>,
    /// Peers whose last batch said they are vote-blocked: no leadership for them, and they do
    /// not count toward the voters a removal must leave.
    blocked_peers: std::collections::HashSet<u64>,
    /// The commands version each peer last reported in an answer to this leader, in which term,
    /// and when (see
    /// `versions.rs`): the leader raises the set's version only once every member reported at
    /// least as much lately.
    peer_commands_versions: HashMap<u64, (u32, u64, Instant)>,
    /// The cluster-file layout each peer reported with its answers to this leader (term, when),
    /// as `peer_commands_versions`: the layout is recorded only once every member reported ours.
    peer_layouts: HashMap<u64, (Option<SetLayout>, u64, Instant)>,
    /// The members (with what they reported) a raise was last logged as waiting for: one line
    /// per change of who is behind, not one per arbiter round.
    commands_version_wait_logged: Option<Vec<(u64, u32)>>,
    was_leader: bool,
    /// Present while this member is leader, for exactly one term (see `leader_state.rs`).
    arbiter: TermSlot<Arbiter>,
    /// Origin of the milliseconds handed to the arbiter: CLOCK_BOOTTIME, which keeps counting
    /// while the host is suspended (CLOCK_MONOTONIC, `Instant`, stops; a leader host suspended
    /// past a lease would wake up believing its grants and fences were younger than they are).
    clock: BootInstant,
    /// The term in which a blocked vote was last logged (one line per term, not per message).
    vote_block_logged_term: u64,
    metrics: crate::metrics::StoreMetrics,
    /// The leader id published last (a change counts in `leader_changes` and is logged).
    published_leader: u64,
    /// Whether this member knows a leader with a quorum in sight, and why not: what the
    /// StoreSvr's gRPC health reports.
    serving: watch::Sender<Serving>,
    /// Id schemes whose config differs from what the set recorded, already logged (one error
    /// line per scheme, not one per arbiter round).
    changed_schemes_logged: std::collections::BTreeSet<String>,
    /// The members with another layout (`leases.rs::layout_dispute`) last logged: while there
    /// are any, nothing is assigned and the record waits.
    layout_wait_logged: Option<Vec<String>>,
    /// Time reservations refused as too far ahead since the last log line, and when that was.
    clock_refusals: u64,
    clock_refusal_logged: Option<Instant>,
}

/// At most one log line per this long about reservations refused as too far ahead.
const CLOCK_REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

impl Driver {
    pub fn new(
        storage: NodeStorage,
        config: DriverConfig,
        outbox: impl Outbox + 'static,
    ) -> anyhow::Result<Driver> {
        let raft_config = raft::Config {
            id: config.node_id.0,
            election_tick: config.election_ticks,
            heartbeat_tick: config.heartbeat_ticks,
            applied: storage.applied_index(),
            max_size_per_msg: 1024 * 1024,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        raft_config.validate()?;
        if let Some(layout) = &config.layout {
            // Refused before anything runs: serving a single value under another layout could
            // repeat one (see `Command::RecordLayout`).
            let recorded = storage.state().control().layout;
            if let Some(why) = SetLayout::mismatch(recorded.as_ref(), layout) {
                anyhow::bail!("refusing to start: {why}");
            }
        }
        let node = RawNode::new(&raft_config, storage, &crate::raft_log::logger())?;
        Ok(Driver {
            node,
            config,
            outbox: Box::new(outbox),
            proposals: Proposals::default(),
            reads: HashMap::new(),
            next_read_id: 1,
            last_heard: HashMap::new(),
            blocked_peers: Default::default(),
            peer_commands_versions: HashMap::new(),
            peer_layouts: HashMap::new(),
            commands_version_wait_logged: None,
            was_leader: false,
            arbiter: TermSlot::default(),
            clock: BootInstant::now(),
            vote_block_logged_term: 0,
            metrics: crate::metrics::StoreMetrics::new(),
            published_leader: raft::INVALID_ID,
            changed_schemes_logged: Default::default(),
            layout_wait_logged: None,
            clock_refusals: 0,
            clock_refusal_logged: None,
            serving: watch::channel(Serving {
                serving: false,
                reason: "starting",
                established: false,
            })
            .0,
        })
        .map(|mut driver| {
            driver.sync_peers();
            driver.outbox.set_vote_blocked(driver.node.store().vote_blocked());
            if driver.node.store().vote_blocked() {
                tracing::warn!(
                    "this member started from an empty data dir of an existing set: it will not \
                     vote or campaign until a membership change applied from the log makes it a \
                     voter (seqctl store add-learner, then promote; a member that is still a \
                     voter must be removed first)"
                );
            }
            driver
        })
    }

    /// Follows whether this member knows a leader with a quorum in sight (updated every tick).
    pub fn serving(&self) -> watch::Receiver<Serving> {
        self.serving.subscribe()
    }

    /// Runs until `shutdown` flips or every sender is gone. An `Err` is a storage fault: the
    /// process must stop, because acknowledging anything after a failed write could break I2.
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<Input>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), StorageFault> {
        let mut ticker = tokio::time::interval(self.config.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                _ = ticker.tick() => self.on_tick(),
                input = rx.recv() => {
                    let Some(input) = input else { break };
                    self.handle(input);
                    for _ in 1..INPUTS_PER_TURN_MAX {
                        match rx.try_recv() {
                            Ok(input) => self.handle(input),
                            Err(_) => break,
                        }
                    }
                }
            }
            self.on_ready()?;
        }
        self.fail_all(RequestError::Stopped);
        Ok(())
    }

    /// One tick of the loop's clock: Raft's logical clock, the arbiter's round, the gauges and
    /// health. (Tests call it directly, as they call `handle` and `on_ready`.)
    pub(crate) fn on_tick(&mut self) {
        // A vote-blocked member never campaigns: a follower's tick only counts
        // toward an election.
        if !self.node.store().vote_blocked() || self.node.raft.state == StateRole::Leader {
            self.node.tick();
        }
        self.arbitrate();
        self.publish();
    }

    /// Handles one input: answers it, or starts what will answer it (a proposal, a read).
    pub(crate) fn handle(&mut self, input: Input) {
        match input {
            Input::Raft { from_addr, vote_blocked, commands_version, layout, messages } => {
                self.step_messages(&from_addr, vote_blocked, commands_version, layout, messages)
            }
            Input::Membership { change, reply } => self.propose_membership(change, reply),
            Input::SetLease { lease, reply } => self.set_lease(lease, reply),
            Input::Peer(PeerReport::Unreachable(to)) => self.node.report_unreachable(to.0),
            Input::Peer(PeerReport::Snapshot { to, delivered }) => {
                let status = if delivered {
                    self.metrics.snapshots_sent.increment(1);
                    SnapshotStatus::Finish
                } else {
                    SnapshotStatus::Failure
                };
                self.node.report_snapshot(to.0, status);
            }
            Input::Advance { alloc, sections, identity, reply } => {
                if let Some(alloc) = alloc {
                    if let Err(e) = self.check_holder(alloc, identity.as_deref()) {
                        let _ = reply.send(Err(e));
                        return;
                    }
                }
                let command = Command::AdvanceMaxSeq { alloc, sections };
                self.propose(command, ProposalReply::Advance(reply));
            }
            Input::Register { addr, identity, max_current, reply } => {
                if let Some(identity) = identity.as_deref() {
                    if let Err(e) = self.check_registrations(identity, &addr, max_current) {
                        tracing::warn!(target: seqsvr_tls::AUDIT_TARGET, %addr,
                            "RESOURCE_EXHAUSTED: {e}");
                        let _ = reply.send(Err(e));
                        return;
                    }
                }
                let command =
                    Command::RegisterAlloc { addr: addr.clone(), identity: identity.clone() };
                self.propose(command, ProposalReply::Register { reply, identity, addr });
            }
            Input::Move { range, to, reply } => {
                let control = self.node.store().state().control();
                let eligible = control.allocs.get(&to).is_some_and(|r| !r.replaced && !r.draining);
                let differing = leases::describe_dispute(&self.layout_dispute());
                if !differing.is_empty() {
                    let _ = reply.send(Err(RequestError::Precondition(format!(
                        "no section moves while members' cluster files map uids otherwise than \
                         this leader's ({}; this leader: {}): give every member the same \
                         section_size and uid range first",
                        differing.join("; "),
                        self.config.layout.map(|l| l.to_string()).unwrap_or_default()
                    ))));
                } else if !self.config.sections.contains(range.begin())
                    || range.end() > self.config.sections.end()
                    || range.is_empty()
                {
                    let _ = reply.send(Err(RequestError::Invalid(format!(
                        "sections [{}, {}) are not a non-empty part of this set's [{}, {})",
                        range.begin(),
                        range.end(),
                        self.config.sections.begin(),
                        self.config.sections.end()
                    ))));
                } else if !eligible {
                    let _ = reply.send(Err(RequestError::Invalid(format!(
                        "alloc {to} is not a registered, non-draining AllocSvr of this set"
                    ))));
                } else {
                    // Fenced: the old owner may serve until its lease must have run out.
                    let command = Command::Assign { moves: vec![(range, to)], settled: false };
                    self.propose(command, ProposalReply::Move(reply));
                }
            }
            Input::Drain { alloc, drain, reply } => {
                let command = Command::SetDraining { alloc, draining: drain };
                self.propose(command, ProposalReply::Done(reply));
            }
            Input::StepDown { reply } => {
                let _ = reply.send(Ok(self.step_down()));
            }
            Input::AcquireWorker { alloc, scheme, layout, identity, reply } => {
                if let Err(e) = self.check_holder(alloc, identity.as_deref()) {
                    let _ = reply.send(Err(e));
                    return;
                }
                let Some(pool) = self.config.scheme_records.get(&scheme).and_then(|r| r.pool())
                else {
                    let known: Vec<&str> = (self.config.scheme_records.iter())
                        .filter(|(_, r)| r.pool().is_some())
                        .map(|(name, _)| name.as_str())
                        .collect();
                    let _ = reply.send(Err(RequestError::Invalid(format!(
                        "no id scheme {scheme:?} with worker ids in this store's cluster config \
                         (its [ids.schemes] with worker ids: {known:?})"
                    ))));
                    return;
                };
                // Only to a registration the arbiter still grants: one it found dead gets no
                // lease, and its worker ids are being freed.
                let checked = (self.check_not_renamed(&scheme))
                    .and_then(|()| self.check_worker_share(alloc, &scheme, pool.end - pool.start))
                    .and_then(|()| self.check_may_lease_worker(alloc));
                if let Err(e) = checked {
                    let _ = reply.send(Err(e));
                    return;
                }
                let (pool_begin, pool_end) = (pool.start, pool.end);
                let scheme_name = scheme.clone();
                let command = if self.commands_cover(1) {
                    Command::AcquireWorkerAt {
                        alloc,
                        scheme,
                        pool_begin,
                        pool_end,
                        layout,
                        // Every member chooses the worker id by this clock (reuse one whose
                        // mark has passed), not by its own.
                        proposed_at_ms: seqsvr_server::clock::unix_ms_now(),
                    }
                } else {
                    // A member of an older build (rolling upgrade) knows only `AcquireWorker`:
                    // it never reuses a freed id before a never-used one, which is as safe
                    // (every holder starts above the id's mark), only less thrifty.
                    Command::AcquireWorker { alloc, scheme, pool_begin, pool_end, layout }
                };
                self.propose(command, ProposalReply::Worker { reply, alloc, scheme: scheme_name });
            }
            Input::ReserveTime { reservation, identity, reply } => {
                let TimeReservation { alloc, scheme, worker, up_to_ms, layout } = reservation;
                if let Err(e) =
                    self.check_reservation(alloc, identity.as_deref(), up_to_ms, &scheme)
                {
                    let _ = reply.send(Err(e));
                    return;
                }
                let command = Command::ReserveTime { alloc, scheme, worker, up_to_ms, layout };
                self.propose(command, ProposalReply::HighWater(reply));
            }
            Input::ReserveSessionTime { reservation, identity, reply } => {
                let SessionReservation { alloc, scheme, layout, section, lease_epoch, up_to_ms } =
                    reservation;
                let checked = self.check_session_scheme(&scheme, &layout, section).and_then(|()| {
                    self.check_reservation(alloc, identity.as_deref(), up_to_ms, &scheme)
                });
                let checked = checked.and_then(|()| {
                    self.require_commands_version(1, "rongcloud session time reservations")
                });
                if let Err(e) = checked {
                    let _ = reply.send(Err(e));
                    return;
                }
                let command = Command::ReserveSessionTime {
                    alloc,
                    scheme,
                    layout,
                    section,
                    lease_epoch,
                    up_to_ms,
                };
                self.propose(command, ProposalReply::SessionMark(reply));
            }
            Input::Release { alloc, identity, reply } => {
                // A release lets the arbiter move the sections at once, without waiting out the
                // lease: from anyone but the holder itself it would break I3.
                if let Err(e) = self.check_holder(alloc, identity.as_deref()) {
                    let _ = reply.send(Err(e));
                    return;
                }
                tracing::info!(alloc = %alloc, "AllocSvr hands its sections back (graceful shutdown)");
                self.propose(Command::ReleaseAlloc { alloc }, ProposalReply::Done(reply));
            }
            Input::Read { sections, reply } => self.read(ReadKind::MaxSeq { sections, reply }),
            Input::Load { range, reply } => self.read(ReadKind::Load { range, reply }),
            Input::Heartbeat { alloc, route_version, identity, reply } => {
                self.read(ReadKind::Heartbeat { alloc, route_version, identity, reply })
            }
            Input::Route { reply } => self.read(ReadKind::Route { reply }),
            Input::Leases { reply } => {
                let _ = reply.send(self.leases());
            }
            Input::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Input::LocalRead { sections, reply } => {
                let store = self.node.store();
                let values = sections.iter().map(|&s| (s, store.state().max_seq(s))).collect();
                let _ =
                    reply.send(ReadDone { sections: values, read_index: store.applied_index() });
            }
            Input::TransferLeader { target, reply } => {
                let _ = reply.send(self.transfer_leader(target));
            }
        }
    }

    /// Before proposing for an alloc: may `identity` act for it? Checked against this member's
    /// applied registrations; one not applied here yet is "retry", never "yes".
    /// What every time reservation (worker ids, rongcloud sections) must pass before it is
    /// proposed: the registering identity, a leader that may propose, and a mark not too far
    /// ahead of this (the leader's) clock. A follower redirects first: only the leader's clock
    /// judges.
    fn check_reservation(
        &mut self,
        alloc: AllocId,
        identity: Option<&str>,
        up_to_ms: u64,
        scheme: &str,
    ) -> Result<(), RequestError> {
        self.check_holder(alloc, identity)?;
        self.check_can_serve(self.proposals.len(), PENDING_PROPOSALS_MAX)?;
        self.check_reserve_ahead(up_to_ms, scheme)
    }

    /// A rongcloud reservation names this store's scheme, with this store's fingerprint (the
    /// layout and session uid range), for a section of this set.
    fn check_session_scheme(
        &self,
        scheme: &str,
        layout: &str,
        section: seqsvr_core::ids::SectionId,
    ) -> Result<(), RequestError> {
        let ours = self.config.scheme_records.get(scheme).filter(|r| r.pool().is_none());
        match ours.map(|r| &r.layout) {
            Some(ours) if ours == layout => {}
            ours => {
                tracing::error!(scheme = %scheme, asked = %layout, ours = ?ours,
                    "session reservation refused: the AllocSvr's rongcloud scheme differs from \
                     this store's config");
                return Err(RequestError::Invalid(match ours {
                    Some(ours) => format!(
                        "rongcloud scheme {scheme:?} is {layout:?} at the AllocSvr but {ours:?} in \
                         this store's cluster config: give both the same config (a changed layout \
                         or session uid range would move sessions and reissue ids)"
                    ),
                    None => format!(
                        "no rongcloud scheme {scheme:?} in this store's cluster config (it has \
                         {:?}): give the StoreSvrs and AllocSvrs the same config",
                        self.session_scheme_names()
                    ),
                }));
            }
        }
        self.check_not_renamed(scheme)?;
        if !self.config.sections.contains(section) {
            return Err(RequestError::Invalid(format!(
                "section {section} is not in this set's [{}, {})",
                self.config.sections.begin(),
                self.config.sections.end()
            )));
        }
        Ok(())
    }

    /// The `rongcloud` schemes of this member's config (the records without worker ids).
    fn session_scheme_names(&self) -> Vec<&str> {
        (self.config.scheme_records.iter())
            .filter(|(_, r)| r.pool().is_none())
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// Every later holder (of a worker id, or owner of a section's sessions) starts above a
    /// time mark: a clock far ahead must not push it into the future (they would wait for it).
    fn check_reserve_ahead(&mut self, up_to_ms: u64, scheme: &str) -> Result<(), RequestError> {
        let now_ms = seqsvr_server::clock::unix_ms_now();
        let limit = now_ms.saturating_add(self.config.max_reserve_ahead_ms);
        if up_to_ms <= limit {
            return Ok(());
        }
        // An AllocSvr retries every ~200 ms per slot: one line per 10 s, with the count.
        self.clock_refusals += 1;
        let now = Instant::now();
        if self
            .clock_refusal_logged
            .is_none_or(|at| now.duration_since(at) >= CLOCK_REFUSAL_LOG_EVERY)
        {
            tracing::warn!(scheme = %scheme, up_to_ms, now_ms, refused = self.clock_refusals,
                max_ahead_ms = self.config.max_reserve_ahead_ms,
                "time reservation refused: an AllocSvr's clock runs far ahead of this leader's \
                 (or this leader's far behind); `refused` counts refusals since the last line");
            self.clock_refusal_logged = Some(now);
            self.clock_refusals = 0;
        }
        Err(RequestError::ClockAhead(format!(
            "reserving up to {} is more than {} ms ahead of the store leader's clock ({}): the \
             AllocSvr's clock runs far ahead, or this leader's far behind; fix the wrong one \
             (ids.max_clock_skew_ms)",
            seqsvr_core::idscheme::rfc3339_ms(up_to_ms),
            self.config.max_reserve_ahead_ms,
            seqsvr_core::idscheme::rfc3339_ms(now_ms)
        )))
    }

    fn check_holder(&self, alloc: AllocId, identity: Option<&str>) -> Result<(), RequestError> {
        let control = self.node.store().state().control();
        match control.check_holder(alloc, identity) {
            Ok(()) => Ok(()),
            Err(HolderRefused::Unknown(_)) => Err(RequestError::Dropped(format!(
                "alloc {alloc}'s registration is not applied on this member yet"
            ))),
            Err(e) => Err(RequestError::NotTheHolder(e)),
        }
    }

    /// May `identity` register `addr` now? Its current registrations (applied here: not
    /// replaced, not released) and its registrations proposed but not applied yet count, by
    /// address: one at `addr` is replaced by this one, so it does not count. At `max_current`
    /// other addresses the registration is refused before anything is proposed (each one is
    /// replicated into the control state and every route table). Exact on a leader that
    /// proposed every registration in flight; across a leader change the new leader does not
    /// see its predecessor's, so the most is passed by at most those.
    fn check_registrations(
        &self,
        identity: &str,
        addr: &str,
        max_current: usize,
    ) -> Result<(), RequestError> {
        let control = self.node.store().state().control();
        let applied = control
            .allocs
            .iter()
            .filter(|&(&id, r)| control.is_current(id) && r.identity.as_deref() == Some(identity))
            .map(|(_, r)| r.addr.as_str());
        let in_flight = self.proposals.replies().filter_map(|r| match r {
            ProposalReply::Register { identity: Some(i), addr, .. } if i == identity => {
                Some(addr.as_str())
            }
            _ => None,
        });
        let others: std::collections::BTreeSet<&str> =
            applied.chain(in_flight).filter(|&a| a != addr).collect();
        if others.len() < max_current {
            return Ok(());
        }
        // A few addresses name the culprits; the message stays short whatever the most is.
        const SHOWN: usize = 4;
        let mut addrs = others.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
        if others.len() > SHOWN {
            addrs.push_str(&format!(" and {} more", others.len() - SHOWN));
        }
        Err(RequestError::TooManyRegistrations {
            identity: identity.to_string(),
            current: others.len(),
            max: max_current,
            addrs,
        })
    }

    fn propose(&mut self, command: Command, reply: ProposalReply) {
        if let Err(e) = self.check_can_serve(self.proposals.len(), PENDING_PROPOSALS_MAX) {
            reply.answer(0, Err(e));
            return;
        }
        let before = self.node.raft.raft_log.last_index();
        if let Err(e) = self.node.propose(vec![], command.encode()) {
            reply.answer(0, Err(RequestError::Dropped(e.to_string())));
            return;
        }
        self.track(before, reply);
    }

    /// Records a proposal raft-rs just appended (or answers it if raft did not append it).
    fn track(&mut self, before: u64, reply: ProposalReply) {
        let index = self.node.raft.raft_log.last_index();
        if index != before + 1 {
            let why = "raft did not append it (leader transfer?)".to_string();
            reply.answer(0, Err(RequestError::Dropped(why)));
            return;
        }
        let arbiter = matches!(reply, ProposalReply::Arbiter);
        let pending =
            Pending { term: self.node.raft.term, arbiter, proposed_at: Instant::now(), reply };
        if let Some(displaced) = self.proposals.insert(index, pending) {
            // Ours from an earlier term, overwritten: it will never apply.
            self.metrics.proposals_failed.increment(1);
            displaced.reply.answer(index, Err(RequestError::Superseded));
        }
    }

    fn read(&mut self, kind: ReadKind) {
        if let Err(e) = self.check_can_serve(self.reads.len(), PENDING_READS_MAX) {
            kind.fail(e);
            return;
        }
        let kind = match kind {
            ReadKind::Heartbeat { alloc, route_version, identity, reply }
                if Tooth::NoReadindexBeforeGrant.on() =>
            {
                let _ = reply.send(self.grant(alloc, route_version, identity.as_deref()));
                return;
            }
            kind => kind,
        };
        let id = self.next_read_id;
        self.next_read_id += 1;
        self.node.read_index(id.to_be_bytes().to_vec());
        self.reads.insert(id, PendingRead { kind, read_index: None });
    }

    fn fail_all(&mut self, error: RequestError) {
        for (index, p) in self.proposals.drain_all() {
            self.metrics.proposals_failed.increment(1);
            p.reply.answer(index, Err(error.clone()));
        }
        for (_, r) in self.reads.drain() {
            r.kind.fail(error.clone());
        }
    }
}
