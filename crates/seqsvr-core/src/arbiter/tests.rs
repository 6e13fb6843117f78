//! The arbiter's decisions, and a simulation of leases under random heartbeats, delays, deaths,
//! drains, leader changes and lease changes checking I3: no two AllocSvrs ever serve one section
//! at once.

use super::*;
use crate::ids::SectionId;
use crate::store::{Applied, Rejected, StoreState};
use proptest::prelude::*;

const LEASE: LeaseConfig = LeaseConfig { lease_ms: 3000, margin_ms: 300 };
const HOLD: u64 = 3300;
const SHORT: LeaseConfig = LeaseConfig { lease_ms: 1000, margin_ms: 100 };
const LONG: LeaseConfig = LeaseConfig { lease_ms: 8000, margin_ms: 800 };

fn sections() -> SectionRange {
    SectionRange::new(SectionId(0), SectionId(100)).unwrap()
}

fn register(state: &mut StoreState, addr: &str) -> AllocId {
    match state.apply(&Command::RegisterAlloc { addr: addr.into() }).result {
        Ok(Applied::Registered(id)) => id,
        other => panic!("{other:?}"),
    }
}

/// Applies planned commands the way the driver does, telling the arbiter what applied.
fn apply_all(state: &mut StoreState, arbiter: &mut Arbiter, commands: Vec<Command>, now: u64) {
    for c in commands {
        let settled = matches!(c, Command::Assign { settled: true, .. });
        let removed = match &c {
            Command::RemoveAlloc { alloc } => Some(*alloc),
            _ => None,
        };
        match state.apply(&c).result {
            Ok(Applied::Assigned { lease_epoch }) => arbiter.on_assigned(lease_epoch, settled, now),
            Ok(Applied::LeaseChanged { .. }) => arbiter.on_lease_changed(now),
            Ok(_) => {
                if let Some(a) = removed {
                    arbiter.forget(a);
                }
            }
            Err(_) => {}
        }
    }
}

/// A state whose replicated lease is `lease` (set by some earlier leader).
fn state_with_lease(lease: LeaseConfig) -> StoreState {
    let mut state = StoreState::new();
    let out = state.apply(&Command::SetLease { lease, after_change: 0 });
    assert_eq!(out.result, Ok(Applied::LeaseChanged { lease_changes: 1 }));
    state
}

/// AllocSvrs at `addrs`, granted at the end of a new leader's wait (at 0), and the sections
/// the leader's first plan assigned them.
fn assigned_at_first_plan(addrs: &[&str]) -> (StoreState, Arbiter, Vec<AllocId>) {
    let mut state = state_with_lease(LEASE);
    let ids: Vec<AllocId> = addrs.iter().map(|addr| register(&mut state, addr)).collect();
    let mut arb = Arbiter::new(0, LEASE);
    for &id in &ids {
        arb.on_granted(id, HOLD);
    }
    let cmds = arb.plan(HOLD, state.control(), sections());
    apply_all(&mut state, &mut arb, cmds, HOLD);
    (state, arb, ids)
}

fn owners(state: &StoreState) -> BTreeMap<AllocId, u64> {
    state.control().assignment.load()
}

#[test]
fn new_leader_waits_a_lease_then_splits_sections_between_live_allocs() {
    let mut state = state_with_lease(LEASE);
    let a = register(&mut state, "a:1");
    let b = register(&mut state, "b:1");
    let mut arb = Arbiter::new(1000, LEASE);
    arb.on_granted(a, 1100);
    arb.on_granted(b, 1100);
    assert!(arb.plan(1000 + HOLD - 1, state.control(), sections()).is_empty());
    let cmds = arb.plan(1000 + HOLD, state.control(), sections());
    apply_all(&mut state, &mut arb, cmds, 1000 + HOLD);
    assert_eq!(owners(&state), BTreeMap::from([(a, 50), (b, 50)]));
    assert!(state.control().assignment.runs().all(|(_, o)| o.settled), "nobody held them");
    assert_eq!(grant_for(state.control(), a).len(), 1, "one contiguous run each");
}

#[test]
fn dead_alloc_is_expired_then_its_sections_move_settled() {
    let (mut state, mut arb, ids) = assigned_at_first_plan(&["a:1", "b:1"]);
    let (a, b) = (ids[0], ids[1]);
    // b keeps heartbeating; a stops after its grant at HOLD.
    let mut now = HOLD;
    while now < HOLD + HOLD {
        now += 500;
        arb.on_granted(b, now);
        let cmds = arb.plan(now, state.control(), sections());
        apply_all(&mut state, &mut arb, cmds, now);
        if now < 2 * HOLD {
            assert!(owners(&state).contains_key(&a), "a's lease may still run at {now}");
        }
    }
    assert!(arb.is_expired(a));
    assert!(!arb.may_grant(state.control(), a), "an expired alloc is never granted again");
    assert_eq!(owners(&state), BTreeMap::from([(b, 100)]));
    assert!(state.control().assignment.runs().all(|(_, o)| o.settled));
    let cmds = arb.plan(now + 1, state.control(), sections());
    assert!(cmds.contains(&Command::RemoveAlloc { alloc: a }));
}

