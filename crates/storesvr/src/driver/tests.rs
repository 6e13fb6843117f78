//! The driver's behaviour over the in-memory network of `harness.rs`: when proposals and reads
//! are answered, what a deposed leader tells the callers it left waiting, leadership hand-off,
//! and catch-up by snapshot. Each test names the guard it would catch missing.

use super::harness::Network;
use super::{Advanced, Grant, Input, ReadDone, RequestError};
use raft::StateRole;
use seqsvr_core::ids::{AllocId, LeaseEpoch, NodeId, SectionId, Seq};
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::{SectionAdvance, SetLayout};
use std::fmt::Debug;
use std::time::Duration;
use tokio::sync::oneshot::{self, error::TryRecvError};

type Answer<T> = oneshot::Receiver<Result<T, RequestError>>;

/// An operator raise of one section (unfenced, as `seqctl store advance`).
fn advance(section: u64, max_seq: u64) -> (Input, Answer<Advanced>) {
    let (reply, rx) = oneshot::channel();
    let sections = vec![SectionAdvance {
        section: SectionId(section),
        max_seq: Seq(max_seq),
        lease_epoch: LeaseEpoch(0),
    }];
    (Input::Advance { alloc: None, sections, identity: None, reply }, rx)
}

fn register(addr: &str) -> (Input, Answer<AllocId>) {
    registered_by(addr, None)
}

fn registered_by(addr: &str, identity: Option<&str>) -> (Input, Answer<AllocId>) {
    let (reply, rx) = oneshot::channel();
    let identity = identity.map(str::to_string);
    (Input::Register { addr: addr.to_string(), identity, max_current: usize::MAX, reply }, rx)
}

/// A registration by `identity` that may hold at most `max_current` at once.
fn registered_within(addr: &str, identity: &str, max_current: usize) -> (Input, Answer<AllocId>) {
    let (reply, rx) = oneshot::channel();
    let identity = Some(identity.to_string());
    (Input::Register { addr: addr.to_string(), identity, max_current, reply }, rx)
}

fn release(alloc: AllocId, identity: Option<&str>) -> (Input, Answer<()>) {
    let (reply, rx) = oneshot::channel();
    (Input::Release { alloc, identity: identity.map(str::to_string), reply }, rx)
}

fn read(section: u64) -> (Input, Answer<ReadDone>) {
    let (reply, rx) = oneshot::channel();
    (Input::Read { sections: vec![SectionId(section)], reply }, rx)
}

fn waiting<T>(rx: &mut oneshot::Receiver<T>) -> bool {
    matches!(rx.try_recv(), Err(TryRecvError::Empty))
}

fn answer<T: Debug>(rx: &mut oneshot::Receiver<T>) -> T {
    rx.try_recv().expect("answered")
}

/// Every member has applied the same index and holds the same state.
fn assert_agree(net: &Network) {
    let ids = net.ids();
    let first = net.store(ids[0]);
    for &id in &ids[1..] {
        let other = net.store(id);
        assert_eq!(other.applied_index(), first.applied_index(), "member {id}'s applied index");
        assert_eq!(other.state(), first.state(), "member {id}'s state");
    }
}

/// Fails if the driver answered a proposal before it applied (at propose, or once persisted on
/// the leader or acknowledged by fewer than a quorum), or a read before its ReadIndex was
/// confirmed by a quorum.
#[test]
fn a_proposal_is_answered_once_a_quorum_committed_it_and_every_member_applies_it() {
    let mut net = Network::new(3);
    net.elect(1);

    let (input, mut rx) = advance(7, 10_000);
    net.driver(1).handle(input);
    assert!(waiting(&mut rx), "answered at propose");
    net.ready(1); // appended and synced on the leader; appends queued for the followers
    let index = net.raft(1).raft_log.last_index();
    assert!(net.raft(1).raft_log.committed < index);
    assert!(waiting(&mut rx), "answered once persisted on the leader alone");

    net.deliver_once(); // the followers persist it; their acknowledgements are queued
    for id in [2, 3] {
        assert_eq!(net.raft(id).raft_log.last_index(), index, "member {id} holds it");
        assert!(net.store(id).applied_index() < index, "member {id} applied it uncommitted");
    }
    assert!(net.raft(1).raft_log.committed < index);
    assert!(waiting(&mut rx), "answered before a quorum acknowledged it");

    net.deliver_once(); // the acknowledgements reach the leader: committed, applied, answered
    let done = answer(&mut rx).expect("applied");
    assert_eq!(done, Advanced { sections: vec![(SectionId(7), 10_000)], applied_index: index });
    assert!(net.store(1).applied_index() >= index);

    net.settle();
    for id in net.ids() {
        assert!(net.store(id).applied_index() >= index, "member {id} applied it");
        assert_eq!(net.store(id).state().max_seq(SectionId(7)), 10_000, "member {id}");
    }
    assert_agree(&net);

    // A read waits for a quorum to confirm the leadership (ReadIndex), then sees the advance.
    let (input, mut rx) = read(7);
    net.send(1, input);
    assert!(waiting(&mut rx), "read answered before a quorum confirmed the leadership");
    net.settle();
    let done = answer(&mut rx).expect("read");
    assert_eq!(done.sections, vec![(SectionId(7), 10_000)]);
    assert!(done.read_index >= index);
}

/// A release lets the arbiter move an AllocSvr's sections without waiting out its lease, so only
/// the identity that registered may send it: another AllocSvr's certificate is refused before
/// anything is proposed, and the registration stays as it was. Fails without the holder check
/// of `Input::Release` (the release would apply: I3 broken by a peer's certificate).
#[test]
fn only_the_registering_identity_may_release_a_registration() {
    let mut net = Network::new(3);
    net.elect(1);
    let (input, mut rx) = registered_by("alloc-a:1", Some("alloc-a"));
    net.send(1, input);
    net.settle();
    let a = answer(&mut rx).expect("registered");
    let before = net.raft(1).raft_log.last_index();

    let (input, mut rx) = release(a, Some("alloc-b"));
    net.send(1, input);
    net.settle();
    assert!(matches!(answer(&mut rx), Err(RequestError::NotTheHolder(_))));
    assert_eq!(net.raft(1).raft_log.last_index(), before, "a refused release was proposed");
    assert!(!net.store(1).state().control().allocs[&a].released);

    let (input, mut rx) = release(a, Some("alloc-a"));
    net.send(1, input);
    net.settle();
    answer(&mut rx).expect("the holder's own release");
    for id in net.ids() {
        assert!(net.store(id).state().control().allocs[&a].released, "member {id}");
    }
}

