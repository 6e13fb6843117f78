//! The allocation table against a reference model `{uid → last value}` and a model store
//! `{section → committed max_seq}`: values strictly increase per uid (I1), never exceed what
//! the store committed (I2), and survive reloads under new epochs.

use super::*;
use proptest::prelude::*;

const SIZE: u64 = 10;

fn config(step: u64) -> AllocConfig {
    AllocConfig { section_size: SIZE, step, prefetch_remaining: step * 9 / 10 }
}

fn all(n_sections: u64, epoch: u64) -> Vec<(SectionRange, LeaseEpoch)> {
    vec![(SectionRange::new(SectionId(0), SectionId(n_sections)).unwrap(), LeaseEpoch(epoch))]
}

/// The runs and epochs of a grant's loads (without their generations).
fn runs_of(loads: &[Load]) -> Vec<(SectionRange, LeaseEpoch)> {
    loads.iter().map(|l| (l.run, l.lease_epoch)).collect()
}

/// Commits every wanted advance like the store would: `max(current, requested)`.
fn commit_wanted(t: &mut AllocTable, store: &mut BTreeMap<SectionId, u64>) {
    for a in t.take_wanted(usize::MAX) {
        let v = store.entry(a.section).or_insert(0);
        *v = (*v).max(a.max_seq.0);
        t.advanced(a.section, a.lease_epoch, Some(*v));
    }
}

#[test]
fn serves_contiguously_with_step_boundaries() {
    let mut t = AllocTable::new(config(10));
    let to_load = t.grant(&all(2, 1));
    assert_eq!(runs_of(&to_load), all(2, 1));
    assert_eq!(t.next(3), Err(SeqError::Loading(SectionId(0))));
    t.loaded(&to_load[0], &BTreeMap::new());
    let mut store = BTreeMap::new();
    let mut last = 0;
    for _ in 0..1000 {
        let v = match t.next(3) {
            Ok(v) => v,
            Err(SeqError::Exhausted(_)) => {
                commit_wanted(&mut t, &mut store);
                t.next(3).unwrap()
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(v, last + 1, "contiguous while nothing fails");
        last = v;
        assert!(v <= store[&SectionId(0)]);
        commit_wanted(&mut t, &mut store); // prefetch keeps ahead
    }
    assert_eq!(t.current(3), Ok(1000));
    assert_eq!(t.current(4), Ok(0), "never allocated, section base 0");
    assert_eq!(t.next(25), Err(SeqError::NotOwned(SectionId(2))));
}

#[test]
fn batches_are_all_or_nothing_and_ordered() {
    let mut t = AllocTable::new(config(5));
    let runs = t.grant(&all(2, 1));
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), 5), (SectionId(1), 100)]));
    // uid 1 three times needs 8 > 5: nothing is allocated.
    assert_eq!(t.next_batch(&[12, 1, 1, 1]), Err(SeqError::Exhausted(SectionId(0))));
    assert_eq!(t.current(12), Ok(100));
    assert_eq!(t.current(1), Ok(5));
    let wanted = t.take_wanted(10);
    assert_eq!(wanted.len(), 2, "both sections are at their bound");
    assert!(wanted[0].max_seq.0 >= 8 && wanted[1].max_seq.0 >= 101);
    for a in wanted {
        t.advanced(a.section, LeaseEpoch(1), Some(a.max_seq.0));
    }
    assert_eq!(t.next_batch(&[12, 1, 1, 1]), Ok(vec![101, 6, 7, 8]));
}

#[test]
fn a_batch_over_the_quick_bound_that_fits_exactly_is_served() {
    let mut t = AllocTable::new(config(10));
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::new());
    let mut store = BTreeMap::new();
    assert_eq!(t.next(1), Err(SeqError::Exhausted(SectionId(0))));
    commit_wanted(&mut t, &mut store);
    assert_eq!(store[&SectionId(0)], 11);
    for v in 1..=10 {
        assert_eq!(t.next(1), Ok(v));
    }
    // Highest current 10 plus 3 uids bounds the need at 13 > 11; exactly, it is 11.
    assert_eq!(t.next_batch(&[1, 2, 3]), Ok(vec![11, 1, 1]));
    assert_eq!(t.next_batch(&[1]), Err(SeqError::Exhausted(SectionId(0))));
}

#[test]
fn next_each_serves_what_it_can_and_waits_for_nothing() {
    let mut t = AllocTable::new(config(2));
    let runs = t.grant(&all(2, 1));
    t.loaded(&runs[0], &BTreeMap::new());
    let mut store = BTreeMap::new();
    assert_eq!(t.next_each(&[1]), vec![0]);
    commit_wanted(&mut t, &mut store);
    assert_eq!(store[&SectionId(0)], 3);
    // uid 1 fits three times (1, 2, 3), the fourth not; section 1 has max_seq 0; section 5 is
    // not served here.
    assert_eq!(t.next_each(&[1, 15, 1, 55, 1, 3, 1]), vec![1, 0, 2, 0, 3, 1, 0]);
    let wanted = t.take_wanted(10);
    let sections: Vec<SectionId> = wanted.iter().map(|a| a.section).collect();
    assert_eq!(sections, vec![SectionId(0), SectionId(1)], "both short sections ask to advance");
    assert!(wanted[0].max_seq.0 >= 4, "section 0 asks for enough for the refused value");
}