#[test]
fn draining_moves_sections_behind_a_fence_then_settles() {
    let (mut state, mut arb, ids) = assigned_at_first_plan(&["a:1", "b:1"]);
    let (a, b) = (ids[0], ids[1]);
    state.apply(&Command::SetDraining { alloc: a, draining: true });
    let t = HOLD + 100;
    arb.on_granted(a, t);
    arb.on_granted(b, t);
    let cmds = arb.plan(t, state.control(), sections());
    apply_all(&mut state, &mut arb, cmds, t);
    assert_eq!(owners(&state), BTreeMap::from([(b, 100)]));
    let moved: Vec<_> = state.control().assignment.runs().filter(|(_, o)| !o.settled).collect();
    assert_eq!(moved.len(), 1, "a's run is fenced: a may still serve it under its lease");
    assert_eq!(grant_for(state.control(), b).len(), 1, "b serves only its old run meanwhile");
    arb.on_granted(b, t + HOLD - 1);
    assert!(!arb
        .plan(t + HOLD - 1, state.control(), sections())
        .iter()
        .any(|c| matches!(c, Command::Settle { .. })));
    let cmds = arb.plan(t + HOLD, state.control(), sections());
    assert!(cmds.iter().any(|c| matches!(c, Command::Settle { .. })));
    apply_all(&mut state, &mut arb, cmds, t + HOLD);
    assert!(state.control().assignment.runs().all(|(_, o)| o.settled));
}

#[test]
fn a_new_alloc_gets_half_of_the_largest_run() {
    let (mut state, mut arb, ids) = assigned_at_first_plan(&["a:1"]);
    let a = ids[0];
    let b = register(&mut state, "b:1");
    arb.on_granted(a, HOLD + 10);
    arb.on_granted(b, HOLD + 10);
    let cmds = arb.plan(HOLD + 10, state.control(), sections());
    assert_eq!(cmds.len(), 1);
    apply_all(&mut state, &mut arb, cmds, HOLD + 10);
    assert_eq!(owners(&state), BTreeMap::from([(a, 50), (b, 50)]));
}

#[test]
fn a_fenced_run_stays_fenced_when_its_new_owner_dies_before_it_settles() {
    let (mut state, mut arb, ids) = assigned_at_first_plan(&["a:1"]);
    let a = ids[0];
    // a drains at t: its sections move to c, fenced while a's lease (granted at t) may run.
    let t = HOLD + 1000;
    let c = register(&mut state, "c:1");
    arb.on_granted(c, t - 900); // c's last heartbeat: its lease is over long before a's
    state.apply(&Command::SetDraining { alloc: a, draining: true });
    arb.on_granted(a, t);
    let cmds = arb.plan(t, state.control(), sections());
    apply_all(&mut state, &mut arb, cmds, t);
    assert!(state.control().assignment.runs().all(|(_, o)| o.alloc == c && !o.settled));
    // b arrives and heartbeats; c is silent and expires at t - 900 + HOLD. Its run goes to b,
    // but stays fenced until a's lease is surely over.
    let b = register(&mut state, "b:1");
    let a_lease_end = t + LEASE.lease_ms - LEASE.margin_ms;
    let mut now = t;
    while now < a_lease_end {
        now += 100;
        arb.on_granted(b, now);
        let cmds = arb.plan(now, state.control(), sections());
        apply_all(&mut state, &mut arb, cmds, now);
        let b_serves = grant_for(state.control(), b);
        assert!(
            b_serves.is_empty(),
            "at {now}: b is granted {b_serves:?}; a may serve until {a_lease_end}"
        );
    }
    assert!(!arb.may_grant(state.control(), c), "the scenario needs c gone before a's lease ends");
}

