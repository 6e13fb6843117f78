//! The clock leases are measured on: `CLOCK_BOOTTIME`, which keeps counting while the host is
//! suspended. `std::time::Instant` (and Tokio's) is `CLOCK_MONOTONIC` on Linux, which stops
//! during a suspend: a host suspended past its lease would wake believing the lease still valid.
//! Like `CLOCK_MONOTONIC`, `CLOCK_BOOTTIME` never jumps with the wall clock (NTP, `date -s`).
//!
//! The one place the clock is chosen is [`lease_clock`]: the `lease-on-wall-clock` teeth switch
//! (`seqsvr_core::teeth`) reads `CLOCK_REALTIME` there instead, to prove the nemesis notices.

use seqsvr_core::teeth::Tooth;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time on `CLOCK_BOOTTIME`: the time since boot, suspends included. Compare,
/// subtract and add like `Instant`; reading it costs one vDSO call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BootInstant(Duration);

impl BootInstant {
    /// Now, on `CLOCK_BOOTTIME`.
    pub fn now() -> BootInstant {
        BootInstant(boottime_now())
    }

    /// The instant `since_boot` after boot (for tests and for instants carried as numbers).
    pub fn from_since_boot(since_boot: Duration) -> BootInstant {
        BootInstant(since_boot)
    }

    /// Time since boot, suspends included.
    pub fn since_boot(self) -> Duration {
        self.0
    }

    /// Time passed since `self` (zero if `self` is in the future).
    pub fn elapsed(self) -> Duration {
        BootInstant::now().duration_since(self)
    }

    /// `self - earlier`, zero if `earlier` is later (like `Instant::duration_since` today).
    pub fn duration_since(self, earlier: BootInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// `self + d`, None on overflow.
    pub fn checked_add(self, d: Duration) -> Option<BootInstant> {
        self.0.checked_add(d).map(BootInstant)
    }

    /// `self - d`, None if that is before boot.
    pub fn checked_sub(self, d: Duration) -> Option<BootInstant> {
        self.0.checked_sub(d).map(BootInstant)
    }
}

/// Saturates instead of overflowing (about 584 years after boot).
impl Add<Duration> for BootInstant {
    type Output = BootInstant;

    fn add(self, d: Duration) -> BootInstant {
        BootInstant(self.0.saturating_add(d))
    }
}

/// `self.duration_since(earlier)`: zero if `earlier` is later.
impl Sub<BootInstant> for BootInstant {
    type Output = Duration;

    fn sub(self, earlier: BootInstant) -> Duration {
        self.duration_since(earlier)
    }
}

/// The clock [`BootInstant`] reads: `CLOCK_BOOTTIME`, except under the deliberately broken
/// `lease-on-wall-clock` teeth switch, which reads the wall clock (`CLOCK_REALTIME`).
#[inline]
pub fn lease_clock() -> libc::clockid_t {
    if Tooth::LeaseOnWallClock.on() {
        libc::CLOCK_REALTIME
    } else {
        libc::CLOCK_BOOTTIME
    }
}

/// Time since boot on `CLOCK_BOOTTIME`, suspends included ([`lease_clock`]).
pub fn boottime_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes nothing else.
    let clock = lease_clock();
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    // CLOCK_BOOTTIME exists since Linux 2.6.39 and the pointer is valid: it cannot fail.
    assert_eq!(rc, 0, "clock_gettime({clock}) failed: {}", std::io::Error::last_os_error());
    assert!(ts.tv_sec >= 0 && (0..1_000_000_000).contains(&ts.tv_nsec), "bad timespec {ts:?}");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The wall clock (`CLOCK_REALTIME`) in ms since the Unix epoch: the time id schemes encode. It
/// may step back (NTP, an operator, libfaketime in the nemesis): the id generator copes with
/// that (`seqsvr_core::idscheme::Generator`); leases never read it. 0 before 1970.
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(clock: libc::clockid_t) -> Duration {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        assert_eq!(unsafe { libc::clock_gettime(clock, &mut ts) }, 0);
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    #[test]
    fn reads_clock_boottime() {
        if Tooth::LeaseOnWallClock.on() {
            assert_eq!(lease_clock(), libc::CLOCK_REALTIME, "the teeth build reads the wall clock");
            return;
        }
        assert_eq!(lease_clock(), libc::CLOCK_BOOTTIME);
        let before = raw(libc::CLOCK_BOOTTIME);
        let now = BootInstant::now();
        let after = raw(libc::CLOCK_BOOTTIME);
        assert!(
            before <= now.since_boot() && now.since_boot() <= after,
            "{before:?} {now:?} {after:?}"
        );
        // Boot time is never behind monotonic time (it adds the time spent suspended).
        assert!(now.since_boot() + Duration::from_millis(1) >= raw(libc::CLOCK_MONOTONIC));
    }

    #[test]
    fn is_monotonic_and_measures_sleeps() {
        let start = BootInstant::now();
        let mut last = start;
        for _ in 0..10_000 {
            let now = BootInstant::now();
            assert!(now >= last);
            last = now;
        }
        std::thread::sleep(Duration::from_millis(20));
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(20), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
        assert!(BootInstant::now().duration_since(start) >= elapsed);
    }

    #[test]
    fn arithmetic_saturates_or_checks() {
        let t = BootInstant::from_since_boot(Duration::from_secs(100));
        let later = t.checked_add(Duration::from_millis(2500)).unwrap();
        assert_eq!(later.duration_since(t), Duration::from_millis(2500));
        assert_eq!(t.duration_since(later), Duration::ZERO, "earlier minus later is zero");
        assert_eq!(later - t, Duration::from_millis(2500));
        assert!(t < later);
        assert_eq!(t + Duration::from_millis(2500), later);
        assert_eq!(t.checked_sub(Duration::from_secs(101)), None);
        let end = BootInstant::from_since_boot(Duration::MAX);
        assert_eq!(end.checked_add(Duration::from_nanos(1)), None);
        assert_eq!(end + Duration::from_secs(1), end);
        let future = BootInstant::now() + Duration::from_secs(3600);
        assert_eq!(future.elapsed(), Duration::ZERO);
    }
}
