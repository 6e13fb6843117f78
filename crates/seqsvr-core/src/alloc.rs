//! The AllocSvr's allocation table: `cur_seq` per uid and `max_seq` per section, in memory.
//! This is the hot path, readable top to bottom: uid → section → `cur_seq` → maybe wait for an
//! advance. No I/O: the server feeds it grants, loads and committed advances.
//!
//! Invariants:
//! - I2: a value is returned only if it is <= the section's `max_seq` as committed by the store
//!   (`max_seq` here only ever takes values the store returned). Asserted on every allocation.
//! - I1 (within one owner): a uid's values strictly increase. Across owners: a (re)loaded
//!   section starts every `cur_seq` at the loaded `max_seq`, which is >= anything ever served.
//! - Nothing is served above `MAX_SEQ_CEILING` (2^63) and no advance beyond it is ever wanted,
//!   so arithmetic on sequences cannot overflow (it saturates anyway, for `max_seq` loaded from
//!   data written before the ceiling existed). A section with no value left below both its
//!   `max_seq` and the ceiling answers `SeqError::Ceiling`: a final error, never a wait.
//!
//! # 32-bit offsets and rebases (issue 13, item 4)
//!
//! A section keeps `base` and, per uid, `cur_seq - base` as a `u32` (0 = untouched = `base`):
//! 4 bytes per uid instead of 8. Between reloads a uid rarely climbs 2^32 above its section's
//! base, but it can (a hot uid, a long-lived owner), so an offset that would pass
//! `offset_limit` (`u32::MAX`; smaller in tests) first **rebases** the section: `base` becomes
//! the section's `high_water` and every offset 0 (the array is dropped and calloc'd again on
//! the next touch: O(1), and untouched pages cost nothing again).
//!
//! Why that keeps I1 and I2:
//! - Every uid's `cur_seq` is <= `high_water` (the highest value handed out in the section, or
//!   the loaded `max_seq`), so setting all of them to `high_water` only ever **raises** a uid:
//!   its next value `high_water + 1` is above everything it was ever given (I1). That is
//!   exactly what a reload at `max_seq` does to every uid, with a smaller gap.
//! - Values already handed out earlier in the same batch (to any uid of the section) are
//!   <= `high_water` too (it is raised as each value is handed out), so a rebase in the middle
//!   of a batch cannot put a later value of that batch at or below an earlier one of the same
//!   uid.
//! - The next value after a rebase still passes the I2 check against `max_seq`; when
//!   `high_water + 1` does not fit, the request waits for an advance like any other.
//! - `high_water - base <= offset_limit` always (every value is `base + offset`), so after a
//!   rebase one more value of every uid fits (`offset_limit >= 1`), and a uid repeated more
//!   than `offset_limit` times in one batch just rebases again. It also means a rebase is only
//!   ever triggered by a uid whose `cur_seq` *is* `high_water` (offset at the limit): its own
//!   next value is `high_water + 1` either way.
//! - All or nothing: a batch never rebases unless it is served. Its quick bound (highest
//!   current among its uids + its count) still bounds every value with rebases: the uid that
//!   triggers one is at most that high, and the rebase raises the others at most to it. So the
//!   quick path needs no extra compare. The exact path (`check_exact`, taken when the quick
//!   bound passes `max_seq`) must replay the rebases: after one, the later uids of the batch
//!   start from `high_water`, not from their own `cur_seq`, so a batch can need more than
//!   `current + repeats`. It is refused, changing nothing, if that passes `max_seq`: a rebase
//!   can make a batch wait that would have fitted without it (once per 2^32 values of a uid).
//!
//! Alternatives: rebasing to the lowest offset (subtracting it from every slot) keeps values
//! without gaps but costs a pass over the whole array and still raises the others; a 64-bit
//! fallback array per hot section adds a branch to every read. Gaps are allowed; going back is
//! not, and the rebase is one compare on the hot path.