#[test]
fn a_section_used_fast_during_its_advances_grows_its_step_and_shrinks_back() {
    let mut t = AllocTable::new(config(10)); // prefetch once fewer than 9 remain
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::new());
    let mut store = BTreeMap::new();
    assert_eq!(t.next(1), Err(SeqError::Exhausted(SectionId(0))));
    commit_wanted(&mut t, &mut store); // max_seq 11
                                       // Use 2 values: 9 remain... the third leaves 8 < 9 and asks for 11 + 10.
    for _ in 0..3 {
        t.next(1).unwrap();
    }
    let sent = t.take_wanted(10);
    assert_eq!(sent[0].max_seq.0, 21);
    // While it is out, 6 more values go (more than half of the headroom of 9).
    for _ in 0..6 {
        t.next(1).unwrap();
    }
    t.advanced(SectionId(0), LeaseEpoch(1), Some(21));
    // 21 - 9 = 12 remain, not below the doubled headroom (18)? It is: ask for 21 + 20.
    t.next(1).unwrap();
    let sent = t.take_wanted(10);
    assert_eq!(sent[0].max_seq.0, 41, "the advance size doubled");
    // Slow use while the next one is out: the size halves again.
    t.advanced(SectionId(0), LeaseEpoch(1), Some(41));
    let mut v = 0;
    while !t.has_wanted() {
        v = t.next(1).unwrap();
    }
    let sent = t.take_wanted(10);
    assert!(v >= 23, "the doubled headroom (18 of 41) was reached at {v}");
    assert_eq!(sent[0].max_seq.0, 41 + 10, "back to one step after a slow round");
    // Growth is bounded.
    let mut t = AllocTable::new(config(10));
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::new());
    let mut max_seq = 0;
    for _ in 0..20 {
        while !t.has_wanted() {
            match t.next(1) {
                Ok(_) | Err(SeqError::Exhausted(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        let sent = t.take_wanted(10);
        // Use everything up to the old max_seq while the advance is out.
        while t.next(1).is_ok() {}
        max_seq = sent[0].max_seq.0;
        t.advanced(SectionId(0), LeaseEpoch(1), Some(max_seq));
    }
    let before = max_seq;
    while !t.has_wanted() {
        let _ = t.next(1);
    }
    assert_eq!(t.take_wanted(10)[0].max_seq.0 - before, 10 * MAX_STEP_GROWTH);
}

#[test]
fn regrant_with_new_epoch_reloads_and_dropped_sections_stop() {
    let mut t = AllocTable::new(config(10));
    let first = t.grant(&all(2, 1));
    t.loaded(&first[0], &BTreeMap::from([(SectionId(0), 10)]));
    assert_eq!(t.next(1), Err(SeqError::Exhausted(SectionId(0))), "10 is the committed bound");
    let wanted = t.take_wanted(10);
    t.advanced(SectionId(0), LeaseEpoch(1), Some(wanted[0].max_seq.0));
    assert_eq!(t.next(1), Ok(11));
    // Section 1 moves away; section 0 comes back at a new epoch: it must reload.
    let runs = t.grant(&[(SectionRange::new(SectionId(0), SectionId(1)).unwrap(), LeaseEpoch(2))]);
    assert_eq!(runs.len(), 1);
    assert_eq!(t.next(15), Err(SeqError::NotOwned(SectionId(1))));
    assert_eq!(t.next(1), Err(SeqError::Loading(SectionId(0))));
    // A load for the old epoch is ignored.
    assert_eq!(t.loaded(&first[0], &BTreeMap::from([(SectionId(0), 10)])), 0);
    assert_eq!(t.next(1), Err(SeqError::Loading(SectionId(0))));
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), 50)]));
    assert_eq!(t.current(1), Ok(50), "cur_seq restarts at the loaded max_seq");
    assert_eq!(t.counts(), (1, 0), "the reload dropped the old cur_seq array");
}

/// A failed load drops its section on its own; an empty grant after that (a registration lost
/// and renewed, or a hand-back) must still drop every other section: skipped as "unchanged",
/// the table would go on serving sections the store gave to someone else.
#[test]
fn an_empty_grant_after_a_dropped_section_drops_everything() {
    let mut t = AllocTable::new(config(10));
    let first = SectionRange::new(SectionId(0), SectionId(2)).unwrap();
    let runs = t.grant(&[(first, LeaseEpoch(1))]);
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), 100), (SectionId(1), 100)]));
    assert_eq!(t.current(1), Ok(100));
    let more = SectionRange::new(SectionId(2), SectionId(3)).unwrap();
    let to_load = t.grant(&[(first, LeaseEpoch(1)), (more, LeaseEpoch(2))]);
    assert_eq!(runs_of(&to_load), vec![(more, LeaseEpoch(2))]);
    t.load_failed(&to_load[0]);
    assert!(t.grant(&[]).is_empty());
    assert_eq!(t.current(1), Err(SeqError::NotOwned(SectionId(0))));
    assert_eq!(t.usage(), TableUsage::default());
}

#[test]
fn usage_counts_sections_by_state_and_cur_seq_memory() {
    let mut t = AllocTable::new(config(10));
    assert_eq!(t.usage(), TableUsage::default());
    let runs = t.grant(&all(3, 1));
    assert_eq!(t.usage().sections_loading, 3);
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), 100), (SectionId(1), 100)]));
    let u = t.usage();
    assert_eq!((u.sections_ready, u.sections_loading, u.sections_touched), (3, 0, 0));
    let mut store = BTreeMap::new();
    for uid in [1, 15] {
        let _ = t.next(uid); // wants an advance: the loaded max_seq is all used
        commit_wanted(&mut t, &mut store);
        assert!(t.next(uid).is_ok());
    }
    let u = t.usage();
    assert_eq!(u.sections_touched, 2);
    assert_eq!(u.cur_seq_bytes, 2 * SIZE * 4, "one u32 offset per uid of each touched section");
}

