//! An in-memory network of drivers for unit tests, in the spirit of raft-rs's `harness/`: N
//! members over real `NodeStorage` in temp dirs, each with an [`Outbox`] that only queues, and a
//! [`Network`] that delivers the queues (or drops what crosses a cut link) by calling each
//! driver's step functions (`handle`, `on_tick`, `on_ready`) directly: no timers, no threads.

use super::{Driver, DriverConfig, Input};
use crate::outbox::{Outbox, PeerError, PeerReport};
use crate::storage::{Bootstrap, Identity, NodeStorage};
use raft::eraftpb::{Message, MessageType};
use raft::StateRole;
use seqsvr_core::arbiter::LeaseConfig;
use seqsvr_core::ids::{NodeId, SectionId, SetId};
use seqsvr_core::section::SectionRange;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Rounds of delivery `settle` allows before it calls the network livelocked.
const SETTLE_ROUNDS_MAX: usize = 10_000;

/// What one member's outbox holds between deliveries.
#[derive(Default)]
struct Queued {
    messages: Vec<Message>,
    peers: BTreeMap<u64, String>,
    vote_blocked: bool,
}

/// An [`Outbox`] that queues messages until the [`Network`] delivers them.
#[derive(Clone, Default)]
pub(super) struct MemOutbox(Arc<Mutex<Queued>>);

impl MemOutbox {
    fn queued(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.0.lock().expect("outbox lock")
    }

    fn take(&self) -> Vec<Message> {
        std::mem::take(&mut self.queued().messages)
    }
}

impl Outbox for MemOutbox {
    fn send(&self, messages: Vec<Message>) {
        let mut q = self.queued();
        // As the gRPC transport: a message for a member of unknown address goes nowhere.
        let known: Vec<Message> =
            messages.into_iter().filter(|m| q.peers.contains_key(&m.to)).collect();
        q.messages.extend(known);
    }

    fn set_peer(&mut self, id: NodeId, addr: &str) -> Result<(), PeerError> {
        self.queued().peers.insert(id.0, addr.to_string());
        Ok(())
    }

    fn remove_peer(&mut self, id: NodeId) {
        self.queued().peers.remove(&id.0);
    }

    fn set_vote_blocked(&self, blocked: bool) {
        self.queued().vote_blocked = blocked;
    }

    fn knows(&self, id: NodeId) -> bool {
        self.queued().peers.contains_key(&id.0)
    }
}

/// One member: its driver, its outbox, and its data dir (removed when dropped).
pub(super) struct Member {
    pub(super) driver: Driver,
    outbox: MemOutbox,
    addr: String,
    _dir: tempfile::TempDir,
}

/// Members `1..=n` of one new set, and the links between them.
pub(super) struct Network {
    members: BTreeMap<u64, Member>,
    /// Links that drop everything, both ways: `(a, b)` with `a < b`.
    cut: BTreeSet<(u64, u64)>,
    /// Snapshot messages delivered, by receiver.
    pub(super) snapshots_to: BTreeMap<u64, usize>,
    /// The set's initial voters (what `Bootstrap::NewSet` creates).
    pub(super) voters: Vec<(NodeId, String)>,
    /// Members a test lets stop on a fault ([`Network::allow_stop`]); any other fault fails the
    /// test.
    may_stop: BTreeSet<u64>,
    /// Members stopped by a fault, with its message: a process that exited. A stopped member
    /// handles, ticks and sends nothing more; messages to it are lost.
    stopped: BTreeMap<u64, String>,
}