use crate::ids::{LeaseEpoch, SectionId, Seq};
use crate::section::{SectionRange, MAX_SEQ_CEILING};
use crate::store::SectionAdvance;
use crate::teeth::Tooth;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocConfig {
    pub section_size: u64,
    /// How far each advance raises `max_seq` at least. A section that uses up more than half of
    /// its prefetch headroom while an advance is in flight doubles its own advance size (and
    /// headroom), up to `MAX_STEP_GROWTH` times `step`, and halves it again once that no longer
    /// happens: as Leaf sizes segments by how fast they go, so a hot section does not wait on
    /// the store at every step boundary.
    pub step: u64,
    /// Ask for the next step once fewer than this many values remain above the section's
    /// highest value served (Leaf's double buffer: `0.9 * step` advances after 10% is used).
    pub prefetch_remaining: u64,
}

/// The most a section's advance size grows over `step` (bounds the gap a failover leaves).
pub const MAX_STEP_GROWTH: u64 = 64;

/// Why a request cannot be served now. Each maps to one gRPC status in the server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SeqError {
    #[error("section {0} is not served here")]
    NotOwned(SectionId),
    #[error("section {0} is being loaded")]
    Loading(SectionId),
    #[error("section {0} waits for max_seq to advance")]
    Exhausted(SectionId),
    /// Final: the section's `max_seq` reached `MAX_SEQ_CEILING` (or a request needs values
    /// above it), so waiting cannot help.
    #[error(
        "section {0} reached the ceiling of max_seq 2^63 ({MAX_SEQ_CEILING}); its uids have no \
         sequence numbers left to hand out (an operator raised max_seq too far?)"
    )]
    Ceiling(SectionId),
}

#[derive(Debug)]
struct SectionSeqs {
    lease_epoch: LeaseEpoch,
    /// Invariant: every value handed out for this section is <= max_seq (I2).
    max_seq: u64,
    /// `max_seq` when loaded, or `high_water` at the last rebase: the `cur_seq` of every uid
    /// not touched since.
    base: u64,
    /// `cur_seq - base` per uid (index `uid % section_size`), 0 = untouched (reads as `base`);
    /// never above the table's `offset_limit` (see the module doc: a rebase comes first).
    /// Allocated on first touch; calloc'd, so untouched pages cost no memory.
    cur: Option<Box<[u32]>>,
    /// Highest value handed out in this section, or the loaded `max_seq` (>= base, and
    /// `<= base + offset_limit`). Every uid's `cur_seq` is <= it.
    high_water: u64,
    /// `max_seq` wanted; > max_seq means an advance is needed.
    want: u64,
    in_flight: bool,
    /// This section's advance size and prefetch headroom are `growth` times the configured ones.
    growth: u64,
    /// `high_water` when the advance in flight was sent: what was used while it was out tells
    /// whether the headroom is enough.
    high_water_at_send: u64,
}

impl SectionSeqs {
    fn step(&self, config: &AllocConfig) -> u64 {
        config.step.saturating_mul(self.growth)
    }

    fn prefetch(&self, config: &AllocConfig) -> u64 {
        config.prefetch_remaining.saturating_mul(self.growth)
    }

    /// The highest value this section may hand out now: its committed `max_seq`, but never
    /// above the ceiling (a `max_seq` beyond it can only come from data older than the rule).
    fn limit(&self) -> u64 {
        self.max_seq.min(MAX_SEQ_CEILING)
    }

    /// Whether no advance can ever raise `limit` (the ceiling is reached).
    fn at_ceiling(&self) -> bool {
        self.max_seq >= MAX_SEQ_CEILING
    }

    /// Asks for `max_seq` to reach at least `target` (capped at the ceiling: an advance beyond
    /// it is never wanted, so a section at the ceiling never wants one).
    fn want_at_least(&mut self, target: u64) {
        self.want = self.want.max(target.min(MAX_SEQ_CEILING));
    }

    /// The offset of the uid at `index` (0 when untouched).
    #[inline]
    fn offset(&self, index: usize) -> u32 {
        self.cur.as_ref().map_or(0, |c| c[index])
    }