#[derive(Clone, Debug)]
enum Op {
    Next(u64),
    Batch(Vec<u64>),
    /// Independent requests (`next_each`), as a coalescing client sends them.
    Each(Vec<u64>),
    /// Commit some of the wanted advances.
    Commit(usize),
    /// The store refuses some in-flight advances (e.g. unavailable).
    Fail(usize),
    /// Lose every section and get them back at a new epoch (a hand-over and back).
    Reload,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..30).prop_map(Op::Next),
        2 => prop::collection::vec(0u64..30, 1..8).prop_map(Op::Batch),
        2 => prop::collection::vec(0u64..30, 1..8).prop_map(Op::Each),
        3 => (0usize..4).prop_map(Op::Commit),
        1 => (0usize..4).prop_map(Op::Fail),
        1 => Just(Op::Reload),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn matches_reference_model(step in 1u64..20, ops in prop::collection::vec(op(), 1..150)) {
        let mut t = AllocTable::new(config(step));
        let mut epoch = 1;
        let mut store: BTreeMap<SectionId, u64> = BTreeMap::new();
        let runs = t.grant(&all(3, epoch));
        t.loaded(&runs[0], &store);
        let mut last: BTreeMap<u64, u64> = BTreeMap::new();
        let mut in_flight: Vec<SectionAdvance> = Vec::new();
        for op in ops {
            let served: Vec<(u64, u64)> = match op {
                Op::Next(uid) => t.next(uid).map(|v| vec![(uid, v)]).unwrap_or_default(),
                Op::Batch(uids) => {
                    let before: Vec<u64> = uids.iter().map(|&u| t.current(u).unwrap()).collect();
                    // What each value must be: current + its repeat count so far, and the
                    // batch is refused exactly when one of them exceeds its section's max_seq.
                    let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
                    let expected: Vec<u64> = uids.iter().zip(&before).map(|(&u, &c)| {
                        let k = seen.entry(u).or_insert(0);
                        *k += 1;
                        c + *k
                    }).collect();
                    let fits = uids.iter().zip(&expected).all(|(&u, &v)| {
                        v <= t.max_seq_of(SectionId(u / SIZE)).unwrap()
                    });
                    match t.next_batch(&uids) {
                        Ok(values) => {
                            prop_assert!(fits, "served a batch that does not fit");
                            prop_assert_eq!(&values, &expected);
                            uids.iter().copied().zip(values).collect()
                        }
                        Err(e) => {
                            prop_assert!(!fits, "refused a batch that fits: {}", e);
                            let after: Vec<u64> = uids.iter().map(|&u| t.current(u).unwrap()).collect();
                            prop_assert_eq!(before, after, "a refused batch changed nothing");
                            Vec::new()
                        }
                    }
                }
                Op::Each(uids) => {
                    let values = t.next_each(&uids);
                    prop_assert_eq!(values.len(), uids.len());
                    let mut served = Vec::new();
                    for (&uid, &v) in uids.iter().zip(&values) {
                        if v == 0 {
                            // Not served: only because the next value would exceed max_seq.
                            let section = SectionId(uid / SIZE);
                            let next = t.current(uid).unwrap() + 1;
                            prop_assert!(next > t.max_seq_of(section).unwrap());
                        } else {
                            served.push((uid, v));
                        }
                    }
                    served
                }
                Op::Commit(n) => {
                    in_flight.extend(t.take_wanted(usize::MAX));
                    for a in in_flight.drain(..n.min(in_flight.len())) {
                        let v = store.entry(a.section).or_insert(0);
                        *v = (*v).max(a.max_seq.0);
                        t.advanced(a.section, a.lease_epoch, Some(*v));
                    }
                    Vec::new()
                }
                Op::Fail(n) => {
                    for a in in_flight.drain(..n.min(in_flight.len())) {
                        t.advanced(a.section, a.lease_epoch, None);
                    }
                    Vec::new()
                }
                Op::Reload => {
                    epoch += 1;
                    t.grant(&[]);
                    let runs = t.grant(&all(3, epoch));
                    t.loaded(&runs[0], &store);
                    Vec::new()
                }
            };
            for &(uid, v) in &served {
                let prev = last.insert(uid, v).unwrap_or(0);
                prop_assert!(v > prev, "uid {uid}: {v} after {prev}");
                let committed = store.get(&SectionId(uid / SIZE)).copied().unwrap_or(0);
                prop_assert!(v <= committed, "I2: {v} above committed {committed}");
            }
            for (&uid, &v) in &last {
                prop_assert!(t.current(uid).unwrap() >= v, "current below a served value");
            }
        }
    }
}

/// What the review saw: an operator raised a section to just below `u64::MAX`, then the section
/// moved, so its new owner loaded that `max_seq`. Every request must get a clear, final error,
/// never a panic (overflow checks are on in release) and never a wait for an advance.
#[test]
fn a_section_loaded_near_u64_max_answers_ceiling_without_panicking() {
    for loaded in [18_446_744_073_709_550_000, u64::MAX, MAX_SEQ_CEILING + 1, MAX_SEQ_CEILING] {
        let mut t = AllocTable::new(config(10_000));
        let runs = t.grant(&all(2, 1));
        t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), loaded), (SectionId(1), 7)]));
        assert_eq!(t.next(1), Err(SeqError::Ceiling(SectionId(0))), "loaded {loaded}");
        assert_eq!(t.next_batch(&[1, 2, 1]), Err(SeqError::Ceiling(SectionId(0))));
        assert_eq!(t.next_batch(&[12, 1]), Err(SeqError::Ceiling(SectionId(0))));
        assert_eq!(t.next_each(&[1, 12, 1]), vec![0, 0, 0], "section 1 waits for an advance");
        assert_eq!(t.current(1), Ok(loaded), "nothing was allocated");
        // No advance beyond the ceiling is ever wanted: only section 1's.
        let wanted = t.take_wanted(10);
        assert_eq!(wanted.len(), 1, "loaded {loaded}: {wanted:?}");
        assert_eq!(wanted[0].section, SectionId(1));
        t.advanced(SectionId(1), LeaseEpoch(1), Some(wanted[0].max_seq.0));
        assert_eq!(t.next_each(&[1, 12]), vec![0, 8]);
        assert!(!t.has_wanted());
        // A stray commit for the exhausted section changes nothing and panics nowhere.
        t.advanced(SectionId(0), LeaseEpoch(1), Some(u64::MAX));
        assert_eq!(t.next(1), Err(SeqError::Ceiling(SectionId(0))));
        assert!(t.take_wanted(10).is_empty());
    }
}

/// The advancer's path: a section in use gets a commit of a value near `u64::MAX` (an operator
/// raise that raced our advance). `advanced` must not overflow, and the section serves on, up
/// to the ceiling and never above it.
#[test]
fn a_commit_near_u64_max_neither_panics_nor_serves_above_the_ceiling() {
    let mut t = AllocTable::new(config(10_000));
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::new());
    assert_eq!(t.next(1), Err(SeqError::Exhausted(SectionId(0))));
    let sent = t.take_wanted(10);
    assert_eq!(sent.len(), 1);
    t.advanced(SectionId(0), LeaseEpoch(1), Some(18_446_744_073_709_550_000));
    assert_eq!(t.next_batch(&[1, 1, 2]), Ok(vec![1, 2, 1]));
    assert!(!t.has_wanted(), "max_seq is beyond the ceiling: no advance can help");
    // A uid whose values reached the ceiling gets the final error; others go on below it.
    let mut t = AllocTable::new(config(10));
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), MAX_SEQ_CEILING - 3)]));
    assert_eq!(t.next(1), Err(SeqError::Exhausted(SectionId(0))));
    let sent = t.take_wanted(10);
    assert_eq!(sent[0].max_seq.0, MAX_SEQ_CEILING, "the want is capped at the ceiling");
    t.advanced(SectionId(0), LeaseEpoch(1), Some(u64::MAX - 5)); // an old store may commit more
    for v in MAX_SEQ_CEILING - 2..=MAX_SEQ_CEILING {
        assert_eq!(t.next(1), Ok(v));
    }
    assert_eq!(t.next(1), Err(SeqError::Ceiling(SectionId(0))));
    assert_eq!(t.next_each(&[1, 2]), vec![0, MAX_SEQ_CEILING - 2]);
    assert_eq!(t.current(1), Ok(MAX_SEQ_CEILING));
    assert!(!t.has_wanted());
}