/// The configuration of member `id` of an `n`-member test set.
///
/// `tick` is never slept on here (tests tick by hand); it only sets the window in which a peer
/// counts as heard from (`tick × election_ticks`), which an hour makes "heard at least once".
/// Raft's own clock (elections, check_quorum) runs on the ticks the tests give. The lease is
/// the longest a set accepts, so no arbiter moves anything during a test (it reads a real clock).
pub(super) fn test_config(id: u64, n: u64) -> DriverConfig {
    DriverConfig {
        set_id: SetId(1),
        node_id: NodeId(id),
        addr: addr(id),
        members: (1..=n).map(|m| (NodeId(m), addr(m))).collect(),
        tick: Duration::from_secs(3600),
        election_ticks: 10,
        heartbeat_ticks: 2,
        compact_log_entries: 1000,
        sections: SectionRange::new(SectionId(0), SectionId(100)).expect("a valid range"),
        lease: LeaseConfig { lease_ms: seqsvr_core::arbiter::MAX_LEASE_MS, margin_ms: 1000 },
        // None by default: recording them adds a proposal to the arbiter's next round, which
        // tests counting log indexes would have to count.
        scheme_records: Default::default(),
        max_reserve_ahead_ms: 65_000,
        layout: None,
        commands_version: seqsvr_core::store::COMMANDS_VERSION,
    }
}

fn addr(id: u64) -> String {
    format!("mem-{id}:7000")
}

impl Network {
    /// A new set of `n` members, all voters, configured by [`test_config`].
    pub(super) fn new(n: u64) -> Network {
        Network::with_config(n, |_| {})
    }

    /// As [`Network::new`], with each member's configuration changed by `change`.
    pub(super) fn with_config(n: u64, change: impl Fn(&mut DriverConfig)) -> Network {
        let voters: Vec<(NodeId, String)> = (1..=n).map(|id| (NodeId(id), addr(id))).collect();
        let members = (1..=n)
            .map(|id| {
                let dir = tempfile::tempdir().expect("temp dir");
                let mut config = test_config(id, n);
                change(&mut config);
                let identity = Identity { set_id: config.set_id, node_id: config.node_id };
                let storage =
                    NodeStorage::open(dir.path(), identity, &Bootstrap::NewSet(voters.clone()))
                        .expect("open storage");
                let outbox = MemOutbox::default();
                let driver = Driver::new(storage, config, outbox.clone()).expect("driver");
                (id, Member { driver, outbox, addr: addr(id), _dir: dir })
            })
            .collect();
        Network {
            members,
            cut: BTreeSet::new(),
            snapshots_to: BTreeMap::new(),
            voters,
            may_stop: BTreeSet::new(),
            stopped: BTreeMap::new(),
        }
    }

    /// Member `id` loses its data dir and restarts empty, as `--initial-cluster-state existing`
    /// starts it (no configuration, vote-blocked), with its links as they were.
    pub(super) fn wipe(&mut self, id: u64) {
        self.wipe_and_open(id, &Bootstrap::Join);
    }

    /// As [`Network::wipe`], with its configuration changed by `change`.
    pub(super) fn wipe_with(&mut self, id: u64, change: impl Fn(&mut DriverConfig)) {
        self.wipe_open_with(id, &Bootstrap::Join, change);
    }

    /// Member `id` loses its data dir and restarts from `bootstrap` (`NewSet`: wrongly started
    /// with `--initial-cluster-state new` while no peer answered).
    pub(super) fn wipe_and_open(&mut self, id: u64, bootstrap: &Bootstrap) {
        self.wipe_open_with(id, bootstrap, |_| {});
    }

    fn wipe_open_with(
        &mut self,
        id: u64,
        bootstrap: &Bootstrap,
        change: impl Fn(&mut DriverConfig),
    ) {
        let n = self.members.len() as u64;
        let member = self.members.get_mut(&id).expect("a member");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = test_config(id, n);
        change(&mut config);
        let identity = Identity { set_id: config.set_id, node_id: config.node_id };
        let storage = NodeStorage::open(dir.path(), identity, bootstrap).expect("open storage");
        let outbox = MemOutbox::default();
        member.driver = Driver::new(storage, config, outbox.clone()).expect("driver");
        member.outbox = outbox;
        member._dir = dir;
    }

    /// Member `id` restarts on its data dir (a new build, say) with its configuration changed by
    /// `change`; what it had queued to send is lost, as in a real restart.
    pub(super) fn restart_with(&mut self, id: u64, change: impl Fn(&mut DriverConfig)) {
        self.try_restart_with(id, change).expect("driver");
    }