    /// The next value of the uid at `index`, and whether the section must be rebased before
    /// it is handed out (its offset would pass `offset_limit`). The one compare on the hot
    /// path. After a rebase the value is `high_water + 1`, which the caller checks against
    /// `limit()` like any other.
    #[inline]
    fn next_of(&self, index: usize, offset_limit: u32) -> (u64, bool) {
        let off = self.offset(index);
        if off >= offset_limit && !Tooth::NoRebase.on() {
            (self.high_water.saturating_add(1), true)
        } else {
            (self.base.saturating_add(u64::from(off) + 1), false)
        }
    }

    /// Every uid's `cur_seq` becomes `high_water` (only ever raised: see the module doc).
    fn rebase(&mut self) {
        self.base = self.high_water;
        self.cur = None;
    }

    /// Records `value` (from `next_of`, after the rebase it asked for) as the `cur_seq` of the
    /// uid at `index`.
    #[inline]
    fn set(&mut self, index: usize, value: u64, size: usize, offset_limit: u32) {
        let off = value - self.base;
        assert!(
            Tooth::NoRebase.on() || off <= u64::from(offset_limit),
            "rebase first: offset {off} above the limit {offset_limit}"
        );
        let off = if Tooth::NoRebase.on() {
            // The bug the rebase prevents: the offset wraps (a truncating cast for u32::MAX).
            (off % (u64::from(offset_limit) + 1)) as u32
        } else {
            off as u32
        };
        self.cur.get_or_insert_with(|| vec![0u32; size].into_boxed_slice())[index] = off;
        self.high_water = self.high_water.max(value);
    }
}

/// [`AllocTable::usage`]: sections by state and the bytes allocated for `cur_seq` arrays
/// (allocated lazily, zeroed by the allocator: pages of untouched uids cost address space only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableUsage {
    pub sections_ready: usize,
    pub sections_loading: usize,
    /// Ready sections with a `cur_seq` array (at least one uid touched since loading).
    pub sections_touched: usize,
    /// Bytes of the `cur_seq` offset arrays: 4 per uid of each touched section.
    pub cur_seq_bytes: u64,
    /// Sections rebased since the table was made (a counter: it only grows). A rebase raises
    /// every uid of a section to its `high_water` when one uid's 32-bit offset would overflow.
    pub rebases: u64,
    /// Sections of load answers ignored because a later load of the section had started (a
    /// counter: it only grows). See [`Load`].
    pub stale_loads: u64,
}

/// One load to send to the store: read the committed `max_seq` of the sections of `run`
/// under `lease_epoch`. The table numbers every load it starts (`generation`, unique in the
/// table) and applies an answer only to sections whose current load is still that one.
///
/// Why the epoch is not enough: a section dropped while loading (its load failed, or the store
/// fenced it) and granted again at the same epoch loads again. The first load's answer may
/// still come, late, with an older `max_seq`. Applied while the second load is out, it would
/// make the section ready at a base below values the section already served under this epoch
/// (before the drop), and serve them again (I1). A stale answer that comes after the section
/// is ready is ignored anyway (only loading sections take answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    pub run: SectionRange,
    pub lease_epoch: LeaseEpoch,
    pub generation: u64,
}

#[derive(Debug)]
enum SectionState {
    /// `generation`: the load whose answer this section waits for ([`Load`]).
    Loading {
        lease_epoch: LeaseEpoch,
        generation: u64,
    },
    Ready(SectionSeqs),
}

#[derive(Debug)]
pub struct AllocTable {
    config: AllocConfig,
    sections: BTreeMap<SectionId, SectionState>,
    /// Ready sections with `want > max_seq` and no advance in flight.
    wanting: BTreeSet<SectionId>,
    /// The last grant installed, if `sections` is exactly what it made: an unchanged grant (the
    /// common heartbeat) costs nothing. `None` once a section was dropped on its own
    /// (`drop_section`): the next grant must be installed in full, even an empty one, which
    /// must then drop every section still held (as an empty `Vec` it would be skipped).
    last_grant: Option<Vec<(SectionRange, LeaseEpoch)>>,
    /// The largest offset a `cur_seq` slot holds before its section rebases: `u32::MAX`, or
    /// a small value in tests (`with_offset_limit`) so that rebases happen at small values. Not
    /// a config field: nothing outside tests has a reason to change it.
    offset_limit: u32,
    /// Rebases so far (`TableUsage::rebases`).
    rebases: u64,
    /// The generation of the last load started ([`Load`]); 0 before the first.
    last_load: u64,
    /// Sections of stale load answers ignored so far (`TableUsage::stale_loads`).
    stale_loads: u64,
}