/// Near the ceiling (no overflow possible there): wants stop at it, the values up to it are
/// served, then the section answers `Ceiling` for good (a final error, not a wait).
#[test]
fn a_section_serves_up_to_the_ceiling_then_answers_ceiling() {
    let mut t = AllocTable::new(config(10));
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), MAX_SEQ_CEILING - 25)]));
    let mut store = BTreeMap::from([(SectionId(0), MAX_SEQ_CEILING - 25)]);
    let mut last = MAX_SEQ_CEILING - 25;
    loop {
        match t.next(1) {
            Ok(v) => {
                assert_eq!(v, last + 1);
                last = v;
            }
            Err(SeqError::Exhausted(_)) => {}
            Err(SeqError::Ceiling(s)) => {
                assert_eq!(s, SectionId(0));
                break;
            }
            Err(e) => panic!("{e}"),
        }
        for a in t.take_wanted(10) {
            assert!(a.max_seq.0 <= MAX_SEQ_CEILING, "wanted {} above the ceiling", a.max_seq.0);
            let v = store.entry(a.section).or_insert(0);
            *v = (*v).max(a.max_seq.0);
            t.advanced(a.section, a.lease_epoch, Some(*v));
        }
    }
    assert_eq!(last, MAX_SEQ_CEILING);
    assert_eq!(store[&SectionId(0)], MAX_SEQ_CEILING);
    assert!(!t.has_wanted(), "an exhausted section does not keep the advancer busy");
    // A batch that would need values above the ceiling is refused at once, even while the
    // section is still below it (waiting could never make it fit).
    let mut t = AllocTable::new(config(10));
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), MAX_SEQ_CEILING - 2)]));
    assert_eq!(t.next_batch(&[1, 1, 1]), Err(SeqError::Ceiling(SectionId(0))));
    let sent = t.take_wanted(10);
    assert_eq!(sent[0].max_seq.0, MAX_SEQ_CEILING, "still asks for what is left");
    t.advanced(SectionId(0), LeaseEpoch(1), Some(MAX_SEQ_CEILING));
    assert_eq!(t.next_batch(&[1, 1]), Ok(vec![MAX_SEQ_CEILING - 1, MAX_SEQ_CEILING]));
}

/// A huge configured step (times the growth) saturates instead of overflowing, and the want
/// it makes stops at the ceiling.
#[test]
fn a_huge_step_saturates_and_stops_at_the_ceiling() {
    let step = 1 << 62;
    let mut t = AllocTable::new(AllocConfig { section_size: SIZE, step, prefetch_remaining: step });
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::new());
    assert_eq!(t.next(1), Err(SeqError::Exhausted(SectionId(0))));
    let sent = t.take_wanted(10);
    assert_eq!(sent[0].max_seq.0, step + 1);
    t.advanced(SectionId(0), LeaseEpoch(1), Some(step + 1));
    assert_eq!(t.next(1), Ok(1));
    assert_eq!(t.next(1), Ok(2)); // fewer than `prefetch` left: wants max_seq + step
    let sent = t.take_wanted(10);
    assert_eq!(sent[0].max_seq.0, MAX_SEQ_CEILING, "capped, not 2^63 + 1");
    // Used more than half the headroom while it was out? No, but pretend a huge commit.
    t.advanced(SectionId(0), LeaseEpoch(1), Some(u64::MAX));
    assert_eq!(t.next(1), Ok(3));
    assert!(!t.has_wanted());
}

/// The advancer's `advanced` with a want above the committed value (a request came while the
/// advance was out) for a section near `u64::MAX`: `max_seq + step` used to overflow there
/// and kill the advancer task. Results are checked only at the end, so that the old code
/// reaches `advanced`.
#[test]
fn the_advancer_path_near_u64_max_does_not_panic() {
    let mut t = AllocTable::new(config(10_000));
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), u64::MAX - 15_000)]));
    let first = t.next(1);
    let sent = t.take_wanted(10);
    let batch = t.next_batch(&[1; 10]); // while the advance is out
    for a in &sent {
        t.advanced(a.section, a.lease_epoch, Some(a.max_seq.0));
    }
    t.advanced(SectionId(0), LeaseEpoch(1), Some(u64::MAX - 4_999)); // a commit racing an operator raise
    assert_eq!(first, Err(SeqError::Ceiling(SectionId(0))));
    assert!(sent.is_empty(), "no advance beyond the ceiling: {sent:?}");
    assert_eq!(batch, Err(SeqError::Ceiling(SectionId(0))));
    assert_eq!(t.next(1), Err(SeqError::Ceiling(SectionId(0))));
    assert!(!t.has_wanted());
}

/// A failed load drops the sections; the next heartbeat's grant is usually identical, and
/// identical grants are skipped. Dropping must make the next grant install (and load) again,
/// or the sections stay unserved for the life of the process.
#[test]
fn a_grant_after_a_failed_load_loads_again() {
    let mut t = AllocTable::new(config(10));
    let runs = all(2, 1);
    let to_load = t.grant(&runs);
    assert_eq!(runs_of(&to_load), runs);
    assert!(t.grant(&runs).is_empty(), "an unchanged grant is skipped");
    // The load failed (store unreachable): the AllocSvr drops what it could not load.
    t.load_failed(&to_load[0]);
    assert_eq!(t.next(3), Err(SeqError::NotOwned(SectionId(0))));
    let again = t.grant(&runs);
    assert_eq!(runs_of(&again), runs, "the same grant must load the dropped sections again");
    let mut store = BTreeMap::from([(SectionId(0), 10)]);
    t.loaded(&again[0], &store);
    // Served again: every uid starts at the loaded max_seq, so the first value needs an advance.
    assert_eq!(t.next(3), Err(SeqError::Exhausted(SectionId(0))));
    commit_wanted(&mut t, &mut store);
    assert_eq!(t.next(3), Ok(11));
}