/// One certificate may not add registrations without end (each is replicated into the control
/// state and every route table): past `max_current` current ones at other addresses, the leader
/// refuses before proposing — counting those in flight too, so a burst sent before any applied
/// is bounded as well. One at an address it already holds replaces it and passes; a released
/// one no longer counts; another identity has its own count. Fails without
/// `Driver::check_registrations` (every registration would be proposed and applied).
#[test]
fn registrations_per_identity_are_bounded_before_anything_is_proposed() {
    let mut net = Network::new(3);
    net.elect(1);
    // Two at once, neither applied yet when the third arrives: the third is refused.
    let (input, mut a) = registered_within("alloc-a:1", "alloc-a", 2);
    net.send(1, input);
    let (input, mut b) = registered_within("alloc-a:2", "alloc-a", 2);
    net.send(1, input);
    let before = net.raft(1).raft_log.last_index();
    let (input, mut c) = registered_within("alloc-a:3", "alloc-a", 2);
    net.send(1, input);
    match answer(&mut c) {
        Err(e @ RequestError::TooManyRegistrations { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("\"alloc-a\" already holds 2")
                    && text.contains("alloc-a:1, alloc-a:2"),
                "{text}"
            );
        }
        other => panic!("a third registration in flight: {other:?}"),
    }
    assert_eq!(net.raft(1).raft_log.last_index(), before, "a refused registration was proposed");
    net.settle();
    let (a, _b) = (answer(&mut a).expect("first"), answer(&mut b).expect("second"));

    // Applied now: still two. A third address is refused; the same address replaces and passes.
    let (input, mut c) = registered_within("alloc-a:3", "alloc-a", 2);
    net.send(1, input);
    assert!(matches!(answer(&mut c), Err(RequestError::TooManyRegistrations { current: 2, .. })));
    let (input, mut again) = registered_within("alloc-a:1", "alloc-a", 2);
    net.send(1, input);
    net.settle();
    let again = answer(&mut again).expect("a registration at an address it holds replaces it");
    let control = net.store(1).state().control();
    assert!(control.allocs[&a].replaced && control.is_current(again));

    // Another identity counts for itself.
    let (input, mut other) = registered_within("alloc-b:1", "alloc-b", 2);
    net.send(1, input);
    net.settle();
    answer(&mut other).expect("another identity's first");

    // A released one no longer counts.
    let (input, mut rx) = release(again, Some("alloc-a"));
    net.send(1, input);
    net.settle();
    answer(&mut rx).expect("released");
    let (input, mut c) = registered_within("alloc-a:3", "alloc-a", 2);
    net.send(1, input);
    net.settle();
    answer(&mut c).expect("room again after a release");
}

/// Proposals left on a leader that was cut off before anyone saw them: the new leader's entries
/// take their indexes. Once healed, the old leader steps down, agrees with the new one, and
/// answers them with errors, never Ok with what applied at their index. Fails without the term
/// check of `Proposals::take_applied` (B would be told Ok with the alloc id registered for C),
/// or without `drain_applied` after apply (A, whose index holds the new leader's empty entry,
/// would wait forever).
#[test]
fn proposals_a_new_leader_overwrote_are_answered_with_errors_after_the_heal() {
    let mut net = Network::new(3);
    net.elect(1);
    let committed = net.raft(1).raft_log.committed;
    assert_eq!(net.raft(1).raft_log.last_index(), committed);

    net.isolate(1);
    let (input, mut a) = register("alloc-a:1");
    net.send(1, input);
    let (input, mut b) = register("alloc-b:1");
    net.send(1, input);
    let index_b = net.raft(1).raft_log.last_index();
    assert_eq!(index_b, committed + 2);

    // 2 and 3 elect a new leader; 1, hearing from nobody, steps down (check_quorum).
    let elected = net.tick_until(&[1, 2, 3], 200, |net| {
        net.leader_among(&[2, 3]).is_some() && net.role(1) != StateRole::Leader
    });
    assert!(elected, "no new leader, or the old one did not step down");
    let new = net.leader_among(&[2, 3]).expect("a new leader");
    assert!(waiting(&mut a) && waiting(&mut b), "stepping down answered pending proposals");

    // Its empty entry lands at A's index, its own registration at B's.
    let (input, mut c) = register("alloc-c:1");
    net.send(new, input);
    assert_eq!(net.raft(new).raft_log.last_index(), index_b);
    net.settle();
    let id_c = answer(&mut c).expect("registered by the new leader");

    net.heal();
    let caught_up = net.tick_until(&[new], 50, |net| net.store(1).applied_index() >= index_b);
    assert!(caught_up, "the old leader did not catch up");
    assert_eq!(answer(&mut b), Err(RequestError::Superseded));
    assert!(answer(&mut a).is_err(), "A was answered Ok");
    assert_eq!(net.role(1), StateRole::Follower);
    assert_eq!(net.raft(1).leader_id, new);

    net.settle();
    assert_agree(&net);
    let allocs = &net.store(1).state().control().allocs;
    let addrs: Vec<(AllocId, &str)> = allocs.iter().map(|(id, r)| (*id, r.addr.as_str())).collect();
    assert_eq!(addrs, vec![(id_c, "alloc-c:1")], "only the new leader's registration applied");
}

/// The other side: a proposal that reached a quorum before its leader was cut off commits under
/// the next leader, so the deposed leader must keep it pending (an error would tell the caller
/// "not applied" about something that applies) and answer Ok once it applies. Fails if losing
/// leadership answered pending proposals.
#[test]
fn a_deposed_leader_answers_ok_for_a_proposal_its_successor_committed() {
    let mut net = Network::new(3);
    net.elect(1);

    let (input, mut rx) = register("alloc-a:1");
    net.send(1, input);
    let index = net.raft(1).raft_log.last_index();
    net.deliver_once(); // 2 and 3 persist it; their acknowledgements are queued...
    net.isolate(1);
    net.deliver_once(); // ...and lost
    assert!(net.raft(1).raft_log.committed < index);
    assert!(waiting(&mut rx));

    let elected = net.tick_until(&[1, 2, 3], 200, |net| {
        net.leader_among(&[2, 3]).is_some() && net.role(1) != StateRole::Leader
    });
    assert!(elected, "no new leader, or the old one did not step down");
    let new = net.leader_among(&[2, 3]).expect("a new leader");
    assert!(net.store(new).applied_index() >= index, "the new leader committed it");
    assert!(waiting(&mut rx), "stepping down answered a proposal that then committed");

    net.heal();
    let caught_up = net.tick_until(&[new], 50, |net| net.store(1).applied_index() >= index);
    assert!(caught_up, "the old leader did not catch up");
    let id = answer(&mut rx).expect("applied under the new leader");
    net.settle();
    assert_agree(&net);
    let allocs = &net.store(1).state().control().allocs;
    assert_eq!(allocs.get(&id).map(|r| r.addr.as_str()), Some("alloc-a:1"));
}

