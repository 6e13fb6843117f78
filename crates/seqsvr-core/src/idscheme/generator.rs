//! The per-worker generator: which (time, sequence) to issue next, given a clock reading.
//!
//! Pure: the caller reads the clock, converts it with [`Layout::units_at`] and passes it in,
//! together with the persisted high-water mark (issue 10 item 3: "timestamps up to T may have
//! been used"). The rules, in order:
//! - Start strictly above `floor`, the previous holder's high-water mark: the first stamp opens
//!   a unit > `floor`, ahead of the clock if need be (so a restart with the clock set back cannot
//!   repeat an id).
//! - Never go back: a clock reading at or below the last issued unit keeps issuing in that unit
//!   (the next sequence number), however far back the clock stepped.
//! - When that unit's sequence is used up, borrow the next unit ahead of the clock, as
//!   UidGenerator's CachedUidGenerator does (seed 001 §6.2) and RFC 9562 §6.2 allows for a
//!   counter rollover, but at most `max_ahead_units` ahead of the clock reading; beyond that,
//!   answer [`Next::WaitUntil`] instead of repeating a stamp.
//! - Never issue a time above the caller's high-water mark: answer [`Next::RaiseHighWater`].
//!
//! Stamps strictly increase as (time, sequence) pairs, so the ids of one worker strictly
//! increase in every scheme where the fields between time and sequence are fixed per worker or
//! session. In `weibo` the business number sits between them and varies per request: one
//! worker's ids then increase per business number, and its (time, sequence) stamps increase
//! across all of them (what `seqsvr-check`'s id checker verifies).

use super::Layout;

/// The time unit and sequence number of one id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    pub time: u64,
    pub sequence: u64,
}

/// What to do for the next id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Issue an id with this stamp (the generator has recorded it).
    Issue(Stamp),
    /// The sequence of every unit up to `max_ahead_units` ahead of the clock is used: call
    /// again once the clock reads this unit. Always later than the reading passed in.
    WaitUntil(u64),
    /// The next stamp's time is above the high-water mark passed in: persist a mark of at least
    /// this unit and call again. Nothing was issued.
    RaiseHighWater(u64),
}

/// Consecutive stamps of one unit: sequences `first_sequence .. first_sequence + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub time: u64,
    pub first_sequence: u64,
    pub len: u64,
}

impl Run {
    /// The run's stamps, in order.
    pub fn stamps(self) -> impl Iterator<Item = Stamp> {
        (self.first_sequence..self.first_sequence + self.len)
            .map(move |sequence| Stamp { time: self.time, sequence })
    }
}

/// What [`Generator::next_run`] answers: [`Next`] for a run of stamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextRun {
    /// Issue these stamps (the generator has recorded them); `len >= 1`.
    Issue(Run),
    /// As [`Next::WaitUntil`]: nothing issued.
    WaitUntil(u64),
    /// As [`Next::RaiseHighWater`]: nothing issued.
    RaiseHighWater(u64),
}

/// The time field has no unit left for the next stamp.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the time field ends at unit {max_time}; the next id needs unit {wanted}")]
pub struct GenError {
    pub max_time: u64,
    pub wanted: u64,
}

/// Counters for logging and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenStats {
    pub issued: u64,
    /// Units opened ahead of the clock because the previous unit's sequence ran out.
    pub borrowed_units: u64,
    /// Clock readings lower than the reading before them.
    pub clock_back_events: u64,
    /// The most by which an issued time ran ahead of the clock reading it was issued at (by
    /// borrowing, by starting above the floor, or by the clock stepping back).
    pub max_lead: u64,
}

/// The state of one worker id (or one RongCloud session): the last stamp issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generator {
    max_time: u64,
    max_seq: u64,
    max_ahead: u64,
    floor: u64,
    /// The last stamp issued; `(floor, max_seq)` before the first, as if the floor's unit were
    /// used up, so the first stamp opens a unit above the floor.
    last: Stamp,
    issued_any: bool,
    last_reading: Option<u64>,
    stats: GenStats,
}