#[test]
fn a_set_without_a_lease_first_commits_one_and_grants_nothing_before() {
    // A new set, or data from before the lease was replicated (no `lease` in the control state).
    let mut state = StoreState::new();
    let a = register(&mut state, "a:1");
    let mut arb = Arbiter::new(0, LEASE);
    assert!(!arb.may_grant(state.control(), a), "no grant without a replicated lease");
    assert!(!arb.is_settled_in(10 * HOLD, state.control()));
    assert_eq!(arb.lease_change(0, state.control(), SHORT), Err(LeaseChangeError::NotBootstrapped));
    let cmds = arb.plan(10 * HOLD, state.control(), sections());
    assert_eq!(cmds, vec![Command::SetLease { lease: LEASE, after_change: 0 }], "nothing else");
    apply_all(&mut state, &mut arb, cmds, 10);
    assert_eq!(state.control().lease, Some(LEASE));
    assert_eq!(state.control().previous_lease, Some(LEASE), "old leaders used their config");
    assert!(arb.may_grant(state.control(), a));
    // Granted right away, but nothing moves before a hold has passed since the lease applied.
    arb.on_granted(a, 20);
    assert!(arb.plan(10 + HOLD - 1, state.control(), sections()).is_empty());
    let cmds = arb.plan(10 + HOLD, state.control(), sections());
    apply_all(&mut state, &mut arb, cmds, 10 + HOLD);
    assert_eq!(owners(&state), BTreeMap::from([(a, 100)]));
}

#[test]
fn every_wait_uses_the_replicated_lease_not_the_leaders_config() {
    // The set's lease is LONG; this leader's config says SHORT (a rolling config change).
    let mut state = state_with_lease(LONG);
    let a = register(&mut state, "a:1");
    let b = register(&mut state, "b:1");
    let mut arb = Arbiter::new(0, SHORT);
    arb.on_granted(a, 10);
    arb.on_granted(b, 10);
    assert!(arb.plan(LONG.hold_ms() - 1, state.control(), sections()).is_empty());
    let cmds = arb.plan(LONG.hold_ms(), state.control(), sections());
    apply_all(&mut state, &mut arb, cmds, LONG.hold_ms());
    assert_eq!(owners(&state), BTreeMap::from([(a, 50), (b, 50)]));
    // a's last grant at t: its sections stay with it for a whole LONG hold.
    let t = LONG.hold_ms() + 10;
    arb.on_granted(a, t);
    let mut now = t;
    while now < t + LONG.hold_ms() {
        assert!(owners(&state).contains_key(&a), "at {now}: a's LONG lease may still run");
        arb.on_granted(b, now);
        let cmds = arb.plan(now, state.control(), sections());
        apply_all(&mut state, &mut arb, cmds, now);
        now += 100;
    }
    arb.on_granted(b, now);
    let cmds = arb.plan(now, state.control(), sections());
    apply_all(&mut state, &mut arb, cmds, now);
    assert_eq!(owners(&state), BTreeMap::from([(b, 100)]));
}

#[test]
fn lease_changes_are_validated_spaced_and_compare_and_set() {
    let mut state = state_with_lease(LEASE); // applied before this leader started at 1000
    let start = 1000;
    let mut arb = Arbiter::new(start, LEASE);
    let control = state.control().clone();
    for bad in [
        LeaseConfig { lease_ms: 0, margin_ms: 0 },
        LeaseConfig { lease_ms: 1000, margin_ms: 0 },
        LeaseConfig { lease_ms: 1000, margin_ms: 500 },
        LeaseConfig { lease_ms: MAX_LEASE_MS + 2, margin_ms: 1 },
    ] {
        let refused = arb.lease_change(start + 100 * HOLD, &control, bad);
        assert!(
            matches!(refused, Err(LeaseChangeError::Invalid(InputError::InvalidLease(_)))),
            "{bad:?}: {refused:?}"
        );
    }
    // A new arbiter treats the last change as applied at its start: leases from before it may
    // run for the previous hold.
    let early = arb.lease_change(start + HOLD - 1, &control, SHORT);
    assert_eq!(early, Err(LeaseChangeError::TooSoon { wait_ms: 1, since_ms: HOLD - 1 }));
    assert!(early.unwrap_err().to_string().contains("retry after"));
    let first = arb.lease_change(start + HOLD, &control, LONG).unwrap();
    assert_eq!(first, Command::SetLease { lease: LONG, after_change: 1 });
    // Two changes proposed on the same state: only the first applies (compare-and-set).
    let second = arb.lease_change(start + HOLD, &control, SHORT).unwrap();
    let t1 = start + HOLD + 7;
    apply_all(&mut state, &mut arb, vec![first], t1);
    assert_eq!(state.control().lease, Some(LONG));
    assert_eq!(state.control().previous_lease, Some(LEASE));
    let before = state.clone();
    let out = state.apply(&second);
    assert_eq!(
        out.result,
        Err(Rejected::StaleLeaseChange { after_change: 1, lease_changes: 2 }),
        "a change proposed before another applied must not apply after it"
    );
    assert!(!out.control_changed);
    assert_eq!(state, before);
    // The next change waits the hold of the lease the last one replaced (LEASE), from its apply.
    assert!(matches!(
        arb.lease_change(t1 + HOLD - 1, state.control(), SHORT),
        Err(LeaseChangeError::TooSoon { wait_ms: 1, .. })
    ));
    let third = arb.lease_change(t1 + HOLD, state.control(), SHORT).unwrap();
    apply_all(&mut state, &mut arb, vec![third], t1 + HOLD);
    assert_eq!(state.control().previous_lease, Some(LONG));
    // ... and now LONG's hold, also for a new leader, which counts from its own start.
    let t2 = t1 + HOLD;
    assert!(arb.lease_change(t2 + LONG.hold_ms() - 1, state.control(), LEASE).is_err());
    assert!(arb.lease_change(t2 + LONG.hold_ms(), state.control(), LEASE).is_ok());
    let arb = Arbiter::new(t2 + 50, SHORT);
    assert!(arb.lease_change(t2 + 50 + LONG.hold_ms() - 1, state.control(), LEASE).is_err());
    assert!(arb.lease_change(t2 + 50 + LONG.hold_ms(), state.control(), LEASE).is_ok());
}