/// A read waiting for its ReadIndex on a leader that loses leadership fails with NotLeader
/// instead of waiting forever. Fails without the drain of pending reads on step-down.
#[test]
fn a_read_pending_on_a_leader_that_steps_down_fails() {
    let mut net = Network::new(3);
    net.elect(1);
    net.isolate(1);
    let (input, mut rx) = read(7);
    net.send(1, input);
    let stepped_down = net.tick_until(&[1], 50, |net| net.role(1) != StateRole::Leader);
    assert!(stepped_down, "an isolated leader did not step down");
    assert!(matches!(answer(&mut rx), Err(RequestError::NotLeader { .. })));
}

/// `StepDown` (before a graceful exit) hands leadership to the voter with the most of the log:
/// with member 3 behind, member 2. Fails if the target is chosen without the match index (the
/// last voter, 3, could not take over until it caught up). `TransferLeader` then moves it on,
/// and is refused on a follower and for a non-voter.
#[test]
fn step_down_and_transfer_hand_leadership_to_a_caught_up_voter() {
    let mut net = Network::new(3);
    net.elect(1);
    net.isolate(3);
    for i in 1..=3 {
        let (input, mut rx) = advance(i, i * 1000);
        net.send(1, input);
        net.settle();
        answer(&mut rx).expect("committed by 1 and 2");
    }
    net.heal();
    assert!(net.matched(1, 3) < net.matched(1, 2), "member 3 is behind");

    let (reply, mut rx) = oneshot::channel();
    net.send(1, Input::StepDown { reply });
    assert_eq!(answer(&mut rx), Ok(Some(NodeId(2))));
    net.settle();
    assert_eq!(net.leader_among(&net.ids()), Some(2));
    assert_eq!(net.role(1), StateRole::Follower);
    assert_eq!(net.raft(1).leader_id, 2);

    // Member 3 catches up from the new leader.
    let caught_up =
        net.tick_until(&[2], 10, |net| net.matched(2, 3) == net.raft(2).raft_log.last_index());
    assert!(caught_up, "member 3 did not catch up");

    let (reply, mut rx) = oneshot::channel();
    net.send(1, Input::TransferLeader { target: NodeId(3), reply });
    match answer(&mut rx) {
        Err(RequestError::NotLeader { leader: Some((leader, _)) }) => assert_eq!(leader, NodeId(2)),
        other => panic!("a follower transferred leadership: {other:?}"),
    }
    let (reply, mut rx) = oneshot::channel();
    net.send(2, Input::TransferLeader { target: NodeId(9), reply });
    assert!(matches!(answer(&mut rx), Err(RequestError::Invalid(_))));

    let (reply, mut rx) = oneshot::channel();
    net.send(2, Input::TransferLeader { target: NodeId(3), reply });
    assert_eq!(answer(&mut rx), Ok(()));
    net.settle();
    assert_eq!(net.leader_among(&net.ids()), Some(3));

    // The new leader serves.
    let (input, mut rx) = advance(50, 777);
    net.send(3, input);
    net.settle();
    answer(&mut rx).expect("served by the new leader");
    assert_agree(&net);
}

/// A member cut off while the leader compacted its log past the member's last entry catches up
/// by a snapshot (which must carry the whole state), then follows the log again. Fails if the
/// leader never compacts (`after_apply`: no snapshot would be needed or sent) or if installing
/// the snapshot loses or corrupts state.
#[test]
fn a_member_behind_the_compacted_log_catches_up_by_snapshot_then_follows_the_log() {
    let mut net = Network::with_config(3, |c| c.compact_log_entries = 8);
    net.elect(1);
    net.isolate(3);
    let last_3 = net.raft(3).raft_log.last_index();
    for i in 1..=20 {
        let (input, mut rx) = advance(i % 5, i * 100);
        net.send(1, input);
        net.settle();
        answer(&mut rx).expect("committed by 1 and 2");
    }
    let first_1 = net.store(1).truncated_index() + 1;
    assert!(first_1 > last_3 + 1, "the leader's log still holds what member 3 lacks");
    assert_eq!(net.snapshots_to.get(&3), None);

    net.heal();
    let caught_up = net
        .tick_until(&[1], 20, |net| net.store(3).applied_index() == net.store(1).applied_index());
    assert!(caught_up, "member 3 did not catch up");
    let snapshots = net.snapshots_to.get(&3).copied().unwrap_or(0);
    assert!(snapshots >= 1, "member 3 caught up without a snapshot");
    assert!(net.store(3).truncated_index() >= first_1 - 1, "its log starts at the snapshot");
    assert_agree(&net);
    assert_eq!(net.store(3).state().max_seq(SectionId(0)), 2000);

    // New entries reach it through the log, not another snapshot.
    let (input, mut rx) = advance(42, 5000);
    net.send(1, input);
    net.settle();
    let done = answer(&mut rx).expect("applied");
    assert!(net.store(3).applied_index() >= done.applied_index);
    assert_eq!(net.store(3).state().max_seq(SectionId(42)), 5000);
    assert_eq!(net.snapshots_to.get(&3).copied().unwrap_or(0), snapshots);
    assert_agree(&net);
}

/// Three members, 1 leading, `section` raised to `max_seq`, and member 3 has acknowledged and
/// learned the commit of everything: the leader's progress says it holds the whole log.
fn all_acknowledged(section: u64, max_seq: u64) -> Network {
    let mut net = Network::new(3);
    net.elect(1);
    let (input, mut rx) = advance(section, max_seq);
    net.send(1, input);
    net.settle();
    answer(&mut rx).expect("committed");
    let all_acked = net.tick_until(&[1], 10, |net| {
        let last = net.raft(1).raft_log.last_index();
        net.matched(1, 3) == last && net.raft(3).raft_log.committed == last
    });
    assert!(all_acked, "member 3 did not acknowledge everything");
    net
}

/// A member whose data dir is lost comes back empty while the leader believes it holds every
/// entry (it acknowledged them all, and nothing was proposed since). It must be caught up by
/// snapshot without waiting for another write. Fails without `inbound.rs::reprobe_if_emptied`:
/// raft-rs sends appends only to peers whose match is behind the log.
#[test]
fn an_emptied_member_is_caught_up_without_a_new_proposal() {
    let mut net = all_acknowledged(3, 700);

    net.wipe(3);
    assert_eq!(net.store(3).applied_index(), 0);
    let caught_up = net
        .tick_until(&[1], 20, |net| net.store(3).applied_index() == net.store(1).applied_index());
    assert!(caught_up, "the emptied member was never sent what it lost");
    assert!(net.store(3).vote_blocked(), "it came back empty: it must not vote");
    assert_eq!(net.store(3).state().max_seq(SectionId(3)), 700);
    assert!(net.snapshots_to.get(&3).copied().unwrap_or(0) >= 1, "it caught up by snapshot");
}