impl AllocTable {
    pub fn new(config: AllocConfig) -> AllocTable {
        assert!(config.section_size > 0 && config.step > 0, "validated by the config");
        AllocTable {
            config,
            sections: BTreeMap::new(),
            wanting: BTreeSet::new(),
            last_grant: Some(Vec::new()),
            offset_limit: u32::MAX,
            rebases: 0,
            last_load: 0,
            stale_loads: 0,
        }
    }

    /// A table whose sections rebase once an offset would pass `offset_limit` (>= 1), so
    /// that tests reach rebases with small values.
    #[cfg(test)]
    fn with_offset_limit(config: AllocConfig, offset_limit: u32) -> AllocTable {
        assert!(offset_limit >= 1, "a rebased uid must have room for one value");
        AllocTable { offset_limit, ..AllocTable::new(config) }
    }

    pub fn config(&self) -> AllocConfig {
        self.config
    }

    fn section_of(&self, uid: u64) -> (SectionId, usize) {
        let size = self.config.section_size;
        (SectionId(uid / size), (uid % size) as usize)
    }

    fn ready(&mut self, section: SectionId) -> Result<&mut SectionSeqs, SeqError> {
        match self.sections.get_mut(&section) {
            None => Err(SeqError::NotOwned(section)),
            Some(SectionState::Loading { .. }) => Err(SeqError::Loading(section)),
            Some(SectionState::Ready(s)) => Ok(s),
        }
    }

    fn ready_ref(&self, section: SectionId) -> Result<&SectionSeqs, SeqError> {
        match self.sections.get(&section) {
            None => Err(SeqError::NotOwned(section)),
            Some(SectionState::Loading { .. }) => Err(SeqError::Loading(section)),
            Some(SectionState::Ready(s)) => Ok(s),
        }
    }

    /// The next sequence of `uid`.
    pub fn next(&mut self, uid: u64) -> Result<u64, SeqError> {
        Ok(self.next_batch(&[uid])?[0])
    }

    /// The next sequence of each uid, all or nothing; a repeated uid gets increasing values in
    /// batch order.
    ///
    /// The common case costs one section lookup per run of consecutive uids in one section:
    /// pass 1 bounds what each section needs by its highest current value plus the batch's
    /// count in it (exact when no uid repeats), and only a batch whose bound does not fit takes
    /// the exact (per-uid) count before deciding to wait.
    pub fn next_batch(&mut self, uids: &[u64]) -> Result<Vec<u64>, SeqError> {
        let runs = self.runs_of(uids);
        // Pass 1: every section ready and its bound within max_seq; change nothing.
        let mut bounds: Vec<Bound> = Vec::with_capacity(runs.len());
        let size = self.config.section_size;
        for run in &runs {
            let s = self.ready_ref(run.section)?;
            let highest = uids[run.begin..run.end]
                .iter()
                .map(|&uid| current_of(s, (uid % size) as usize))
                .max()
                .unwrap_or(0);
            let count = (run.end - run.begin) as u64;
            bounds.push(Bound { section: run.section, highest, count });
        }
        bounds.sort_unstable();
        merge_bounds(&mut bounds);
        let mut fits = true;
        for b in &bounds {
            // Also with the rebases pass 2 may do (module doc: they keep this bound).
            if b.highest.saturating_add(b.count) > self.ready_ref(b.section)?.limit() {
                fits = false;
                break;
            }
        }
        if !fits {
            self.check_exact(uids)?;
        }
        // Pass 2: allocate, rebasing where an offset would pass the limit (the values stay
        // within the bound that pass 1 or `check_exact` checked).
        let (size, offset_limit) = (self.config.section_size as usize, self.offset_limit);
        let mut values = Vec::with_capacity(uids.len());
        let mut rebases = 0;
        for run in &runs {
            let s = self.ready(run.section)?;
            for &uid in &uids[run.begin..run.end] {
                let index = (uid % size as u64) as usize;
                let (value, rebase) = s.next_of(index, offset_limit);
                assert!(value <= s.limit(), "I2: {value} above committed max_seq {}", s.max_seq);
                if rebase {
                    s.rebase();
                    rebases += 1;
                }
                s.set(index, value, size, offset_limit);
                values.push(value);
            }
        }
        self.rebases += rebases;
        self.after_serving(bounds.iter().map(|b| b.section));
        Ok(values)
    }