/// A leader grants under LONG, the lease is shortened to SHORT, and leadership moves at once:
/// the new leader must keep a's sections until a's LONG lease is surely over, though both
/// the replicated lease and its own config now say SHORT.
#[test]
fn a_new_leader_after_a_shortening_waits_the_previous_hold() {
    let mut state = state_with_lease(LONG);
    let a = register(&mut state, "a:1");
    let b = register(&mut state, "b:1");
    let mut arb = Arbiter::new(0, LONG);
    let long = LONG.hold_ms();
    arb.on_granted(a, long);
    arb.on_granted(b, long);
    let cmds = arb.plan(long, state.control(), sections());
    apply_all(&mut state, &mut arb, cmds, long);
    assert_eq!(owners(&state), BTreeMap::from([(a, 50), (b, 50)]));
    // a's last heartbeat, sent at t, is granted under LONG; then the lease is shortened.
    let t = long + 100;
    arb.on_granted(a, t);
    let cmd = arb.lease_change(t, state.control(), SHORT).expect("LONG's hold passed since start");
    apply_all(&mut state, &mut arb, vec![cmd], t);
    assert_eq!(state.control().longest_hold_ms(), Some(long));
    let a_lease_end = t + LONG.lease_ms - LONG.margin_ms;
    let mut arb = Arbiter::new(t + 1, SHORT);
    let mut now = t + 1;
    while now < t + 1 + long {
        arb.on_granted(b, now);
        let cmds = arb.plan(now, state.control(), sections());
        apply_all(&mut state, &mut arb, cmds, now);
        let b_serves: u64 = grant_for(state.control(), b).iter().map(|(r, _)| r.len()).sum();
        if now < a_lease_end {
            assert_eq!(b_serves, 50, "at {now}: b serves a's sections; a may until {a_lease_end}");
        }
        now += 100;
    }
    arb.on_granted(b, now);
    let cmds = arb.plan(now, state.control(), sections());
    apply_all(&mut state, &mut arb, cmds, now);
    assert_eq!(owners(&state), BTreeMap::from([(b, 100)]), "a's sections move in the end");
}

/// One AllocSvr's view in the simulation: what it may serve and until when.
#[derive(Clone, Debug, Default)]
struct Claim {
    from_ms: u64,
    until_ms: u64,
    sections: Vec<SectionRange>,
}

fn overlaps(a: &[SectionRange], b: &[SectionRange]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.begin() < y.end() && y.begin() < x.end()))
}

#[derive(Clone, Debug)]
enum Event {
    Advance(u64),
    /// AllocSvr i heartbeats: sent `send_delay` ago, answer takes `reply_delay` to arrive.
    Heartbeat {
        i: usize,
        send_delay: u64,
        reply_delay: u64,
    },
    Drain(usize),
    Restart(usize),
    /// A new leader, whose own config says `LEASES[i]`.
    NewLeader(usize),
    /// An operator asks the leader to change the lease to `LEASES[i]`; if allowed, the
    /// command enters the log (it commits later, maybe under another leader, maybe never).
    ProposeLease(usize),
    /// The oldest proposed lease change commits and applies.
    CommitLease,
    /// The oldest proposed lease change is lost (its leader was deposed first).
    LoseLease,
}