/// The same with the member wrongly re-created from the bootstrap (`new` while no peer
/// answered): it answers heartbeats with the bootstrap's commit index, not 0. The leader must
/// still re-probe it. Fails when the re-probe only looks for commit index 0.
#[test]
fn a_member_re_created_from_the_bootstrap_is_caught_up_without_a_new_proposal() {
    let mut net = all_acknowledged(4, 900);

    let voters = net.voters.clone();
    net.wipe_and_open(3, &crate::storage::Bootstrap::NewSet(voters));
    let caught_up = net
        .tick_until(&[1], 20, |net| net.store(3).applied_index() == net.store(1).applied_index());
    assert!(caught_up, "the re-created member was never sent what it lost");
    assert_eq!(net.store(3).state().max_seq(SectionId(4)), 900);
}

/// The leader records the set (the created marker) only once every voter acknowledged an
/// entry past the bootstrap: a member that has not started yet must not find the marker and
/// join empty. Fails if a follower, or a leader missing a voter, reports the set established.
#[test]
fn the_set_is_established_only_when_every_voter_is_past_the_bootstrap() {
    let mut net = Network::new(3);
    net.isolate(3);
    let elected = net.tick_until(&[1], 100, |net| net.role(1) == StateRole::Leader);
    assert!(elected, "member 1 did not win with member 2");
    net.tick(&[1]); // the arbiter's first round: the set's lease
    let (input, mut rx) = advance(1, 100);
    net.send(1, input);
    net.settle();
    answer(&mut rx).expect("committed by 1 and 2");
    assert!(!net.driver(1).every_voter_past_bootstrap(), "member 3 has acknowledged nothing");
    net.heal();
    let all =
        net.tick_until(&[1], 20, |net| net.matched(1, 3) > crate::storage::BOOTSTRAP_LOG_INDEX);
    assert!(all, "member 3 did not catch up");
    assert!(net.driver(1).every_voter_past_bootstrap());
    assert!(!net.driver(2).every_voter_past_bootstrap(), "only the leader can know");
}

/// The leader records every id scheme of its config, with this set's worker ids, as soon as the
/// set runs and before anyone leases one: a set that never leased a worker id still refuses a
/// later change of the worker split (which could hand it ids another set still issues). Fails
/// without the `RecordSchemePools` proposal of `leases.rs::arbitrate`.
#[test]
fn the_leader_records_every_scheme_of_its_config_before_any_lease() {
    let snowflake =
        seqsvr_core::store::SchemeRecord { layout: "L1".into(), pool_begin: 0, pool_end: 3 };
    let mut net = Network::with_config(3, |c| {
        c.scheme_records.insert("snowflake".into(), snowflake.clone());
    });
    net.elect(1);
    net.tick(&[1]); // the arbiter's next round
    let ours = net.driver(1).config.scheme_records.clone();
    assert_eq!(ours["snowflake"].pool_end, 3, "the harness config has a pool");
    for id in net.ids() {
        let control = net.store(id).state().control();
        assert_eq!(control.schemes, ours, "member {id} recorded the config's schemes");
        assert!(control.workers.is_empty(), "member {id}: recorded before any lease");
    }
    let before = net.raft(1).raft_log.last_index();
    net.tick(&[1]);
    assert_eq!(net.raft(1).raft_log.last_index(), before, "recorded once, not every round");
}

/// A time reservation more than `max_reserve_ahead_ms` ahead of the leader's clock is refused
/// before anything is proposed, as retryable `ClockAhead` (a clock far ahead must not push a
/// worker's mark, which every later holder starts above, into the future); one within it is
/// proposed (and here refused at apply: the alloc holds no worker id). Fails without
/// `check_reserve_ahead`.
#[test]
fn a_reservation_too_far_ahead_of_the_leaders_clock_is_refused_unproposed() {
    let mut net = Network::new(3);
    net.elect(1);
    let (input, mut rx) = register("alloc-a:1");
    net.send(1, input);
    net.settle();
    let alloc = answer(&mut rx).expect("registered");
    net.tick(&[1]);
    net.settle();
    let reserve = |up_to_ms: u64| {
        let (reply, rx) = oneshot::channel();
        let reservation = super::TimeReservation {
            alloc,
            scheme: "snowflake".into(),
            worker: 0,
            up_to_ms,
            layout: "L1".into(),
        };
        (Input::ReserveTime { reservation, identity: None, reply }, rx)
    };
    let ahead = net.driver(1).config.max_reserve_ahead_ms;
    let before = net.raft(1).raft_log.last_index();
    let now_ms = seqsvr_server::clock::unix_ms_now();
    let (input, mut rx) = reserve(now_ms + ahead + 60_000);
    net.send(1, input);
    net.settle();
    match answer(&mut rx) {
        Err(RequestError::ClockAhead(why)) => assert!(why.contains("ahead"), "{why}"),
        other => panic!("expected ClockAhead, got {other:?}"),
    }
    assert_eq!(net.raft(1).raft_log.last_index(), before, "a refused reservation was proposed");

    let (input, mut rx) = reserve(now_ms + 1_000);
    net.send(1, input);
    net.settle();
    assert!(
        matches!(answer(&mut rx), Err(RequestError::Rejected(_))),
        "within the bound: proposed, and refused at apply only because no worker id is held"
    );
    assert!(net.raft(1).raft_log.last_index() > before, "proposed");
}

/// The command of the entry at `index` in member `id`'s log (None: a no-op or a conf change).
fn command_at(net: &Network, id: u64, index: u64) -> Option<seqsvr_core::store::Command> {
    let entries = net
        .raft(id)
        .raft_log
        .entries(index, 1, raft::GetEntriesContext::empty(false))
        .expect("the entry is in the log");
    let entry = entries.first().expect("one entry");
    (entry.get_entry_type() == raft::eraftpb::EntryType::EntryNormal && !entry.data.is_empty())
        .then(|| seqsvr_core::store::Command::decode(&entry.data).expect("a command"))
}