/// A load answer is applied only to the load the section waits for (finding 8 of issue 30).
/// Load 1 is out when the section is dropped (the registration was lost) and granted again at
/// the same epoch (load 2); load 2's answer makes it ready and values are served and advanced
/// past load 1's `max_seq`; it is dropped and granted again (load 3). Load 1's answer, late,
/// with the older `max_seq`, must not make the section ready: it would start every uid at 10,
/// below the values served, and serve them again (I1). Teeth `accept-stale-load` turns the
/// generation check off (`scripts/test.sh`).
#[test]
fn stale_load_answer_never_resets_a_reloaded_section() {
    let mut t = AllocTable::new(config(10));
    let granted = all(1, 1);
    let load1 = t.grant(&granted)[0];
    let read_by_load1 = BTreeMap::from([(SectionId(0), 10)]);
    t.grant(&[]); // registration lost while load 1 is out; then granted again, same epoch
    let load2 = t.grant(&granted)[0];
    assert_ne!(load1.generation, load2.generation, "every load has its own generation");
    assert_eq!((load1.run, load1.lease_epoch), (load2.run, load2.lease_epoch));
    assert_eq!(t.loaded(&load2, &BTreeMap::from([(SectionId(0), 10)])), 1);
    let mut store = BTreeMap::from([(SectionId(0), 10)]);
    let mut served = 0;
    for _ in 0..15 {
        served = next_committing(&mut t, &mut store, 3).expect("served after the advance");
    }
    assert_eq!(served, 25);
    // Load 1's answer while the section is ready: ignored (it is not loading).
    assert_eq!(t.loaded(&load1, &read_by_load1), 0, "stale load applied to a ready section");
    assert_eq!(t.current(3), Ok(served));

    t.grant(&[]); // lost again; granted again at the same epoch: load 3 is out
    let load3 = t.grant(&granted)[0];
    assert_eq!(t.loaded(&load1, &read_by_load1), 0, "stale load applied while load 3 is out");
    assert_eq!(
        t.next(3),
        Err(SeqError::Loading(SectionId(0))),
        "stale load applied: the section serves from the max_seq load 1 read"
    );
    assert_eq!(t.usage().stale_loads, 1, "the ignored answer is counted");
    // A failure of the stale load drops nothing either; load 3's own answer serves.
    t.load_failed(&load1);
    assert_eq!(t.next(3), Err(SeqError::Loading(SectionId(0))));
    assert_eq!(t.loaded(&load3, &store), 1);
    assert_eq!(t.current(3), Ok(store[&SectionId(0)]));
    let next = next_committing(&mut t, &mut store, 3).unwrap();
    assert!(next > served, "I1 across the reloads: {next} after {served}");
}

/// The next value of `uid`; when it waits for an advance, commits the wanted ones and asks again.
fn next_committing(
    t: &mut AllocTable,
    store: &mut BTreeMap<SectionId, u64>,
    uid: u64,
) -> Result<u64, SeqError> {
    match t.next(uid) {
        Err(SeqError::Exhausted(_)) => {
            commit_wanted(t, store);
            t.next(uid)
        }
        other => other,
    }
}

#[derive(Clone, Debug)]
enum LOp {
    /// Serve a uid (committing the advances it asks for first when it waits).
    Serve(u64),
    /// Every section dropped and granted again at the same epoch: one more load out.
    Regrant,
    /// One of the loads still out is answered (with what the store held when it was sent).
    Answer(usize),
    /// One of the loads still out fails.
    Fail(usize),
}

fn lop() -> impl Strategy<Value = LOp> {
    prop_oneof![
        4 => (0u64..20).prop_map(LOp::Serve),
        2 => Just(LOp::Regrant),
        2 => (0usize..8).prop_map(LOp::Answer),
        1 => (0usize..8).prop_map(LOp::Fail),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Loads answered late and in any order, with sections dropped and granted again at one
    /// epoch in between: values still strictly increase per uid (I1) and stay within what the
    /// store committed (I2).
    #[test]
    fn stale_load_answers_in_any_order_keep_i1_and_i2(ops in prop::collection::vec(lop(), 1..60)) {
        let mut t = AllocTable::new(config(5));
        let granted = all(2, 1);
        let mut store: BTreeMap<SectionId, u64> = BTreeMap::new();
        let mut out: Vec<(Load, BTreeMap<SectionId, u64>)> =
            t.grant(&granted).into_iter().map(|l| (l, store.clone())).collect();
        let mut last: BTreeMap<u64, u64> = BTreeMap::new();
        for op in ops {
            match op {
                LOp::Serve(uid) => {
                    if let Ok(v) = next_committing(&mut t, &mut store, uid) {
                        let prev = last.insert(uid, v).unwrap_or(0);
                        prop_assert!(v > prev, "stale load applied? uid {uid}: {v} after {prev} (I1)");
                        let committed = store.get(&SectionId(uid / SIZE)).copied().unwrap_or(0);
                        prop_assert!(v <= committed, "I2: {v} above committed {committed}");
                    }
                }
                LOp::Regrant => {
                    t.grant(&[]);
                    out.extend(t.grant(&granted).into_iter().map(|l| (l, store.clone())));
                }
                LOp::Answer(i) if !out.is_empty() => {
                    let (load, read) = out.remove(i % out.len());
                    t.loaded(&load, &read);
                }
                LOp::Fail(i) if !out.is_empty() => {
                    let (load, _) = out.remove(i % out.len());
                    t.load_failed(&load);
                }
                LOp::Answer(_) | LOp::Fail(_) => {}
            }
        }
    }
}

// Tests written for survivors of the mutation run (docs/reliability/mutants.md).

fn range(begin: u64, end: u64) -> SectionRange {
    SectionRange::new(SectionId(begin), SectionId(end)).unwrap()
}

/// `next_each` answers one value per uid, in uid order, also around runs of uids it cannot
/// serve (a section not owned here, one still loading): a coalescing client hands the values
/// to its callers by position, so a value out of place would give a caller another uid's
/// sequence (I1 broken from that caller's view).
#[test]
fn next_each_keeps_every_value_in_its_uids_place_around_unserved_runs() {
    let mut t = AllocTable::new(config(10));
    // Sections 0 and 1 ready (loaded at 100), section 2 still loading, section 5 not owned.
    let to_load = t.grant(&[(range(0, 2), LeaseEpoch(1)), (range(2, 3), LeaseEpoch(2))]);
    assert_eq!(runs_of(&to_load), vec![(range(0, 2), LeaseEpoch(1)), (range(2, 3), LeaseEpoch(2))]);
    let mut store = BTreeMap::from([(SectionId(0), 100), (SectionId(1), 100)]);
    t.loaded(&to_load[0], &store);
    assert_eq!(t.next_each(&[1, 12]), vec![0, 0], "both wait for an advance");
    commit_wanted(&mut t, &mut store);
    let uids = [1, 55, 56, 12, 25, 26, 27, 2, 1];
    assert_eq!(t.next_each(&uids), vec![101, 0, 0, 101, 0, 0, 0, 101, 102]);
    assert_eq!(t.next_each(&[55, 1, 25, 26, 12]), vec![0, 103, 0, 0, 102]);
}

/// A grant's sections to load come as runs of adjacent sections with one lease epoch: a run
/// never spans two epochs (the sections of the other epoch would never leave `Loading`: a load
/// is applied only to sections loading at its epoch) nor a gap.
#[test]
fn sections_to_load_are_runs_of_one_epoch_without_gaps() {
    let mut t = AllocTable::new(config(10));
    let grant =
        [(range(0, 2), 1), (range(2, 3), 2), (range(5, 7), 2)].map(|(r, e)| (r, LeaseEpoch(e)));
    let to_load = t.grant(&grant);
    assert_eq!(runs_of(&to_load), grant.to_vec());
    for load in &to_load {
        let values: BTreeMap<SectionId, u64> =
            (load.run.begin().0..load.run.end().0).map(|s| (SectionId(s), 40)).collect();
        t.loaded(load, &values);
    }
    for uid in [1, 15, 25, 55, 65] {
        assert_eq!(t.current(uid), Ok(40), "uid {uid} loaded");
    }
    assert_eq!(t.next(35), Err(SeqError::NotOwned(SectionId(3))));
}

/// A batch that needs exactly the ceiling while `max_seq` is below it waits for an advance
/// (`Exhausted`); only a need above the ceiling is final (`Ceiling`).
#[test]
fn a_batch_needing_exactly_the_ceiling_waits_for_an_advance() {
    let mut t = AllocTable::new(config(10));
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), MAX_SEQ_CEILING - 2)]));
    assert_eq!(t.next_batch(&[1, 1]), Err(SeqError::Exhausted(SectionId(0))));
    let sent = t.take_wanted(10);
    assert_eq!(sent[0].max_seq.0, MAX_SEQ_CEILING);
    t.advanced(SectionId(0), LeaseEpoch(1), Some(MAX_SEQ_CEILING));
    assert_eq!(t.next_batch(&[1, 1]), Ok(vec![MAX_SEQ_CEILING - 1, MAX_SEQ_CEILING]));
}