    /// As [`Network::restart_with`], answering the driver's refusal to start; a refused member
    /// is left as a stand-in on an empty dir.
    pub(super) fn try_restart_with(
        &mut self,
        id: u64,
        change: impl Fn(&mut DriverConfig),
    ) -> anyhow::Result<()> {
        let n = self.members.len() as u64;
        let member = self.members.get_mut(&id).expect("a member");
        let mut config = test_config(id, n);
        change(&mut config);
        let identity = Identity { set_id: config.set_id, node_id: config.node_id };
        // The old driver (and its RocksDB lock on the dir) goes first: a stand-in on an empty
        // dir takes its place until the dir is reopened.
        let stand_in_dir = tempfile::tempdir().expect("temp dir");
        let stand_in = NodeStorage::open(stand_in_dir.path(), identity.clone(), &Bootstrap::Join)
            .expect("open a stand-in");
        let stand_in =
            Driver::new(stand_in, test_config(id, n), MemOutbox::default()).expect("driver");
        drop(std::mem::replace(&mut member.driver, stand_in));
        // A dir that holds a member ignores the bootstrap (as the StoreSvr does).
        let storage = NodeStorage::open(member._dir.path(), identity, &Bootstrap::Join)
            .expect("reopen storage");
        let outbox = MemOutbox::default();
        member.driver = Driver::new(storage, config, outbox.clone())?;
        member.outbox = outbox;
        Ok(())
    }

    pub(super) fn driver(&mut self, id: u64) -> &mut Driver {
        &mut self.members.get_mut(&id).expect("a member").driver
    }