    /// The next sequence of each uid where it can be served now, 0 where it cannot (section not
    /// served here, loading, waiting for an advance, or at the ceiling); each uid is its own
    /// request. For a client SDK coalescing independent calls: one uid in a hand-over never
    /// holds up the rest.
    pub fn next_each(&mut self, uids: &[u64]) -> Vec<u64> {
        let runs = self.runs_of(uids);
        let (size, config, offset_limit) =
            (self.config.section_size as usize, self.config, self.offset_limit);
        let mut values = Vec::with_capacity(uids.len());
        let mut touched = Vec::with_capacity(runs.len());
        let mut rebases = 0;
        for run in &runs {
            let Ok(s) = self.ready(run.section) else {
                values.extend(std::iter::repeat_n(0, run.end - run.begin));
                continue;
            };
            for &uid in &uids[run.begin..run.end] {
                let index = (uid % size as u64) as usize;
                let (value, rebase) = s.next_of(index, offset_limit);
                if value > s.limit() {
                    // Not served, so not rebased either: nothing changes but the want.
                    let target = value.saturating_add(s.step(&config));
                    s.want_at_least(target);
                    values.push(0);
                    continue;
                }
                if rebase {
                    s.rebase();
                    rebases += 1;
                }
                s.set(index, value, size, offset_limit);
                values.push(value);
            }
            touched.push(run.section);
        }
        self.rebases += rebases;
        touched.sort_unstable();
        touched.dedup();
        self.after_serving(touched);
        values
    }

    /// Consecutive uids of one section, so that each run costs one section lookup.
    fn runs_of(&self, uids: &[u64]) -> Vec<Run> {
        let size = self.config.section_size;
        let mut runs: Vec<Run> = Vec::new();
        for (i, &uid) in uids.iter().enumerate() {
            let section = SectionId(uid / size);
            match runs.last_mut() {
                Some(run) if run.section == section => run.end = i + 1,
                _ => runs.push(Run { section, begin: i, end: i + 1 }),
            }
        }
        runs
    }