/// Prefetch starts once fewer than `prefetch_remaining` values are left, not at exactly that
/// many.
#[test]
fn prefetch_starts_once_fewer_than_prefetch_remaining_are_left() {
    let mut t = AllocTable::new(config(10)); // prefetch_remaining 9
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::new());
    let mut store = BTreeMap::new();
    assert_eq!(t.next(1), Err(SeqError::Exhausted(SectionId(0))));
    commit_wanted(&mut t, &mut store); // max_seq 11
    assert_eq!(t.next(1), Ok(1));
    assert_eq!(t.next(1), Ok(2));
    assert!(!t.has_wanted(), "9 values left: no prefetch yet");
    assert_eq!(t.next(1), Ok(3));
    assert!(t.has_wanted(), "8 left: prefetch");
}

/// A uid repeated in runs that are not adjacent (another section's uids between them) counts
/// every occurrence against its section's `max_seq` on the quick path too: the batch waits for
/// an advance instead of reaching a value above the committed bound (I2).
#[test]
fn a_uid_repeated_across_runs_counts_every_occurrence() {
    let mut t = AllocTable::new(config(10));
    let runs = t.grant(&all(2, 1));
    t.loaded(&runs[0], &BTreeMap::new());
    let mut store = BTreeMap::new();
    assert_eq!(t.next_each(&[1, 15]), vec![0, 0]);
    commit_wanted(&mut t, &mut store); // both sections at max_seq 11
    for v in 1..=10 {
        assert_eq!(t.next(1), Ok(v));
    }
    // One value is left for uid 1, which the batch asks for twice.
    assert_eq!(t.next_batch(&[1, 15, 1]), Err(SeqError::Exhausted(SectionId(0))));
    assert_eq!((t.current(1), t.current(15)), (Ok(10), Ok(0)), "nothing was handed out");
    assert_eq!(t.next_batch(&[1, 15]), Ok(vec![11, 1]));
}

// 32-bit offsets and rebases (issue 13, item 4; the module doc of `alloc.rs`).

/// The table's section state, for checks of its bookkeeping.
fn seqs(t: &mut AllocTable, section: u64) -> &mut SectionSeqs {
    match t.sections.get_mut(&SectionId(section)) {
        Some(SectionState::Ready(s)) => s,
        _ => panic!("section {section} not ready"),
    }
}

/// What issue 13 measures: a section whose every uid was touched costs 4 bytes per uid.
#[test]
fn a_fully_touched_section_costs_four_bytes_per_uid() {
    const N: u64 = 1000;
    let config = AllocConfig { section_size: N, step: 10 * N, prefetch_remaining: N };
    let mut t = AllocTable::new(config);
    let runs = t.grant(&all(1, 1));
    let base = 1 << 40; // values far above u32: only the offsets are stored
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), base)]));
    t.advanced(SectionId(0), LeaseEpoch(1), Some(base + 10 * N));
    let uids: Vec<u64> = (0..N).collect();
    assert_eq!(t.next_batch(&uids), Ok(vec![base + 1; N as usize]));
    assert_eq!(t.next_batch(&uids), Ok(vec![base + 2; N as usize]));
    let u = t.usage();
    assert_eq!(u.sections_touched, 1);
    assert_eq!(u.cur_seq_bytes / N, 4, "bytes per touched uid: {}", u.cur_seq_bytes);
    assert_eq!(u.cur_seq_bytes, 4 * N);
    assert_eq!(u.rebases, 0);
}