/// Lease timings of the simulation: the initial one, shorter, longer.
const LEASES: [LeaseConfig; 3] = [LEASE, LeaseConfig { lease_ms: 1200, margin_ms: 120 }, LONG];

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (1u64..1500).prop_map(Event::Advance),
        6 => (0usize..3, 0u64..400, 0u64..400)
            .prop_map(|(i, send_delay, reply_delay)| Event::Heartbeat { i, send_delay, reply_delay }),
        1 => (0usize..3).prop_map(Event::Drain),
        1 => (0usize..3).prop_map(Event::Restart),
        1 => (0usize..3).prop_map(Event::NewLeader),
        1 => (0usize..3).prop_map(Event::ProposeLease),
        1 => Just(Event::CommitLease),
        1 => Just(Event::LoseLease),
    ]
}

proptest! {
    // Many cases: a run of 256 found the lost-fence bug (a2ab68d) only ~4% of the time; 16k
    // cases take about a second in release.
    #![proptest_config(ProptestConfig { cases: 16_384, ..ProptestConfig::default() })]

    /// I3 under random schedules: an AllocSvr serves a section from the moment a grant naming
    /// it arrives until `send + lease - margin` (of the lease in the grant); at no instant do
    /// two AllocSvrs serve one section. The set starts without a replicated lease (the first
    /// leader commits its config's), and the lease changes, shorter and longer, while leaders
    /// with differing configs come and go.
    #[test]
    fn no_two_allocs_ever_serve_one_section(events in prop::collection::vec(event(), 1..200)) {
        let mut state = StoreState::new();
        let mut ids: Vec<AllocId> =
            (0..3).map(|i| register(&mut state, &format!("alloc-{i}:1"))).collect();
        let mut now = 10_000u64;
        let mut arb = Arbiter::new(now, LEASE);
        // Lease changes proposed but not yet committed, oldest first.
        let mut in_log: Vec<Command> = Vec::new();
        // Claims per AllocSvr *process* (index), in the order they arrive.
        let mut claims: Vec<Vec<Claim>> = vec![Vec::new(); 3];
        for ev in events {
            match ev {
                Event::Advance(ms) => now += ms,
                Event::Heartbeat { i, send_delay, reply_delay } => {
                    let sent = now.saturating_sub(send_delay);
                    if arb.may_grant(state.control(), ids[i]) {
                        arb.on_granted(ids[i], now);
                        let lease = state.control().lease.expect("may_grant implies a lease");
                        let sections = grant_for(state.control(), ids[i]).into_iter().map(|(r, _)| r).collect();
                        claims[i].push(Claim {
                            from_ms: now + reply_delay,
                            until_ms: sent + lease.lease_ms - lease.margin_ms,
                            sections,
                        });
                    }
                }
                Event::Drain(i) => {
                    state.apply(&Command::SetDraining { alloc: ids[i], draining: true });
                }
                Event::Restart(i) => {
                    // A restarted process has no lease and registers anew; answers still on
                    // their way to the old process are lost with it.
                    claims[i].retain(|c| c.from_ms <= now);
                    claims[i].push(Claim { from_ms: now, until_ms: now, sections: Vec::new() });
                    ids[i] = register(&mut state, &format!("alloc-{i}:1"));
                }
                Event::NewLeader(i) => arb = Arbiter::new(now, LEASES[i]),
                Event::ProposeLease(i) => {
                    if let Ok(c) = arb.lease_change(now, state.control(), LEASES[i]) {
                        in_log.push(c);
                    }
                }
                Event::CommitLease => {
                    if !in_log.is_empty() {
                        let c = in_log.remove(0);
                        apply_all(&mut state, &mut arb, vec![c], now);
                    }
                }
                Event::LoseLease => {
                    if !in_log.is_empty() {
                        in_log.remove(0);
                    }
                }
            }
            let cmds = arb.plan(now, state.control(), sections());
            apply_all(&mut state, &mut arb, cmds, now);
        }
        // Check every instant at which some claim starts: what each process serves then.
        let serving = |i: usize, t: u64| -> Vec<SectionRange> {
            let latest = claims[i].iter().filter(|c| c.from_ms <= t).max_by_key(|c| c.from_ms);
            match latest {
                Some(c) if t < c.until_ms => c.sections.clone(),
                _ => Vec::new(),
            }
        };
        let instants: BTreeSet<u64> = claims.iter().flatten().map(|c| c.from_ms).collect();
        for t in instants {
            for i in 0..3 {
                for j in i + 1..3 {
                    let (a, b) = (serving(i, t), serving(j, t));
                    prop_assert!(!overlaps(&a, &b), "at {t}: alloc {i} serves {a:?}, alloc {j} serves {b:?}");
                }
            }
        }
    }
}