impl Generator {
    /// A generator for `layout` that issues only times above `floor` and borrows at most
    /// `max_ahead_units` units ahead of the clock.
    pub fn new(layout: &Layout, floor: u64, max_ahead_units: u64) -> Result<Generator, GenError> {
        let max_time = layout.max_time();
        if floor >= max_time {
            return Err(GenError { max_time, wanted: floor.saturating_add(1) });
        }
        let max_seq = layout.max_sequence();
        Ok(Generator {
            max_time,
            max_seq,
            max_ahead: max_ahead_units,
            floor,
            last: Stamp { time: floor, sequence: max_seq },
            issued_any: false,
            last_reading: None,
            stats: GenStats::default(),
        })
    }

    /// The next stamp at clock reading `now` (units since the layout's epoch), issuing no time
    /// above `high_water`.
    pub fn next(&mut self, now: u64, high_water: u64) -> Result<Next, GenError> {
        if self.last_reading.is_some_and(|before| now < before) {
            self.stats.clock_back_events += 1;
        }
        self.last_reading = Some(now);
        let stamp = if now > self.last.time {
            // The clock moved past the last unit: open the clock's unit.
            Stamp { time: now, sequence: 0 }
        } else if self.last.sequence < self.max_seq {
            // Same unit, or the clock is behind it: keep issuing in it.
            Stamp { time: self.last.time, sequence: self.last.sequence + 1 }
        } else {
            // The last unit is used up and the clock has not passed it: borrow the next one.
            // `last.time <= max_time < u64::MAX`, so this cannot overflow.
            let time = self.last.time + 1;
            if time <= self.max_time && time - now > self.max_ahead {
                return Ok(Next::WaitUntil(time - self.max_ahead));
            }
            Stamp { time, sequence: 0 }
        };
        if stamp.time > self.max_time {
            return Err(GenError { max_time: self.max_time, wanted: stamp.time });
        }
        if stamp.time > high_water {
            return Ok(Next::RaiseHighWater(stamp.time));
        }
        if stamp.sequence == 0 && stamp.time > now {
            self.stats.borrowed_units += 1;
        }
        Ok(self.issue(now, stamp))
    }

    /// Up to `max` stamps at clock reading `now` in one step: exactly what `max` calls of
    /// [`Generator::next`] with the same reading would issue until the first one that opens
    /// another unit (or would wait, raise the mark or fail), as one run of consecutive
    /// sequence numbers in one unit. A caller issuing many ids packs each run's ids without
    /// asking the generator per id. `max` must be at least 1.
    pub fn next_run(&mut self, now: u64, high_water: u64, max: u64) -> Result<NextRun, GenError> {
        assert!(max > 0, "a run of at least one stamp is asked for");
        let first = match self.next(now, high_water)? {
            Next::Issue(stamp) => stamp,
            Next::WaitUntil(unit) => return Ok(NextRun::WaitUntil(unit)),
            Next::RaiseHighWater(unit) => return Ok(NextRun::RaiseHighWater(unit)),
        };
        // The calls after the first would each take the "same unit" branch (the first stamp's
        // unit is at or above `now`) until the unit's sequence runs out; the time is checked.
        let more = (max - 1).min(self.max_seq - first.sequence);
        if more > 0 {
            let last = Stamp { time: first.time, sequence: first.sequence + more };
            assert!(last > self.last, "a run only goes up");
            self.last = last;
            self.stats.issued += more;
        }
        Ok(NextRun::Issue(Run { time: first.time, first_sequence: first.sequence, len: more + 1 }))
    }

    fn issue(&mut self, now: u64, stamp: Stamp) -> Next {
        assert!(stamp > self.last && stamp.time > self.floor, "stamps only go up, above the floor");
        self.last = stamp;
        self.issued_any = true;
        self.stats.issued += 1;
        self.stats.max_lead = self.stats.max_lead.max(stamp.time.saturating_sub(now));
        Next::Issue(stamp)
    }

    /// The last stamp issued, if any.
    pub fn last_issued(&self) -> Option<Stamp> {
        self.issued_any.then_some(self.last)
    }

    /// The floor this generator started above.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    pub fn max_ahead_units(&self) -> u64 {
        self.max_ahead
    }

    pub fn stats(&self) -> GenStats {
        self.stats
    }
}