    /// The exact check for a batch whose quick bound did not fit: the highest value each
    /// section needs, replaying the batch in order with the rebases pass 2 would do (the same
    /// rule as `SectionSeqs::next_of`); asks for an advance where it exceeds `max_seq`. A need
    /// that no advance can meet (above the ceiling) is `Ceiling`, at once. Changes nothing
    /// else: a refused batch leaves every `cur_seq` as it was.
    fn check_exact(&mut self, uids: &[u64]) -> Result<(), SeqError> {
        /// A section as pass 2 would leave it so far: `generation` counts its rebases.
        struct Replay {
            base: u64,
            high_water: u64,
            generation: u64,
            need: u64,
        }
        let offset_limit = u64::from(self.offset_limit);
        let mut replays: BTreeMap<SectionId, Replay> = BTreeMap::new();
        // Each uid's `cur_seq` after its last value in the batch, and the generation then.
        let mut seen: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for &uid in uids {
            let (section, index) = self.section_of(uid);
            let s = self.ready_ref(section)?;
            let r = replays.entry(section).or_insert(Replay {
                base: s.base,
                high_water: s.high_water,
                generation: 0,
                need: 0,
            });
            let current = match seen.get(&uid) {
                Some(&(value, generation)) if generation == r.generation => value,
                _ if r.generation > 0 => r.base, // rebased since: reads as the new base
                _ => current_of(s, index),
            };
            let value = if current.saturating_sub(r.base) >= offset_limit && !Tooth::NoRebase.on() {
                r.base = r.high_water;
                r.generation += 1;
                r.high_water.saturating_add(1)
            } else {
                current.saturating_add(1)
            };
            r.high_water = r.high_water.max(value);
            r.need = r.need.max(value);
            seen.insert(uid, (value, r.generation));
        }
        let need: BTreeMap<SectionId, u64> =
            replays.into_iter().map(|(s, r)| (s, r.need)).collect();
        let (mut short, mut ceiling) = (None, None);
        for (&section, &value) in &need {
            let config = self.config;
            let s = self.ready(section)?;
            if value > s.limit() {
                // Ask for as much as the ceiling allows even when it will not be enough: other
                // requests for this section may still fit below it.
                let target = value.max(s.max_seq).saturating_add(s.step(&config));
                s.want_at_least(target);
                if s.at_ceiling() || value > MAX_SEQ_CEILING {
                    ceiling.get_or_insert(section);
                } else {
                    short.get_or_insert(section);
                }
            }
        }
        if short.is_some() || ceiling.is_some() {
            self.refresh_wanting(need.keys().copied());
        }
        match (ceiling, short) {
            (Some(section), _) => Err(SeqError::Ceiling(section)),
            (None, Some(section)) => Err(SeqError::Exhausted(section)),
            (None, None) => Ok(()),
        }
    }

    /// Prefetch (ask for the next step before anyone has to wait for it) and bookkeeping of
    /// the sections a request served from.
    fn after_serving(&mut self, sections: impl IntoIterator<Item = SectionId> + Clone) {
        let config = self.config;
        for section in sections.clone() {
            if let Some(SectionState::Ready(s)) = self.sections.get_mut(&section) {
                if s.limit().saturating_sub(s.high_water) < s.prefetch(&config) {
                    let target = s.max_seq.saturating_add(s.step(&config));
                    s.want_at_least(target);
                }
            }
        }
        self.refresh_wanting(sections);
    }

    /// The lease epoch `section` is served under here, if it is ready (granted, loaded): the
    /// owner of a section also issues the `rongcloud` ids of the sessions routed to it
    /// (`allocsvr/src/ids/sessions.rs`), under the same lease and the same fencing.
    pub fn serving_epoch(&self, section: SectionId) -> Result<LeaseEpoch, SeqError> {
        self.ready_ref(section).map(|s| s.lease_epoch)
    }

    /// The current sequence of `uid` without allocating: >= every value handed out for it and
    /// < the next one; 0 only if its section was never advanced.
    pub fn current(&self, uid: u64) -> Result<u64, SeqError> {
        let (section, index) = self.section_of(uid);
        match self.sections.get(&section) {
            None => Err(SeqError::NotOwned(section)),
            Some(SectionState::Loading { .. }) => Err(SeqError::Loading(section)),
            Some(SectionState::Ready(s)) => Ok(current_of(s, index)),
        }
    }