/// A rolling upgrade (README "Upgrading"). Member 3 plays a build before the commands version
/// gate (commands version 0): it stops with a storage fault on any command of version 1, as
/// that build stops on a command it cannot decode (the harness fails the test on a fault:
/// "this build applies only up to 0"). While it is in the set the leader proposes only
/// version-0 commands: a worker lease is `AcquireWorker` (not `AcquireWorkerAt`), no scheme
/// record, and a rongcloud reservation is refused, retryably, unproposed. Once member 3 runs
/// this build (restarted on its data dir), the leader raises the set's version and proposes
/// `AcquireWorkerAt` and the records. Fails without the gate (`versions.rs`; the
/// teeth-no-commands-gate build): member 3 stops on the first version-1 command.
#[test]
fn a_member_of_an_older_build_is_never_sent_a_command_it_cannot_apply() {
    use seqsvr_core::store::{Command, SchemeRecord, COMMANDS_VERSION};
    let snowflake = SchemeRecord { layout: "L1".into(), pool_begin: 0, pool_end: 3 };
    let rongcloud = SchemeRecord { layout: "R1".into(), pool_begin: 0, pool_end: 0 };
    let schemes = |c: &mut super::DriverConfig| {
        c.scheme_records.insert("snowflake".into(), snowflake.clone());
        c.scheme_records.insert("rc".into(), rongcloud.clone());
    };
    let mut net = Network::with_config(3, |c| {
        schemes(c);
        if c.node_id == NodeId(3) {
            c.commands_version = 0;
        }
    });
    net.elect(1);
    let (input, mut rx) = register("alloc-a:1");
    net.send(1, input);
    net.settle();
    let alloc = answer(&mut rx).expect("registered");
    let acquire = |net: &mut Network| {
        let (reply, mut rx) = oneshot::channel();
        let input = Input::AcquireWorker {
            alloc,
            scheme: "snowflake".into(),
            layout: "L1".into(),
            identity: None,
            reply,
        };
        net.send(1, input);
        net.settle();
        answer(&mut rx).expect("a worker id leased");
        let last = net.raft(1).raft_log.last_index();
        command_at(net, 1, last).expect("the lease's command")
    };
    let reserve_session = |net: &mut Network| {
        let (reply, mut rx) = oneshot::channel();
        let reservation = super::SessionReservation {
            alloc,
            scheme: "rc".into(),
            layout: "R1".into(),
            section: SectionId(0),
            lease_epoch: LeaseEpoch(1),
            up_to_ms: seqsvr_server::clock::unix_ms_now(),
        };
        net.send(1, Input::ReserveSessionTime { reservation, identity: None, reply });
        net.settle();
        answer(&mut rx)
    };
    for _ in 0..5 {
        net.tick(&[1]); // arbiter rounds: nothing of version 1 may go out
    }
    assert!(matches!(acquire(&mut net), Command::AcquireWorker { .. }), "the old command");
    let before = net.raft(1).raft_log.last_index();
    match reserve_session(&mut net) {
        Err(RequestError::CommandsVersion(why)) => assert!(why.contains("older"), "{why}"),
        other => panic!("expected a CommandsVersion refusal, got {other:?}"),
    }
    assert_eq!(net.raft(1).raft_log.last_index(), before, "a refused reservation was proposed");
    for id in net.ids() {
        let control = net.store(id).state().control();
        assert_eq!(control.commands_version, 0, "member {id}: the set was raised too early");
        assert!(control.schemes.contains_key("snowflake"), "recorded by the old lease");
        assert!(!control.schemes.contains_key("rc"), "member {id}: records need version 1");
    }
    assert_agree(&net);

    // Member 3 is upgraded: it restarts on its data dir with this build.
    net.restart_with(3, schemes);
    let raised = net.tick_until(&[1], 10, |net| {
        net.ids().iter().all(|&id| net.store(id).state().control().commands_version > 0)
    });
    assert!(raised, "the set's commands version was never raised");
    net.tick(&[1]); // the next round records the schemes
    assert!(matches!(acquire(&mut net), Command::AcquireWorkerAt { .. }), "the new command");
    let before = net.raft(1).raft_log.last_index();
    let reserved = reserve_session(&mut net);
    assert!(
        matches!(reserved, Err(RequestError::Rejected(_))),
        "proposed once the set runs version 1 (and refused at apply only because alloc-a owns \
         no section): {reserved:?}"
    );
    assert!(net.raft(1).raft_log.last_index() > before, "the reservation was proposed");
    for id in net.ids() {
        let control = net.store(id).state().control();
        assert_eq!(control.commands_version, COMMANDS_VERSION, "member {id}");
        assert!(control.schemes.contains_key("rc"), "member {id} recorded every scheme");
    }
    assert_agree(&net);
}

/// Three members, 1 leading; member 3 started on a build before the gate (version 0), was
/// restarted on this build, and every member's report of version 1 is in: the leader's next
/// arbiter round would raise the set's version.
fn just_upgraded() -> Network {
    let mut net = Network::with_config(3, |c| {
        if c.node_id == NodeId(3) {
            c.commands_version = 0;
        }
    });
    net.elect(1);
    net.restart_with(3, |_| {});
    let mut ticks = 0;
    while !net.driver(1).members_behind(1, std::time::Instant::now()).is_empty() {
        assert!(ticks < 10, "member 3 never reported this build");
        net.tick(&[1]);
        ticks += 1;
    }
    net
}

/// No membership change is proposed behind an unapplied raise of the commands version: the
/// raise was judged on the members before the change, and a member added behind it could be
/// of an older build (it would stop on the raise). Refused with a precondition while the raise
/// waits in the log; accepted once it applied. Fails without `versions.rs::unapplied_raise`
/// in `membership.rs::check_membership`.
#[test]
fn no_membership_change_is_proposed_behind_an_unapplied_raise() {
    use super::MembershipChange;
    let mut net = just_upgraded();
    assert_eq!(net.store(1).state().control().commands_version, 0, "not raised yet");
    // The raise is proposed by a leader cut off from the others: it stays unapplied.
    net.isolate(1);
    net.tick(&[1]);
    let index = net.driver(1).unapplied_raise().expect("the raise waits in the log");
    let add = |net: &mut Network| {
        let (reply, mut rx) = oneshot::channel();
        let change = MembershipChange::AddLearner { id: NodeId(4), addr: "mem-4:7000".into() };
        net.send(1, Input::Membership { change, reply });
        net.settle();
        rx.try_recv()
    };
    match add(&mut net) {
        Ok(Err(RequestError::Precondition(why))) => {
            assert!(why.contains("being raised"), "{why}");
            assert!(why.contains(&index.to_string()), "{why}");
        }
        other => panic!("expected a refusal while the raise is unapplied, got {other:?}"),
    }
    net.heal();
    let applied = net.tick_until(&[1], 10, |net| {
        net.ids().iter().all(|&id| {
            net.store(id).state().control().commands_version == seqsvr_core::store::COMMANDS_VERSION
        })
    });
    assert!(applied, "the raise applied once the leader reached the others");
    assert!(net.driver(1).unapplied_raise().is_none());
    assert!(
        !matches!(add(&mut net), Ok(Err(RequestError::Precondition(_)))),
        "accepted (proposed) once the raise applied"
    );
}

/// A member's report counts toward a raise only while it is fresh (one election timeout) and of
/// this leader's current term: a member not heard from lately, or heard from only in an earlier
/// term (it may have been rolled back since, under the leader in between), holds the raise
/// back. Fails if `versions.rs::members_behind` ignores a report's age or term.
#[test]
fn only_fresh_reports_of_the_current_term_count_toward_a_raise() {
    use std::time::Instant;
    let mut net = just_upgraded();
    let now = Instant::now();
    let window = {
        let c = &net.driver(1).config;
        c.tick * c.election_ticks as u32
    };
    let stale = now + window + std::time::Duration::from_secs(1);
    let ours = seqsvr_core::store::COMMANDS_VERSION;
    assert_eq!(net.driver(1).members_behind(1, stale), vec![(2, ours), (3, ours)], "stale reports");
    let term = net.raft(1).term;
    net.driver(1).peer_commands_versions.insert(3, (1, term - 1, now));
    assert_eq!(net.driver(1).members_behind(1, now), vec![(3, 1)], "a report of an earlier term");
}