/// The production limit is `u32::MAX`: an offset reaches it without a rebase, and the value
/// after it rebases the section (every other uid is raised to the high-water mark).
#[test]
fn an_offset_past_u32_max_rebases_the_section() {
    let mut t = AllocTable::new(config(10));
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), 1000)]));
    t.advanced(SectionId(0), LeaseEpoch(1), Some(1 << 40));
    assert_eq!(t.next(2), Ok(1001));
    // As if uid 1 had been served u32::MAX - 1 times (4 billion `next` calls are too slow).
    let s = seqs(&mut t, 0);
    s.cur.as_mut().unwrap()[1] = u32::MAX - 1;
    s.high_water = 1000 + u64::from(u32::MAX) - 1;
    let top = 1000 + u64::from(u32::MAX);
    assert_eq!(t.next(1), Ok(top), "offset u32::MAX itself is stored");
    assert_eq!(t.usage().rebases, 0);
    assert_eq!(t.next(1), Ok(top + 1));
    assert_eq!(t.usage().rebases, 1, "the offset would have overflowed: rebased");
    assert_eq!(t.current(1), Ok(top + 1), "I1 violated: uid 1's cur_seq wrapped");
    assert_eq!(t.current(2), Ok(top), "raised to the high-water mark, never lowered");
    assert_eq!(t.next_batch(&[2, 1, 3]), Ok(vec![top + 1, top + 2, top + 1]));
}

/// A batch that crosses the offset limit rebases in its middle: the values it already handed
/// out (to this uid and others) stay below everything after the rebase, each uid's values
/// increase in batch order, and a uid repeated more times than the limit rebases again.
#[test]
fn a_rebase_in_the_middle_of_a_batch_only_raises() {
    let mut t = AllocTable::with_offset_limit(config(10), 3);
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::from([(SectionId(0), 100)]));
    t.advanced(SectionId(0), LeaseEpoch(1), Some(200));
    // uid 2's fourth value would be offset 4 > 3: the section rebases to 103 (the highest
    // value handed out so far, uid 2's third); uid 1 (101 earlier in this batch) and uid 3
    // (never served, at 100) come after it, so they start from 103.
    let batch = [1, 2, 2, 2, 2, 1, 3];
    let values = t.next_batch(&batch).unwrap();
    assert_eq!(values, vec![101, 101, 102, 103, 104, 104, 104]);
    assert_eq!(t.usage().rebases, 1);
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    for (&uid, &v) in batch.iter().zip(&values) {
        let prev = last.insert(uid, v).unwrap_or(0);
        assert!(v > prev, "I1 violated: uid {uid} got {v} after {prev} in one batch");
    }
    for (&uid, &v) in &last {
        assert_eq!(t.current(uid), Ok(v), "I1 violated: uid {uid}");
    }
    assert_eq!(t.current(4), Ok(103), "an untouched uid now reads as the new base");
    // One uid, 8 times, limit 3: rebased twice more inside the batch, still contiguous.
    assert_eq!(t.next_batch(&[5; 8]), Ok((104..=111).collect::<Vec<u64>>()));
    assert_eq!(t.usage().rebases, 3);
    // uid 1 (104 before) now reads as base 109; uid 5's second value rebases once more.
    assert_eq!(t.next_each(&[5, 1, 5]), vec![112, 110, 113]);
    assert_eq!(t.usage().rebases, 4);
    let s = seqs(&mut t, 0);
    assert_eq!((s.base, s.high_water), (112, 113));
}

/// A rebase raises the batch's later uids to the high-water mark: when that needs more than
/// `max_seq`, the batch waits for an advance and changes nothing (no rebase either), although
/// it would have fitted without the rebase. `next_each` neither serves nor rebases a uid whose
/// rebased value does not fit, and serves the rest.
#[test]
fn a_rebase_that_does_not_fit_waits_and_changes_nothing() {
    let mut t = AllocTable::with_offset_limit(config(10), 3);
    let runs = t.grant(&all(1, 1));
    t.loaded(&runs[0], &BTreeMap::new());
    t.advanced(SectionId(0), LeaseEpoch(1), Some(5));
    for v in 1..=3 {
        assert_eq!(t.next(1), Ok(v));
    }
    // uid 1 rebases to 3 and gets 4; uid 2 then starts from 3: 4, 5, 6 > 5.
    assert_eq!(t.next_batch(&[1, 2, 2, 2]), Err(SeqError::Exhausted(SectionId(0))));
    assert_eq!((t.current(1), t.current(2), t.usage().rebases), (Ok(3), Ok(0), 0));
    let sent = t.take_wanted(10);
    assert!(sent[0].max_seq.0 >= 6, "asks for what the rebased batch needs: {sent:?}");
    t.advanced(SectionId(0), LeaseEpoch(1), Some(5)); // a smaller commit: still short
    assert_eq!(t.next_each(&[2, 1, 2]), vec![1, 4, 4], "uid 1 rebases, then uid 2 is raised");
    assert_eq!(t.usage().rebases, 1);
    // Base 3 now; uid 1 at offset 1. Bring it to offset 3 with high_water = max_seq = 6: its
    // rebased value 7 does not fit, uid 3 (offset 0) still does.
    t.advanced(SectionId(0), LeaseEpoch(1), Some(6));
    assert_eq!(t.next_batch(&[1, 1]), Ok(vec![5, 6]));
    assert_eq!(t.next_each(&[1, 3]), vec![0, 4]);
    assert_eq!(t.usage().rebases, 1, "not served, not rebased");
    assert_eq!((t.current(1), t.current(2)), (Ok(6), Ok(4)));
}

#[derive(Clone, Debug)]
enum ROp {
    Next(u64),
    /// `next` until refused (at most 64 times): leaves the section at its `max_seq`, where a
    /// rebase decides whether a batch fits.
    Drain(u64),
    Batch(Vec<u64>),
    Each(Vec<u64>),
    Commit(usize),
    Fail(usize),
    /// Every section away and back at a new epoch.
    Reload,
    /// One section dropped (fenced, or its load failed).
    Drop(u64),
    /// The same grant again: loads the dropped sections.
    Regrant,
}

/// Uids of 3 sections, often the same few (repeats within a batch).
fn ruid() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..30, 0u64..3, 10u64..12]
}

fn rop() -> impl Strategy<Value = ROp> {
    prop_oneof![
        6 => ruid().prop_map(ROp::Next),
        1 => ruid().prop_map(ROp::Drain),
        3 => prop::collection::vec(ruid(), 1..12).prop_map(ROp::Batch),
        2 => prop::collection::vec(ruid(), 1..12).prop_map(ROp::Each),
        4 => (0usize..4).prop_map(ROp::Commit),
        1 => (0usize..4).prop_map(ROp::Fail),
        1 => Just(ROp::Reload),
        1 => (0u64..3).prop_map(ROp::Drop),
        1 => Just(ROp::Regrant),
    ]
}