    /// Installs a grant: the runs this AllocSvr may serve, with lease epochs. Sections not in it
    /// are dropped; a section with a new epoch is reloaded. Returns the loads to send (runs of
    /// adjacent sections of one epoch, each with its own generation: see [`Load`]).
    pub fn grant(&mut self, runs: &[(SectionRange, LeaseEpoch)]) -> Vec<Load> {
        if self.last_grant.as_deref() == Some(runs) {
            return Vec::new();
        }
        self.last_grant = Some(runs.to_vec());
        let mut granted: BTreeMap<SectionId, LeaseEpoch> = BTreeMap::new();
        for &(r, e) in runs {
            for s in r.begin().0..r.end().0 {
                granted.insert(SectionId(s), e);
            }
        }
        self.sections.retain(|s, state| {
            let epoch = match state {
                SectionState::Loading { lease_epoch, .. } => *lease_epoch,
                SectionState::Ready(seqs) => seqs.lease_epoch,
            };
            granted.get(s) == Some(&epoch)
        });
        let mut to_load: Vec<Load> = Vec::new();
        for (s, e) in granted {
            if self.sections.contains_key(&s) {
                continue;
            }
            let generation = match to_load.last_mut() {
                Some(load) if load.lease_epoch == e && load.run.end() == s => {
                    load.run =
                        SectionRange::new(load.run.begin(), SectionId(s.0 + 1)).expect("grows");
                    load.generation
                }
                _ => {
                    self.last_load += 1;
                    let run = SectionRange::new(s, SectionId(s.0 + 1)).expect("one");
                    to_load.push(Load { run, lease_epoch: e, generation: self.last_load });
                    self.last_load
                }
            };
            self.sections.insert(s, SectionState::Loading { lease_epoch: e, generation });
        }
        let sections = &self.sections;
        self.wanting.retain(|s| sections.contains_key(s));
        to_load
    }

    /// The answer to `load` arrived: the committed `max_seq` of its sections (`values` lists
    /// the advanced sections; the rest are 0). Applied only to the sections still loading under
    /// this load (same epoch and generation); a section whose current load is a later one is
    /// left loading and counted in `TableUsage::stale_loads`. Returns how many sections it made
    /// ready (0: the whole answer was stale or came for sections no longer held).
    pub fn loaded(&mut self, load: &Load, values: &BTreeMap<SectionId, u64>) -> usize {
        let mut ready = 0;
        for s in load.run.begin().0..load.run.end().0 {
            let s = SectionId(s);
            let Some(state) = self.sections.get_mut(&s) else { continue };
            let SectionState::Loading { lease_epoch, generation } = *state else { continue };
            if lease_epoch != load.lease_epoch {
                continue;
            }
            if generation != load.generation && !Tooth::AcceptStaleLoad.on() {
                self.stale_loads += 1;
                continue;
            }
            let max_seq = values.get(&s).copied().unwrap_or(0);
            *state = SectionState::Ready(SectionSeqs {
                lease_epoch,
                max_seq,
                base: max_seq,
                cur: None,
                high_water: max_seq,
                want: 0,
                in_flight: false,
                growth: 1,
                high_water_at_send: max_seq,
            });
            ready += 1;
        }
        ready
    }

    /// `load` failed (the store did not answer): its sections that still wait for it are
    /// dropped, so that the next grant (even an unchanged one) loads them again. Sections whose
    /// current load is a later one, or that are ready, are left as they are.
    pub fn load_failed(&mut self, load: &Load) {
        for s in load.run.begin().0..load.run.end().0 {
            let s = SectionId(s);
            if matches!(self.sections.get(&s), Some(SectionState::Loading { lease_epoch, generation })
                if *lease_epoch == load.lease_epoch && *generation == load.generation)
            {
                self.drop_section(s);
            }
        }
    }

    /// Advances to send (marked in flight), at most `max` of them.
    pub fn take_wanted(&mut self, max: usize) -> Vec<SectionAdvance> {
        let picked: Vec<SectionId> = self.wanting.iter().take(max).copied().collect();
        let mut out = Vec::with_capacity(picked.len());
        for section in picked {
            self.wanting.remove(&section);
            if let Some(SectionState::Ready(s)) = self.sections.get_mut(&section) {
                s.in_flight = true;
                s.high_water_at_send = s.high_water;
                out.push(SectionAdvance {
                    section,
                    max_seq: Seq(s.want),
                    lease_epoch: s.lease_epoch,
                });
            }
        }
        out
    }