/// The layout of the layout tests' sets, and the same with `section_size` halved.
const LAYOUT: seqsvr_core::store::SetLayout =
    seqsvr_core::store::SetLayout { section_size: 10, uid_begin: 0, uid_end: 1_000 };
const HALVED: seqsvr_core::store::SetLayout =
    seqsvr_core::store::SetLayout { section_size: 5, ..LAYOUT };

/// Three members on [`LAYOUT`], 1 leading, and every member applied the layout's record.
fn layout_recorded() -> Network {
    let mut net = Network::with_config(3, |c| c.layout = Some(LAYOUT));
    net.elect(1);
    let recorded = net.tick_until(&[1], 20, |net| {
        net.ids().iter().all(|&id| net.store(id).state().control().layout == Some(LAYOUT))
    });
    assert!(recorded, "the layout was never recorded");
    net
}

/// The leader records its config's layout (`section_size`, the set's uid range) once the set
/// runs, and never again; a member restarted with another layout refuses to start (a uid would
/// map to another section, whose `max_seq` may be lower). Fails without the `RecordLayout`
/// proposal of `leases.rs::arbitrate` or the check in `Driver::new`.
#[test]
fn a_recorded_layout_refuses_a_member_whose_config_changed_it() {
    let mut net = layout_recorded();
    let before = net.raft(1).raft_log.last_index();
    net.tick(&[1]);
    net.settle();
    assert_eq!(net.raft(1).raft_log.last_index(), before, "recorded once, not every round");

    let refused = net.try_restart_with(2, |c| c.layout = Some(HALVED));
    let why = refused.expect_err("a member with another layout must not start").to_string();
    assert!(why.contains("refusing to start") && why.contains("section_size 5"), "{why}");
}

/// A scheme of the config whose layout the set recorded under another name (a rename) is not
/// recorded and gets no worker id: the recorded name's marks would not protect its ids.
/// Fails without `check_not_renamed` in the `AcquireWorker` handler.
#[test]
fn a_renamed_scheme_gets_no_worker_id() {
    use seqsvr_core::store::SchemeRecord;
    let record = SchemeRecord {
        layout: "snowflake epoch_ms=1 unit=ms sign 1 + time 41 + worker 10 + sequence 12".into(),
        pool_begin: 0,
        pool_end: 3,
    };
    let mut net = Network::with_config(3, |c| {
        c.scheme_records.insert("orders".into(), record.clone());
    });
    net.elect(1);
    let recorded = net
        .tick_until(&[1], 20, |net| net.store(1).state().control().schemes.contains_key("orders"));
    assert!(recorded, "the scheme was never recorded");
    let (input, mut rx) = register("alloc-a:1");
    net.send(1, input);
    net.settle();
    let alloc = answer(&mut rx).expect("registered");
    // Renamed, with another epoch: the same bit fields, so the same values.
    let renamed = SchemeRecord {
        layout: "snowflake epoch_ms=2 unit=ms sign 1 + time 41 + worker 10 + sequence 12".into(),
        ..record.clone()
    };
    net.driver(1).config.scheme_records = [("payments".to_string(), renamed.clone())].into();
    net.tick(&[1]);
    net.settle();
    let schemes = &net.store(1).state().control().schemes;
    assert!(!schemes.contains_key("payments"), "a rename must not be recorded: {schemes:?}");
    let (reply, mut rx) = oneshot::channel();
    let layout = renamed.layout.clone();
    let scheme = "payments".to_string();
    net.send(1, Input::AcquireWorker { alloc, scheme, layout, identity: None, reply });
    net.settle();
    match answer(&mut rx) {
        Err(RequestError::Invalid(why)) => {
            assert!(why.contains("\"orders\"") && why.contains("recorded name"), "{why}")
        }
        other => panic!("expected the rename refused, got {other:?}"),
    }
}

/// A member that started before the set recorded its layout, with a cluster file that maps
/// uids otherwise, stops with a fault naming both layouts as soon as the record reaches it by
/// apply: member 3 is cut off while the record commits, then restarted with a halved
/// `section_size` (nothing is recorded on its disk, so it starts) and reconnected. Running on,
/// it would lead or follow a set whose sections it maps otherwise. The set goes on without it.
/// Fails without the check at the end of `ready.rs::apply` (`stop_on_layout_mismatch`).
#[test]
fn a_member_whose_file_differs_stops_when_the_record_applies() {
    use seqsvr_core::store::COMMANDS_VERSION;
    let (layout, halved) = (LAYOUT, HALVED);
    let mut net = Network::with_config(3, |c| c.layout = Some(layout));
    net.elect(1);
    let raised = net.tick_until(&[1], 20, |net| {
        net.store(3).state().control().commands_version == COMMANDS_VERSION
    });
    assert!(raised, "the set's version was never raised");
    assert_eq!(net.store(3).state().control().layout, None, "recorded before the cut");
    net.isolate(3);
    let recorded = net.tick_until(&[1], 20, |net| {
        [1, 2].iter().all(|&id| net.store(id).state().control().layout == Some(layout))
    });
    assert!(recorded, "the layout was never recorded");
    assert_eq!(net.store(3).state().control().layout, None, "member 3 has not applied it");

    net.restart_with(3, |c| c.layout = Some(halved));
    net.allow_stop(3);
    net.heal();
    let stopped = net.tick_until(&[1], 20, |net| net.stopped(3).is_some());
    let why = net.stopped(3).map(str::to_string);
    assert!(stopped, "member 3 runs on under another layout than the set recorded");
    let why = why.unwrap_or_default();
    assert!(why.contains("section_size 10") && why.contains("section_size 5"), "{why}");
    assert!(why.contains("refuses to start until"), "{why}");

    let (input, mut rx) = advance(1, 100);
    net.send(1, input);
    net.settle();
    answer(&mut rx).expect("members 1 and 2 still commit");
}

/// The same by snapshot: member 2 loses its data dir and comes back empty with a halved
/// `section_size` (an empty dir holds no record: it starts); the leader catches it up by
/// snapshot, which carries the record, and it stops at the install, naming both layouts.
/// Fails without the check after a snapshot is persisted in `ready.rs::on_ready`.
#[test]
fn a_member_whose_file_differs_stops_when_a_snapshot_brings_the_record() {
    let mut net = layout_recorded();
    net.wipe_with(2, |c| c.layout = Some(HALVED));
    net.allow_stop(2);
    let stopped = net.tick_until(&[1], 20, |net| net.stopped(2).is_some());
    let why = net.stopped(2).map(str::to_string);
    assert!(stopped, "member 2 runs on under another layout than the set recorded");
    assert!(net.snapshots_to.get(&2).copied().unwrap_or(0) >= 1, "the record came by snapshot");
    let why = why.unwrap_or_default();
    assert!(why.contains("section_size 10") && why.contains("section_size 5"), "{why}");
}