/// One run of the model with offsets limited to `limit`; returns the rebases it saw.
fn rebase_model_run(limit: u32, step: u64, ops: Vec<ROp>) -> Result<u64, TestCaseError> {
    let mut t = AllocTable::with_offset_limit(config(step), limit);
    let mut epoch = 1;
    let mut store: BTreeMap<SectionId, u64> = BTreeMap::new();
    let runs = t.grant(&all(3, epoch));
    t.loaded(&runs[0], &store);
    // The model: last value per uid, high-water mark per ready section (the loaded max_seq,
    // raised by every value served).
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    let mut high: BTreeMap<SectionId, u64> = (0..3).map(|s| (SectionId(s), 0)).collect();
    let mut in_flight: Vec<SectionAdvance> = Vec::new();
    let sec = |uid: u64| SectionId(uid / SIZE);
    for op in ops {
        let rebases_before = t.usage().rebases;
        let served: Vec<(u64, u64)> = match op {
            ROp::Next(_) | ROp::Batch(_) => {
                let (uids, result) = match op {
                    ROp::Next(uid) => (vec![uid], t.next(uid).map(|v| vec![v])),
                    ROp::Batch(uids) => {
                        let before: Vec<_> = uids.iter().map(|&u| t.current(u)).collect();
                        let r = t.next_batch(&uids);
                        if r.is_err() {
                            let after: Vec<_> = uids.iter().map(|&u| t.current(u)).collect();
                            prop_assert_eq!(before, after, "a refused batch changed nothing");
                        }
                        (uids, r)
                    }
                    _ => unreachable!(),
                };
                let owned = uids.iter().all(|&u| high.contains_key(&sec(u)));
                match result {
                    Ok(values) => {
                        prop_assert!(owned, "served a section not held");
                        uids.iter().copied().zip(values).collect()
                    }
                    Err(e) => {
                        prop_assert_eq!(t.usage().rebases, rebases_before, "refused, rebased");
                        if owned {
                            // Every value of a batch is <= high-water + its count in the
                            // section, rebases or not: refused only if that passes max_seq.
                            let mut count: BTreeMap<SectionId, u64> = BTreeMap::new();
                            for &u in &uids {
                                *count.entry(sec(u)).or_insert(0) += 1;
                            }
                            let short =
                                count.iter().any(|(s, &n)| high[s] + n > t.max_seq_of(*s).unwrap());
                            prop_assert!(short, "refused a batch that fits: {}", e);
                        }
                        Vec::new()
                    }
                }
            }
            ROp::Each(uids) => {
                let values = t.next_each(&uids);
                prop_assert_eq!(values.len(), uids.len());
                let mut served = Vec::new();
                let mut hw = high.clone();
                for (&uid, &v) in uids.iter().zip(&values) {
                    match hw.get_mut(&sec(uid)) {
                        None => prop_assert_eq!(v, 0, "served a section not held"),
                        Some(h) if v == 0 => {
                            let max_seq = t.max_seq_of(sec(uid)).unwrap();
                            prop_assert!(
                                *h + 1 > max_seq,
                                "uid {} not served below {}",
                                uid,
                                max_seq
                            );
                        }
                        Some(h) => {
                            *h = (*h).max(v);
                            served.push((uid, v));
                        }
                    }
                }
                served
            }
            ROp::Drain(uid) => {
                let mut served = Vec::new();
                while let Ok(v) = t.next(uid) {
                    served.push((uid, v));
                    if served.len() == 64 {
                        break;
                    }
                }
                served
            }
            ROp::Commit(n) => {
                in_flight.extend(t.take_wanted(usize::MAX));
                for a in in_flight.drain(..n.min(in_flight.len())) {
                    let v = store.entry(a.section).or_insert(0);
                    *v = (*v).max(a.max_seq.0);
                    t.advanced(a.section, a.lease_epoch, Some(*v));
                }
                Vec::new()
            }
            ROp::Fail(n) => {
                for a in in_flight.drain(..n.min(in_flight.len())) {
                    t.advanced(a.section, a.lease_epoch, None);
                }
                Vec::new()
            }
            ROp::Reload | ROp::Regrant => {
                if matches!(op, ROp::Reload) {
                    epoch += 1;
                    t.grant(&[]);
                }
                for load in t.grant(&all(3, epoch)) {
                    t.loaded(&load, &store);
                    for s in load.run.begin().0..load.run.end().0 {
                        let s = SectionId(s);
                        high.insert(s, store.get(&s).copied().unwrap_or(0));
                    }
                }
                Vec::new()
            }
            ROp::Drop(s) => {
                t.drop_section(SectionId(s));
                high.remove(&SectionId(s));
                Vec::new()
            }
        };
        for &(uid, v) in &served {
            let prev = last.insert(uid, v).unwrap_or(0);
            prop_assert!(
                v > prev,
                "rebase model: I1 violated: uid {} got {} after {}",
                uid,
                v,
                prev
            );
            let committed = store.get(&sec(uid)).copied().unwrap_or(0);
            prop_assert!(v <= committed, "I2: {} above committed {}", v, committed);
            let h = high.get_mut(&sec(uid)).unwrap();
            *h = (*h).max(v);
        }
        for (&uid, &v) in &last {
            if let Ok(c) = t.current(uid) {
                prop_assert!(
                    c >= v,
                    "rebase model: I1 violated: current({}) = {} below served {}",
                    uid,
                    c,
                    v
                );
            }
        }
        for (&section, &h) in &high {
            let s = seqs(&mut t, section.0);
            prop_assert_eq!(s.high_water, h, "high_water of {:?}", section);
            prop_assert!(s.base <= h && h - s.base <= u64::from(limit), "offsets within limit");
            prop_assert!(h <= s.max_seq, "high_water above max_seq");
        }
    }
    Ok(t.usage().rebases)
}

/// The model test with offsets of at most 1 to 7: every value of a uid is above its previous
/// one and within what the store committed, across rebases (also inside batches), advances,
/// refusals, reloads and dropped sections. Most runs must rebase, or the test shows nothing.
/// Run by hand (no `proptest!`) to count the runs that rebased, without regression files.
#[test]
fn rebases_keep_the_reference_model() {
    use proptest::test_runner::{Config, TestRunner};
    let cases = 2048;
    let mut runner =
        TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let rebased = std::cell::Cell::new(0u32);
    let strategy = (1u32..8, 1u64..20, prop::collection::vec(rop(), 1..200));
    let result = runner.run(&strategy, |(limit, step, ops)| {
        if rebase_model_run(limit, step, ops)? > 0 {
            rebased.set(rebased.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        rebased.get() * 2 > cases,
        "only {} of {cases} runs rebased: the test does not reach the mechanism",
        rebased.get()
    );
}