    /// The store committed `max_seq` for a section (or refused: `committed` = None).
    pub fn advanced(
        &mut self,
        section: SectionId,
        lease_epoch: LeaseEpoch,
        committed: Option<u64>,
    ) {
        if let Some(SectionState::Ready(s)) = self.sections.get_mut(&section) {
            if s.lease_epoch == lease_epoch {
                s.in_flight = false;
                if let Some(v) = committed {
                    s.max_seq = s.max_seq.max(v);
                    let used = s.high_water.saturating_sub(s.high_water_at_send);
                    let prefetch = s.prefetch(&self.config);
                    if prefetch == 0 {
                        // No prefetch configured: advances happen on exhaustion, as asked.
                    } else if used > prefetch / 2 {
                        s.growth = s.growth.saturating_mul(2).min(MAX_STEP_GROWTH);
                    } else if used < prefetch / 8 {
                        s.growth = (s.growth / 2).max(1);
                    }
                    // A want left over from a request that came while the advance was out is
                    // just above the new max_seq: make the next advance a whole step, not one
                    // store write for a few values.
                    if s.want > s.max_seq {
                        let target = s.max_seq.saturating_add(s.step(&self.config));
                        s.want_at_least(target);
                    }
                }
            }
        }
        self.refresh_wanting([section]);
    }

    /// The store says we no longer own `section` (fenced): stop serving it at once.
    pub fn drop_section(&mut self, section: SectionId) {
        self.sections.remove(&section);
        self.wanting.remove(&section);
        self.last_grant = None; // the next grant must be installed again in full
    }

    /// The committed `max_seq` this table serves under, if the section is ready (for tests).
    #[cfg(test)]
    fn max_seq_of(&self, section: SectionId) -> Option<u64> {
        self.ready_ref(section).ok().map(|s| s.max_seq)
    }

    pub fn has_wanted(&self) -> bool {
        !self.wanting.is_empty()
    }

    /// Sections held (loading or ready) and touched (with a `cur_seq` array).
    pub fn counts(&self) -> (usize, usize) {
        let touched = self
            .sections
            .values()
            .filter(|s| matches!(s, SectionState::Ready(SectionSeqs { cur: Some(_), .. })))
            .count();
        (self.sections.len(), touched)
    }

    /// What the table holds, for metrics: sections by state and the memory of `cur_seq` arrays.
    pub fn usage(&self) -> TableUsage {
        let mut u = TableUsage::default();
        for state in self.sections.values() {
            match state {
                SectionState::Loading { .. } => u.sections_loading += 1,
                SectionState::Ready(s) => {
                    u.sections_ready += 1;
                    if let Some(cur) = &s.cur {
                        u.sections_touched += 1;
                        u.cur_seq_bytes += std::mem::size_of_val::<[u32]>(cur) as u64;
                    }
                }
            }
        }
        u.rebases = self.rebases;
        u.stale_loads = self.stale_loads;
        u
    }

    fn refresh_wanting(&mut self, sections: impl IntoIterator<Item = SectionId>) {
        for section in sections {
            if let Some(SectionState::Ready(s)) = self.sections.get(&section) {
                if s.want > s.max_seq && !s.in_flight {
                    self.wanting.insert(section);
                } else {
                    self.wanting.remove(&section);
                }
            }
        }
    }
}

/// Uids `begin..end` of a request, all in `section`.
struct Run {
    section: SectionId,
    begin: usize,
    end: usize,
}

/// A section's share of a batch: its highest current value among the batch's uids and how
/// many of the batch's uids it holds. `highest + count` bounds the highest value it will hand
/// out (exact when no uid repeats).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Bound {
    section: SectionId,
    highest: u64,
    count: u64,
}

/// Merges the entries of each section (input sorted by section).
fn merge_bounds(bounds: &mut Vec<Bound>) {
    bounds.dedup_by(|later, kept| {
        if later.section == kept.section {
            kept.highest = kept.highest.max(later.highest);
            kept.count = kept.count.saturating_add(later.count);
            true
        } else {
            false
        }
    });
}

/// The `cur_seq` of the uid at `index`: `base` plus its offset.
fn current_of(s: &SectionSeqs, index: usize) -> u64 {
    s.base.saturating_add(u64::from(s.offset(index)))
}

#[cfg(test)]
mod tests;