/// The record waits while a membership change is pending: the member being added (here
/// learner 4, proposed while the leader is cut off, so it stays unapplied) is not in the
/// applied configuration yet, so its report would not be waited for. Once the change applied,
/// learner 4 is a member that never reported the layout: the record keeps waiting. Fails
/// without the `has_pending_conf` check in `leases.rs::layout_agreed`.
#[test]
fn the_layout_is_not_recorded_while_a_member_is_being_added() {
    use super::MembershipChange;
    use seqsvr_core::store::{Command, COMMANDS_VERSION};
    let layout = LAYOUT;
    // The leader's file has no layout until the change is pending: nothing is recorded before.
    let mut net = Network::with_config(3, |c| {
        c.layout = (c.node_id != NodeId(1)).then_some(layout);
    });
    net.elect(1);
    let raised = net.tick_until(&[1], 20, |net| {
        net.ids()
            .iter()
            .all(|&id| net.store(id).state().control().commands_version == COMMANDS_VERSION)
    });
    assert!(raised, "the set's version was never raised");
    net.isolate(1);
    let (reply, mut rx) = oneshot::channel();
    let change = MembershipChange::AddLearner { id: NodeId(4), addr: "mem-4:7000".into() };
    net.send(1, Input::Membership { change, reply });
    assert!(waiting(&mut rx), "the change is pending, not refused: {:?}", rx.try_recv());
    assert!(net.raft(1).has_pending_conf());
    net.driver(1).config.layout = Some(layout);
    let recorded_in_log = |net: &Network| {
        let log = &net.raft(1).raft_log;
        (log.applied + 1..=log.last_index())
            .any(|i| matches!(command_at(net, 1, i), Some(Command::RecordLayout { .. })))
    };
    for _ in 0..3 {
        net.tick(&[1]);
        assert!(!recorded_in_log(&net), "recorded while member 4 was being added");
    }
    net.heal();
    let added = net.tick_until(&[1], 20, |net| !net.raft(1).has_pending_conf());
    assert!(added, "the change never applied");
    for _ in 0..3 {
        net.tick(&[1]);
    }
    assert_eq!(net.store(1).state().control().layout, None, "recorded without learner 4's report");
}

/// The leader records the set's layout only once every member reported the same one with its
/// Raft answers: a member whose file maps uids otherwise (here member 2, with a halved
/// `section_size`) holds the record back whoever leads, so no single member's file becomes the
/// set's. Fails without `versions.rs::members_with_another_layout` in `leases.rs::arbitrate`.
#[test]
fn one_member_with_another_layout_holds_the_record_back() {
    let layout = SetLayout { section_size: 10, uid_begin: 0, uid_end: 1_000 };
    let mut net = Network::with_config(3, |c| {
        let halved = SetLayout { section_size: 5, ..layout };
        c.layout = Some(if c.node_id == NodeId(2) { halved } else { layout });
    });
    net.elect(1);
    let version = seqsvr_core::store::COMMANDS_VERSION;
    let raised =
        net.tick_until(&[1], 20, |net| net.store(1).state().control().commands_version == version);
    assert!(raised, "the set's version was never raised");
    for _ in 0..20 {
        net.tick(&[1]);
    }
    net.settle();
    assert_eq!(net.store(1).state().control().layout, None, "recorded a minority's file");
    // Once member 2's file agrees (a restart with the fixed file), it is recorded.
    net.restart_with(2, |c| c.layout = Some(layout));
    let recorded =
        net.tick_until(&[1], 20, |net| net.store(1).state().control().layout == Some(layout));
    assert!(recorded, "not recorded once every member agreed");
}

/// A lease short enough for a test to move the arbiter's clock past its waits.
const SHORT_LEASE: seqsvr_core::arbiter::LeaseConfig =
    seqsvr_core::arbiter::LeaseConfig { lease_ms: 2_000, margin_ms: 500 };

/// Member 1 leads a set on [`SHORT_LEASE`] with members configured by `layout_of`, one AllocSvr
/// registered, the new leader's wait passed (its clock moved two holds on), and the AllocSvr
/// granted once since, so that the arbiter would give it every section at its next round.
fn arbiter_ready(layout_of: impl Fn(u64) -> Option<SetLayout>) -> (Network, AllocId) {
    let mut net = Network::with_config(3, |c| {
        c.lease = SHORT_LEASE;
        c.layout = layout_of(c.node_id.0);
    });
    net.elect(1);
    let (input, mut rx) = register("alloc-a:1");
    net.send(1, input);
    net.settle();
    let alloc = answer(&mut rx).expect("registered");
    net.advance_clock(1, Duration::from_millis(2 * SHORT_LEASE.hold_ms()));
    heartbeat(&mut net, alloc);
    (net, alloc)
}

/// A heartbeat of `alloc` to member 1, answered.
fn heartbeat(net: &mut Network, alloc: AllocId) -> Grant {
    let (reply, mut rx) = oneshot::channel();
    let route_version = seqsvr_core::ids::RouteVersion(0);
    net.send(1, Input::Heartbeat { alloc, route_version, identity: None, reply });
    net.settle();
    answer(&mut rx).expect("granted")
}

fn n_assigned(net: &Network) -> usize {
    net.store(1).state().control().assignment.runs().count()
}