    pub(super) fn ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }

    /// Cuts every link of `id`.
    pub(super) fn isolate(&mut self, id: u64) {
        for other in self.ids() {
            if other != id {
                self.cut.insert((id.min(other), id.max(other)));
            }
        }
    }

    /// Restores every link.
    pub(super) fn heal(&mut self) {
        self.cut.clear();
    }

    fn connected(&self, a: u64, b: u64) -> bool {
        !self.cut.contains(&(a.min(b), a.max(b)))
    }

    /// Lets member `id` stop on a fault (which the test then reads with [`Network::stopped`]).
    pub(super) fn allow_stop(&mut self, id: u64) {
        self.may_stop.insert(id);
    }

    /// The fault member `id` stopped on, if it did.
    pub(super) fn stopped(&self, id: u64) -> Option<&str> {
        self.stopped.get(&id).map(String::as_str)
    }

    fn running(&self, id: u64) -> bool {
        !self.stopped.contains_key(&id)
    }

    /// The Ready step of one member (the loop runs it after every batch of inputs and ticks).
    /// A fault ends the member, as it ends the driver's loop and the process.
    pub(super) fn ready(&mut self, id: u64) {
        if !self.running(id) {
            return;
        }
        if let Err(fault) = self.driver(id).on_ready() {
            assert!(self.may_stop.contains(&id), "member {id} stopped on a fault: {fault}");
            self.stopped.insert(id, fault.to_string());
        }
    }

    /// Hands `input` to member `id` and runs its Ready (what it sends stays queued). A stopped
    /// member drops it.
    pub(super) fn send(&mut self, id: u64, input: Input) {
        if self.running(id) {
            self.driver(id).handle(input);
            self.ready(id);
        }
    }

    /// One hop: every message queued now goes to its receiver (or is dropped on a cut link, which
    /// the sender hears as the gRPC transport would tell it), then every member runs its Ready.
    /// Answers how many messages were delivered or dropped.
    pub(super) fn deliver_once(&mut self) -> usize {
        let mut batches: BTreeMap<(u64, u64), Vec<Message>> = BTreeMap::new();
        let mut n = 0;
        for (&from, member) in &self.members {
            for m in member.outbox.take() {
                n += 1;
                batches.entry((from, m.to)).or_default().push(m);
            }
        }
        for ((from, to), messages) in batches {
            let snapshot = messages.iter().any(|m| m.get_msg_type() == MessageType::MsgSnapshot);
            let mut reports = Vec::new();
            if self.connected(from, to) && self.members.contains_key(&to) && self.running(to) {
                let sender = &self.members[&from];
                let input = Input::Raft {
                    from_addr: sender.addr.clone(),
                    vote_blocked: sender.outbox.queued().vote_blocked,
                    commands_version: sender.driver.config.commands_version,
                    layout: sender.driver.config.layout,
                    messages,
                };
                self.driver(to).handle(input);
                if snapshot {
                    *self.snapshots_to.entry(to).or_default() += 1;
                    reports.push(PeerReport::Snapshot { to: NodeId(to), delivered: true });
                }
            } else {
                reports.push(PeerReport::Unreachable(NodeId(to)));
                if snapshot {
                    reports.push(PeerReport::Snapshot { to: NodeId(to), delivered: false });
                }
            }
            if !self.running(from) {
                continue;
            }
            for report in reports {
                self.driver(from).handle(Input::Peer(report));
            }
        }
        for id in self.ids() {
            self.ready(id);
        }
        n
    }

    /// Delivers until nothing is queued.
    pub(super) fn settle(&mut self) {
        for _ in 0..SETTLE_ROUNDS_MAX {
            if self.deliver_once() == 0 {
                return;
            }
        }
        panic!("the network did not settle in {SETTLE_ROUNDS_MAX} rounds");
    }

    /// One tick of each of `ids` (with its Ready), then delivery until quiet.
    pub(super) fn tick(&mut self, ids: &[u64]) {
        for &id in ids {
            if self.running(id) {
                self.driver(id).on_tick();
                self.ready(id);
            }
        }
        self.settle();
    }

    /// Member `id`'s arbiter clock moves `by` ahead, as if that much time passed: the driver
    /// reads a real monotonic clock from an origin, which this moves back (so the arbiter's
    /// lease waits can be passed without sleeping).
    pub(super) fn advance_clock(&mut self, id: u64, by: Duration) {
        let driver = self.driver(id);
        driver.clock = driver.clock.checked_sub(by).expect("the machine has been up that long");
    }

    pub(super) fn raft(&self, id: u64) -> &raft::Raft<NodeStorage> {
        &self.members[&id].driver.node.raft
    }

    pub(super) fn store(&self, id: u64) -> &NodeStorage {
        self.members[&id].driver.node.store()
    }

    pub(super) fn role(&self, id: u64) -> StateRole {
        self.raft(id).state
    }

    /// The leader's match index for `peer` (0 if `leader` does not track it).
    pub(super) fn matched(&self, leader: u64, peer: u64) -> u64 {
        self.raft(leader).prs().get(peer).map_or(0, |p| p.matched)
    }

    /// The member among `ids` that leads, in the highest term if several believe they do (a
    /// deposed leader cut off from the others).
    pub(super) fn leader_among(&self, ids: &[u64]) -> Option<u64> {
        ids.iter()
            .copied()
            .filter(|&id| self.role(id) == StateRole::Leader)
            .max_by_key(|&id| self.raft(id).term)
    }

    /// Ticks `ids` until one of them leads and `until` holds (at most `ticks` ticks).
    pub(super) fn tick_until(
        &mut self,
        ids: &[u64],
        ticks: usize,
        until: impl Fn(&Network) -> bool,
    ) -> bool {
        for _ in 0..ticks {
            if until(self) {
                return true;
            }
            self.tick(ids);
        }
        until(self)
    }

    /// Makes `id` the leader by ticking only it (the others never time out, so it wins the first
    /// election), then lets it commit the set's lease, as a real first leader does.
    pub(super) fn elect(&mut self, id: u64) {
        let elected = self.tick_until(&[id], 100, |net| net.role(id) == StateRole::Leader);
        assert!(elected, "member {id} did not win an election in 100 ticks");
        self.tick(&[id]); // the arbiter's first round: the set's lease
        for other in self.ids() {
            let lease = self.store(other).state().control().lease;
            assert!(lease.is_some(), "member {other} applied the set's lease");
        }
    }
}