/// While the set has recorded no layout and a member reported another one (member 2, with a
/// halved `section_size`), the arbiter makes no section servable: two leaders in turn would
/// grant under their own files, and a uid served from section `s_Y` under one would be served
/// from `s_X`, whose `max_seq` may be lower, under the other (I1). So nothing is assigned, a
/// move is refused, a run assigned unsettled before (as by an earlier leader) is not settled,
/// and a heartbeat answers with this leader's file flagged as unrecorded (the AllocSvr checks
/// it). Once member 2's file agrees, the layout is recorded and every section is assigned and
/// settled. Fails without the `layout_dispute` filter in `leases.rs::arbitrate` (for `Assign`
/// or for `Settle`) or the refusal of `Input::Move`.
#[test]
fn no_section_is_assigned_while_a_member_reports_another_layout() {
    use super::replies::ProposalReply;
    use seqsvr_core::store::Command;
    let (mut net, alloc) = arbiter_ready(|id| Some(if id == 2 { HALVED } else { LAYOUT }));
    for _ in 0..5 {
        net.tick(&[1]);
    }
    assert_eq!(n_assigned(&net), 0, "sections assigned while member 2's file disagrees");
    let grant = heartbeat(&mut net, alloc);
    assert_eq!(grant.layout, Some((LAYOUT, false)), "this leader's file, not recorded");
    assert!(grant.runs.is_empty());

    let (reply, mut rx) = oneshot::channel();
    let range = SectionRange::new(SectionId(0), SectionId(10)).expect("a range");
    net.send(1, Input::Move { range, to: alloc, reply });
    match answer(&mut rx) {
        Err(RequestError::Precondition(why)) => {
            assert!(why.contains("member 2: section_size 5"), "{why}")
        }
        other => panic!("expected the move refused, got {other:?}"),
    }

    let moves = vec![(range, alloc)];
    net.driver(1).propose(Command::Assign { moves, settled: false }, ProposalReply::Arbiter);
    net.ready(1);
    net.settle();
    assert_eq!(n_assigned(&net), 1);
    net.advance_clock(1, Duration::from_millis(2 * SHORT_LEASE.hold_ms())); // the fence is over
    heartbeat(&mut net, alloc);
    for _ in 0..5 {
        net.tick(&[1]);
    }
    let settled = net.store(1).state().control().assignment.runs().any(|(_, o)| o.settled);
    assert!(!settled, "a run settled while member 2's file disagrees");
    assert!(heartbeat(&mut net, alloc).runs.is_empty());

    net.restart_with(2, |c| {
        c.lease = SHORT_LEASE;
        c.layout = Some(LAYOUT);
    });
    let sections = net.driver(1).config.sections;
    let served = net.tick_until(&[1], 20, |net| {
        let assignment = &net.store(1).state().control().assignment;
        assignment.unassigned(sections).is_empty() && assignment.runs().all(|(_, o)| o.settled)
    });
    assert!(served, "not every section assigned and settled once every member's file agreed");
    assert_eq!(net.store(1).state().control().layout, Some(LAYOUT));
    let grant = heartbeat(&mut net, alloc);
    assert_eq!(grant.layout, Some((LAYOUT, true)), "the recorded layout");
    assert!(!grant.runs.is_empty(), "the AllocSvr is granted its sections");
}

/// A member whose build reports no layout (before the layout record) is unknown, not another
/// layout: it holds the record back, but not the arbiter (an upgrade in progress must not stop
/// the set's failover). Fails if `layout_dispute` counts a member that reported nothing.
#[test]
fn a_member_that_reports_no_layout_does_not_hold_assignments_back() {
    let (mut net, _) = arbiter_ready(|id| (id != 2).then_some(LAYOUT));
    let assigned = net.tick_until(&[1], 5, |net| n_assigned(net) > 0);
    assert!(assigned, "nothing assigned while member 2 reports no layout");
    assert_eq!(net.store(1).state().control().layout, None, "recorded without member 2's report");
}

/// A forged member (a peer certificate of the set) sends the leader a proposal — empty, on
/// which raft-rs aborts, and one carrying a command — and a campaign order to a follower: no
/// member of ours sends these, so they are dropped. Fails without `inbound.rs::peer_may_send`
/// (the leader panics on the empty proposal, or appends the forged entry).
#[test]
fn proposals_and_campaign_orders_from_a_peer_are_dropped() {
    use raft::eraftpb::{Entry, Message, MessageType};
    let mut net = Network::new(3);
    net.elect(1);
    let before = net.raft(1).raft_log.last_index();
    let forged = |kind: MessageType, to: u64, entries: Vec<Entry>| {
        let mut m = Message::default();
        m.set_msg_type(kind);
        m.from = 2;
        m.to = to;
        m.term = net.raft(1).term;
        m.entries = entries.into();
        Input::Raft {
            from_addr: "mem-2:7000".into(),
            vote_blocked: false,
            commands_version: seqsvr_core::store::COMMANDS_VERSION,
            layout: None,
            messages: vec![m],
        }
    };
    let command = seqsvr_core::store::Command::RaiseCommandsVersion { version: 1 }.encode();
    let entry = Entry { data: command.into(), ..Default::default() };
    let empty = forged(MessageType::MsgPropose, 1, Vec::new());
    let with_entry = forged(MessageType::MsgPropose, 1, vec![entry]);
    let timeout_now = forged(MessageType::MsgTimeoutNow, 3, Vec::new());
    net.send(1, empty);
    net.send(1, with_entry);
    net.send(3, timeout_now);
    net.settle();
    assert_eq!(net.raft(1).raft_log.last_index(), before, "a forged proposal was appended");
    assert_eq!(net.role(1), StateRole::Leader, "a forged campaign order moved leadership");
}

/// One identity's registrations hold at most its share of a scheme's worker ids, however many
/// registrations it makes: with `alloc-b` registered, `alloc-a` registers at four made-up
/// addresses and asks for a worker id for each in one batch (none applied when the next is
/// judged), and gets two of the four, its share beside `alloc-b`; `alloc-b` still gets its
/// two. Fails without
/// `worker_share.rs::check_worker_share` (or if it counts per registration, or ignores leases
/// in flight).
#[test]
fn one_identity_cannot_take_the_worker_ids_of_another_by_registering_more() {
    use seqsvr_core::store::SchemeRecord;
    let record = SchemeRecord { layout: "L1".into(), pool_begin: 0, pool_end: 4 };
    let mut net = Network::with_config(3, |c| {
        c.scheme_records.insert("weibo".into(), record.clone());
    });
    net.elect(1);
    net.tick(&[1]);
    net.settle();
    let register = |net: &mut Network, identity: &str, n: usize| -> Vec<AllocId> {
        (0..n)
            .map(|i| {
                let (input, mut rx) = registered_by(&format!("{identity}-{i}:1"), Some(identity));
                net.send(1, input);
                net.settle();
                answer(&mut rx).expect("registered")
            })
            .collect()
    };
    // Every acquisition reaches the leader before any is applied (one loop turn).
    let acquire_together = |net: &mut Network, identity: &str, allocs: &[AllocId]| {
        let answers: Vec<_> = allocs
            .iter()
            .map(|&alloc| {
                let (reply, rx) = oneshot::channel();
                let (scheme, layout) = ("weibo".to_string(), "L1".to_string());
                let identity = Some(identity.to_string());
                net.driver(1).handle(Input::AcquireWorker {
                    alloc,
                    scheme,
                    layout,
                    identity,
                    reply,
                });
                rx
            })
            .collect();
        net.ready(1);
        net.settle();
        answers.into_iter().map(|mut rx| answer(&mut rx)).collect::<Vec<_>>()
    };
    let b = register(&mut net, "alloc-b", 2);
    let a = register(&mut net, "alloc-a", 4);
    let answers = acquire_together(&mut net, "alloc-a", &a);
    assert_eq!(answers.iter().filter(|r| r.is_ok()).count(), 2, "{answers:?}");
    for refused in answers.iter().filter_map(|r| r.as_ref().err()) {
        match refused {
            RequestError::WorkerShare(why) => {
                assert!(why.contains("\"alloc-a\"") && why.contains("share of 2"), "{why}")
            }
            other => panic!("expected the share refusal, got {other:?}"),
        }
    }
    let answers = acquire_together(&mut net, "alloc-b", &b);
    assert!(answers.iter().all(|r| r.is_ok()), "alloc-b's share was taken: {answers:?}");
}
