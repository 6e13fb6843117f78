//! Id schemes (issue 10, item 5): the bit layouts of globally unique, time-ordered ids, their
//! validation, encoding, decoding and text forms, and the per-worker generator state machine
//! ([`Generator`]). Pure: no I/O and no clock reads — every "now" is passed in.
//!
//! The six schemes, most significant bits first:
//! - `snowflake` (Twitter): 1 sign + 41-bit ms + 10-bit worker + 12-bit sequence, 64 bits.
//! - `uid-generator` (Baidu, seed 001): 1 sign + 28-bit **seconds** + 22-bit worker + 13-bit
//!   sequence by default, every width and the epoch configurable. Its default epoch 2016-05-20
//!   with 28 bits of seconds ran out on 2024-11-20; [`LayoutSpec::load`] refuses it now.
//! - `weibo` (seed 003): 1 sign + 41-bit ms + 5-bit server + 5-bit business + 12-bit sequence. The
//!   server number is the [`Fields::worker`] field; the business number is given per request.
//! - `rongcloud` (seed 000): 80 bits = 42-bit ms + 12-bit sequence + 4-bit session type + 22-bit
//!   session-id hash, written as 16 base-32 characters in four dash-separated groups
//!   (see [`Layout::format`]). It has no worker field: one owner per (type, hash) keeps it unique.
//! - `uuidv7` (RFC 9562 §5.7): 48-bit Unix ms + version 7 + 12-bit `rand_a` used as a counter
//!   (§6.2 method 1, "Fixed Bit-Length Dedicated Counter") + variant `0b10` + 62-bit `rand_b`,
//!   written in the canonical 8-4-4-4-12 lowercase hex form (§4).
//! - `js53` (issue 31): JavaScript-safe ids, 53 bits = 41-bit ms + 5-bit worker + 7-bit sequence
//!   by default, from 2025-01-01 ([`JS53_EPOCH_MS`]), every width, the unit and the epoch
//!   configurable. JavaScript numbers are exact only up to 2^53 − 1
//!   ([`JS_MAX_SAFE_INTEGER`]); a 63-bit id of today already passes it and a browser rounds it
//!   to another id. The widths must sum to 53, so every id of the layout's whole life — its last
//!   time unit, 2^time_bits − 1 units after the epoch, with the largest worker and sequence —
//!   is at most 2^53 − 1 ([`Layout::max_id`]); any other sum is refused at load
//!   ([`LayoutError::NotJsSafe`]).
//!
//! Every timestamp field counts time units ([`TimeUnit`]) since the layout's epoch (ms since the
//! Unix epoch). A layout is validated when loaded: its widths sum to the id size, time and
//! sequence have at least one bit, the epoch is not in the future and the time field has not run
//! out ([`Layout::lifetime_years`], [`Layout::runs_out_at_ms`]).
//!
//! Choices where the sources leave room:
//! - Epochs are UTC midnights (seeds 001 and 003 parse theirs in the server's local time).
//! - UUIDv7's counter starts at 0 in each new millisecond rather than at a random value
//!   (§6.2 allows either; 0 leaves the most room before a rollover), and `rand_b` is the
//!   caller's: the generator picks no random bits. Uniqueness across workers is the caller's
//!   choice of `rand_b` (e.g. a leased worker id in its top bits, §6.4, plus random bits).
//! - RongCloud's text alphabet follows seed 000's description, not its samples: see
//!   [`RONGCLOUD_ALPHABET`].

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

mod generator;
#[cfg(test)]
mod tests;
mod text;

pub use generator::{GenError, GenStats, Generator, Next, NextRun, Run, Stamp};
pub use text::{rfc3339_ms, unix_ms_of_date, RONGCLOUD_ALPHABET};

/// Twitter Snowflake's epoch, 2010-11-04T01:42:54.657Z: the default for `snowflake`.
pub const TWITTER_EPOCH_MS: u64 = 1_288_834_974_657;
/// UidGenerator's default epoch, 2016-05-20T00:00:00Z (seed 001): the default for
/// `uid-generator`. With the default 28 bits of seconds it ran out on 2024-11-20, so the
/// default `uid-generator` layout is refused: give a later epoch or more time bits.
pub const UID_GENERATOR_EPOCH_MS: u64 = 1_463_702_400_000;
/// Seed 003's `OFFSET_TIME` "2021-11-12 00:00:00", taken as UTC (the PHP took local time).
pub const WEIBO_EPOCH_MS: u64 = 1_636_675_200_000;
/// `js53`'s default epoch, 2025-01-01T00:00:00Z: its 41 bits of ms then last until 2094.
pub const JS53_EPOCH_MS: u64 = 1_735_689_600_000;
/// The largest integer a JavaScript number (an IEEE 754 double) holds exactly,
/// `Number.MAX_SAFE_INTEGER`: every `js53` id is at most this.
pub const JS_MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;
/// Bits in a `js53` id.
pub const JS53_BITS: u32 = 53;

const MS_PER_YEAR: f64 = 365.2425 * 86_400_000.0;

/// The six id schemes, by their config names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Scheme {
    #[serde(rename = "snowflake")]
    Snowflake,
    #[serde(rename = "uid-generator")]
    UidGenerator,
    #[serde(rename = "weibo")]
    Weibo,
    #[serde(rename = "rongcloud")]
    RongCloud,
    #[serde(rename = "uuidv7")]
    UuidV7,
    #[serde(rename = "js53")]
    Js53,
}

impl Scheme {
    pub const ALL: [Scheme; 6] = [
        Scheme::Snowflake,
        Scheme::UidGenerator,
        Scheme::Weibo,
        Scheme::RongCloud,
        Scheme::UuidV7,
        Scheme::Js53,
    ];

    /// The name in the cluster config and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Snowflake => "snowflake",
            Scheme::UidGenerator => "uid-generator",
            Scheme::Weibo => "weibo",
            Scheme::RongCloud => "rongcloud",
            Scheme::UuidV7 => "uuidv7",
            Scheme::Js53 => "js53",
        }
    }

    /// Bits in one id: 64 (held in a `u64`, the top one the sign), 53 (`js53`, also held in a
    /// `u64`), 80 (RongCloud) or 128 (UUID).
    pub fn id_bits(self) -> u32 {
        match self {
            Scheme::Snowflake | Scheme::UidGenerator | Scheme::Weibo => 64,
            Scheme::Js53 => JS53_BITS,
            Scheme::RongCloud => 80,
            Scheme::UuidV7 => 128,
        }
    }

    /// Whether the scheme's widths are the config's to choose (`time_bits`, `worker_bits`,
    /// `seq_bits`); the others' are fixed by their sources.
    pub fn takes_widths(self) -> bool {
        matches!(self, Scheme::UidGenerator | Scheme::Js53)
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheme {
    type Err = LayoutError;
    fn from_str(s: &str) -> Result<Scheme, LayoutError> {
        Scheme::ALL
            .into_iter()
            .find(|scheme| scheme.name() == s)
            .ok_or_else(|| LayoutError::UnknownScheme(s.to_string()))
    }
}

/// The unit of a layout's time field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TimeUnit {
    #[serde(rename = "ms")]
    Millis,
    #[serde(rename = "s")]
    Seconds,
}

impl TimeUnit {
    pub fn ms(self) -> u64 {
        match self {
            TimeUnit::Millis => 1,
            TimeUnit::Seconds => 1_000,
        }
    }
}

impl fmt::Display for TimeUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeUnit::Millis => "ms",
            TimeUnit::Seconds => "s",
        })
    }
}

/// One bit field of a layout. `Sign`, `Version` and `Variant` hold constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// Always 0, so a 64-bit id is a positive `i64` (Snowflake, seeds 001 and 003).
    Sign,
    Time,
    /// Snowflake/UidGenerator worker id; Weibo server number (seed 003's `serverId`).
    Worker,
    /// Weibo business number (seed 003's `BITS_WORKER`, "业务号").
    Business,
    SessionType,
    SessionHash,
    Sequence,
    /// UUID version, always 7 (RFC 9562 §4.2).
    Version,
    /// UUID variant, always `0b10` (RFC 9562 §4.1).
    Variant,
    /// UUIDv7 `rand_b`.
    Rand,
}

impl Part {
    fn constant(self) -> Option<u64> {
        match self {
            Part::Sign => Some(0),
            Part::Version => Some(7),
            Part::Variant => Some(0b10),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Part::Sign => "sign",
            Part::Time => "time",
            Part::Worker => "worker",
            Part::Business => "business",
            Part::SessionType => "session type",
            Part::SessionHash => "session hash",
            Part::Sequence => "sequence",
            Part::Version => "version",
            Part::Variant => "variant",
            Part::Rand => "rand_b",
        }
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The variable parts of one id. A part the scheme does not have must be 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Fields {
    /// Time units since the layout's epoch.
    pub time: u64,
    /// Snowflake/UidGenerator worker id, Weibo server number.
    pub worker: u64,
    /// Weibo business number.
    pub business: u64,
    /// RongCloud session type (private chat, group, chat room, ...).
    pub session_type: u64,
    /// RongCloud session-id hash (its low 22 bits, seed 000 step 4).
    pub session_hash: u64,
    pub sequence: u64,
    /// UUIDv7 `rand_b` (62 bits).
    pub rand: u64,
}

impl Fields {
    /// Every part that is a field here (not a constant), in declaration order.
    const PARTS: [Part; 7] = [
        Part::Time,
        Part::Worker,
        Part::Business,
        Part::SessionType,
        Part::SessionHash,
        Part::Sequence,
        Part::Rand,
    ];

    fn get(&self, part: Part) -> u64 {
        match part {
            Part::Time => self.time,
            Part::Worker => self.worker,
            Part::Business => self.business,
            Part::SessionType => self.session_type,
            Part::SessionHash => self.session_hash,
            Part::Sequence => self.sequence,
            Part::Rand => self.rand,
            Part::Sign | Part::Version | Part::Variant => 0,
        }
    }

    fn set(&mut self, part: Part, value: u64) {
        match part {
            Part::Time => self.time = value,
            Part::Worker => self.worker = value,
            Part::Business => self.business = value,
            Part::SessionType => self.session_type = value,
            Part::SessionHash => self.session_hash = value,
            Part::Sequence => self.sequence = value,
            Part::Rand => self.rand = value,
            Part::Sign | Part::Version | Part::Variant => {}
        }
    }
}

/// Why a layout cannot be loaded.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LayoutError {
    #[error(
        "unknown id scheme {0:?}: expected one of snowflake, uid-generator, weibo, rongcloud, \
         uuidv7, js53"
    )]
    UnknownScheme(String),
    #[error(
        "{0}'s widths are fixed; only uid-generator and js53 take time_bits, worker_bits and \
         seq_bits"
    )]
    FixedWidths(Scheme),
    #[error("uuidv7's epoch (the Unix epoch) and unit (ms) are fixed by RFC 9562 §5.7")]
    FixedTime,
    #[error("{scheme}: the widths ({widths}) sum to {sum} bits, but its ids have {bits}")]
    WidthSum { scheme: Scheme, widths: String, sum: u64, bits: u32 },
    #[error(
        "js53: the widths ({widths}) sum to {sum} bits, but its ids have exactly 53 so that \
         none ever exceeds 2^53 - 1 = 9007199254740991 (JavaScript's Number.MAX_SAFE_INTEGER) \
         in the layout's whole life; choose time_bits + worker_bits + seq_bits = 53"
    )]
    NotJsSafe { widths: String, sum: u64 },
    #[error("{scheme}: the {part} field needs at least 1 bit")]
    ZeroWidth { scheme: Scheme, part: Part },
    #[error("{scheme}: the epoch {epoch} is in the future (now is {now})")]
    EpochInFuture { scheme: Scheme, epoch: String, now: String },
    #[error(
        "{scheme}: {time_bits} bits of {unit} from {epoch} last {years:.1} years and ran out at \
         {ran_out} (now is {now}); choose a later epoch or more time bits"
    )]
    RunOut {
        scheme: Scheme,
        time_bits: u32,
        unit: TimeUnit,
        epoch: String,
        years: f64,
        ran_out: String,
        now: String,
    },
}

/// Why fields cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("{scheme} has no {part} field, but it was given as {value} (must be 0)")]
    NoSuchField { scheme: Scheme, part: Part, value: u64 },
    #[error("{scheme}: {part} {value} does not fit in {bits} bits (at most {max})")]
    TooWide { scheme: Scheme, part: Part, value: u64, bits: u32, max: u64 },
    #[error("{scheme} ids have {bits} bits and do not fit in a u64")]
    NotU64 { scheme: Scheme, bits: u32 },
    #[error("{scheme}: a packer's fixed {part} must be 0 (it varies per id), not {value}")]
    NotFixed { scheme: Scheme, part: Part, value: u64 },
}

/// Why a number or text is not an id of a layout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{scheme}: {id:#x} has more than {bits} bits")]
    TooWide { scheme: Scheme, id: u128, bits: u32 },
    #[error("{scheme}: the {part} bits are {found:#b}, expected {expected:#b}")]
    BadConstant { scheme: Scheme, part: Part, found: u64, expected: u64 },
    #[error("{scheme}: cannot parse {text:?}: {why}")]
    Text { scheme: Scheme, text: String, why: String },
}

/// A layout as written in the config; [`LayoutSpec::load`] fills in the scheme's defaults and
/// validates it. Only `uid-generator` and `js53` take widths; `uuidv7` takes no epoch or unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutSpec {
    pub scheme: Scheme,
    /// Ms since the Unix epoch (default: the scheme's own, see the `*_EPOCH_MS` constants;
    /// `rongcloud` and `uuidv7`: the Unix epoch).
    #[serde(default)]
    pub epoch_ms: Option<u64>,
    /// Default: seconds for `uid-generator`, ms for the others.
    #[serde(default)]
    pub unit: Option<TimeUnit>,
    #[serde(default)]
    pub time_bits: Option<u32>,
    #[serde(default)]
    pub worker_bits: Option<u32>,
    #[serde(default)]
    pub seq_bits: Option<u32>,
}

impl LayoutSpec {
    /// The scheme with all its defaults.
    pub fn of(scheme: Scheme) -> LayoutSpec {
        LayoutSpec {
            scheme,
            epoch_ms: None,
            unit: None,
            time_bits: None,
            worker_bits: None,
            seq_bits: None,
        }
    }

    /// Fills in the defaults and validates at `now_ms` (ms since the Unix epoch).
    pub fn load(&self, now_ms: u64) -> Result<Layout, LayoutError> {
        let layout = self.build()?;
        layout.check(now_ms)?;
        Ok(layout)
    }

    /// Fills in the defaults and validates everything but the time range: what a server needs
    /// to start (worker id pools, fingerprints) even when the layout has run out or its epoch
    /// is ahead of this host's clock (such a scheme's `NextIds` is refused instead:
    /// [`Layout::usable_at`]).
    pub fn load_shape(&self) -> Result<Layout, LayoutError> {
        let layout = self.build()?;
        layout.check(layout.epoch_ms)?;
        Ok(layout)
    }

    fn build(&self) -> Result<Layout, LayoutError> {
        let scheme = self.scheme;
        let custom_widths =
            self.time_bits.is_some() || self.worker_bits.is_some() || self.seq_bits.is_some();
        if custom_widths && !scheme.takes_widths() {
            return Err(LayoutError::FixedWidths(scheme));
        }
        use Part::*;
        let (epoch, unit, parts) = match scheme {
            Scheme::Snowflake => (
                TWITTER_EPOCH_MS,
                TimeUnit::Millis,
                vec![(Sign, 1), (Time, 41), (Worker, 10), (Sequence, 12)],
            ),
            Scheme::UidGenerator => (
                UID_GENERATOR_EPOCH_MS,
                TimeUnit::Seconds,
                vec![
                    (Sign, 1),
                    (Time, self.time_bits.unwrap_or(28)),
                    (Worker, self.worker_bits.unwrap_or(22)),
                    (Sequence, self.seq_bits.unwrap_or(13)),
                ],
            ),
            Scheme::Js53 => (
                JS53_EPOCH_MS,
                TimeUnit::Millis,
                vec![
                    (Time, self.time_bits.unwrap_or(41)),
                    (Worker, self.worker_bits.unwrap_or(5)),
                    (Sequence, self.seq_bits.unwrap_or(7)),
                ],
            ),
            Scheme::Weibo => (
                WEIBO_EPOCH_MS,
                TimeUnit::Millis,
                vec![(Sign, 1), (Time, 41), (Worker, 5), (Business, 5), (Sequence, 12)],
            ),
            // Seed 000 §5: highBits = ms << 12 | spin id, << 4 | session type, << 6 | the high 6
            // bits of the 22-bit session hash; lowBits = its low 16 bits.
            Scheme::RongCloud => (
                0,
                TimeUnit::Millis,
                vec![(Time, 42), (Sequence, 12), (SessionType, 4), (SessionHash, 22)],
            ),
            Scheme::UuidV7 => {
                if self.epoch_ms.is_some_and(|e| e != 0)
                    || self.unit.is_some_and(|u| u != TimeUnit::Millis)
                {
                    return Err(LayoutError::FixedTime);
                }
                (
                    0,
                    TimeUnit::Millis,
                    vec![(Time, 48), (Version, 4), (Sequence, 12), (Variant, 2), (Rand, 62)],
                )
            }
        };
        Ok(Layout {
            scheme,
            epoch_ms: self.epoch_ms.unwrap_or(epoch),
            unit: self.unit.unwrap_or(unit),
            parts,
        })
    }
}

/// A validated layout: a scheme, its epoch and time unit, and its bit fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    scheme: Scheme,
    epoch_ms: u64,
    unit: TimeUnit,
    /// Most significant first; the widths sum to `scheme.id_bits()`.
    parts: Vec<(Part, u32)>,
}

impl Layout {
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    pub fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }

    pub fn unit(&self) -> TimeUnit {
        self.unit
    }

    /// The bit fields, most significant first.
    pub fn parts(&self) -> &[(Part, u32)] {
        &self.parts
    }

    /// The width of `part` (0 if the scheme has none).
    pub fn width(&self, part: Part) -> u32 {
        self.parts.iter().find(|(p, _)| *p == part).map_or(0, |(_, w)| *w)
    }

    /// The largest value of `part` (0 if the scheme has none).
    pub fn max_value(&self, part: Part) -> u64 {
        max_of(self.width(part))
    }

    /// The last time unit the layout can hold.
    pub fn max_time(&self) -> u64 {
        self.max_value(Part::Time)
    }

    /// The largest sequence number within one time unit.
    pub fn max_sequence(&self) -> u64 {
        self.max_value(Part::Sequence)
    }

    /// Time units since the epoch at `unix_ms` (0 before the epoch: a clock that far back is
    /// handled like any clock that steps back, by the generator).
    pub fn units_at(&self, unix_ms: u64) -> u64 {
        unix_ms.saturating_sub(self.epoch_ms) / self.unit.ms()
    }

    /// The Unix ms at which time unit `units` begins (saturating).
    pub fn unix_ms(&self, units: u64) -> u64 {
        units.saturating_mul(self.unit.ms()).saturating_add(self.epoch_ms)
    }

    /// The first Unix ms the time field cannot hold (`u64::MAX` if beyond it).
    pub fn runs_out_at_ms(&self) -> u64 {
        let end = u128::from(self.epoch_ms)
            + (u128::from(self.max_time()) + 1) * u128::from(self.unit.ms());
        u64::try_from(end).unwrap_or(u64::MAX)
    }

    /// How many years the time field lasts from the epoch.
    pub fn lifetime_years(&self) -> f64 {
        (self.max_time() as f64 + 1.0) * self.unit.ms() as f64 / MS_PER_YEAR
    }

    /// Everything that decides what an id means: scheme, epoch, unit and bit fields, e.g.
    /// `snowflake epoch_ms=1288834974657 unit=ms sign 1 + time 41 + worker 10 + sequence 12`.
    /// The store records it per scheme name (`store.rs` `SchemeRecord`): a changed layout under
    /// the same name would reissue old ids, so it is refused.
    pub fn fingerprint(&self) -> String {
        let parts: Vec<String> = self.parts.iter().map(|(p, w)| format!("{p} {w}")).collect();
        format!(
            "{} epoch_ms={} unit={} {}",
            self.scheme,
            self.epoch_ms,
            self.unit,
            parts.join(" + ")
        )
    }

    /// The fingerprint without the epoch: the bit fields an id's value is made of, e.g.
    /// `snowflake unit=ms sign 1 + time 41 + worker 10 + sequence 12`. Two schemes of one shape
    /// issue the same values (worker ids are leased per scheme name, and a time offset one
    /// epoch reaches now the other reaches earlier or later), whatever their epochs: a cluster
    /// config may hold one scheme of each shape, and a set refuses a new name for a recorded
    /// shape (a rename). See [`shape_of_fingerprint`] for the recorded strings.
    pub fn shape(&self) -> String {
        shape_of_fingerprint(&self.fingerprint())
    }

    /// The largest id the layout can ever issue: the last time unit of its life with every
    /// other field at its largest (and its constants as they are). At most
    /// [`JS_MAX_SAFE_INTEGER`] for `js53`, `2^63 − 1` for the other 64-bit schemes.
    pub fn max_id(&self) -> u128 {
        let mut largest = Fields::default();
        for part in Fields::PARTS {
            largest.set(part, self.max_value(part));
        }
        self.pack(&largest)
    }

    /// Whether every id of the layout's whole life is exact as a JavaScript number (at most
    /// 2^53 − 1): true for `js53`, false for every other scheme's defaults.
    pub fn js_safe(&self) -> bool {
        self.max_id() <= u128::from(JS_MAX_SAFE_INTEGER)
    }

    /// Ids one generator issues per second for as long as the clock keeps up: one time unit's
    /// sequences per unit (`2^seq_bits` per ms or per s). A generator is one worker id, or for
    /// `rongcloud` one section (all the sessions routed to it). Bursts may run up to
    /// `ids.max_ahead_ms` ahead of the clock by borrowing later units.
    pub fn ids_per_second(&self) -> u64 {
        let per_unit = self.max_sequence().saturating_add(1);
        match self.unit {
            TimeUnit::Millis => per_unit.saturating_mul(1_000),
            TimeUnit::Seconds => per_unit,
        }
    }

    /// E.g. "lasts 69.7 years from 2010-11-04T01:42:54.657Z, until 2080-07-10T17:30:30.209Z".
    pub fn describe_range(&self) -> String {
        format!(
            "lasts {:.1} years from {}, until {}",
            self.lifetime_years(),
            rfc3339_ms(self.epoch_ms),
            rfc3339_ms(self.runs_out_at_ms())
        )
    }

    /// The load-time checks (see the module doc).
    /// Whether ids can be issued at `now_ms`: not before the epoch, not after the time field
    /// ran out.
    pub fn usable_at(&self, now_ms: u64) -> Result<(), LayoutError> {
        self.check(now_ms)
    }

    fn check(&self, now_ms: u64) -> Result<(), LayoutError> {
        let scheme = self.scheme;
        let sum: u64 = self.parts.iter().map(|(_, w)| u64::from(*w)).sum();
        if sum != u64::from(scheme.id_bits()) {
            let widths: Vec<String> = self.parts.iter().map(|(p, w)| format!("{p} {w}")).collect();
            if scheme == Scheme::Js53 {
                return Err(LayoutError::NotJsSafe { widths: widths.join(" + "), sum });
            }
            return Err(LayoutError::WidthSum {
                scheme,
                widths: widths.join(" + "),
                sum,
                bits: scheme.id_bits(),
            });
        }
        for part in [Part::Time, Part::Sequence] {
            if self.width(part) == 0 {
                return Err(LayoutError::ZeroWidth { scheme, part });
            }
        }
        if self.epoch_ms > now_ms {
            return Err(LayoutError::EpochInFuture {
                scheme,
                epoch: rfc3339_ms(self.epoch_ms),
                now: rfc3339_ms(now_ms),
            });
        }
        if now_ms >= self.runs_out_at_ms() {
            return Err(LayoutError::RunOut {
                scheme,
                time_bits: self.width(Part::Time),
                unit: self.unit,
                epoch: rfc3339_ms(self.epoch_ms),
                years: self.lifetime_years(),
                ran_out: rfc3339_ms(self.runs_out_at_ms()),
                now: rfc3339_ms(now_ms),
            });
        }
        Ok(())
    }

    /// Packs `fields` into an id (64-bit schemes fit in the low 63 bits).
    pub fn encode(&self, fields: &Fields) -> Result<u128, FieldError> {
        for part in Fields::PARTS {
            let (value, bits) = (fields.get(part), self.width(part));
            if bits == 0 && value != 0 {
                return Err(FieldError::NoSuchField { scheme: self.scheme, part, value });
            }
            if value > max_of(bits) {
                let max = max_of(bits);
                return Err(FieldError::TooWide { scheme: self.scheme, part, value, bits, max });
            }
        }
        Ok(self.pack(fields))
    }

    /// The id of `fields`, each of which fits its part (a part the layout lacks is left out).
    fn pack(&self, fields: &Fields) -> u128 {
        let mut id: u128 = 0;
        for &(part, bits) in &self.parts {
            let value = part.constant().unwrap_or_else(|| fields.get(part));
            id = (id << bits) | u128::from(value);
        }
        id
    }

    /// A [`Packer`] for ids whose fields are `fixed` except the time, the sequence and the
    /// random low bits of `rand` (`random_bits` of them, for uuidv7): checked once here, so
    /// packing each id is shifts and ORs. `fixed`'s time and sequence must be 0, and so must
    /// its `random_bits` low bits of `rand`.
    pub fn packer(&self, fixed: &Fields, random_bits: u32) -> Result<Packer, FieldError> {
        let rand_bits = self.width(Part::Rand);
        let random_mask = if random_bits == 0 { 0 } else { max_of(random_bits.min(rand_bits)) };
        let free =
            |part: Part, value: u64| FieldError::NotFixed { scheme: self.scheme, part, value };
        if fixed.time != 0 {
            return Err(free(Part::Time, fixed.time));
        }
        if fixed.sequence != 0 {
            return Err(free(Part::Sequence, fixed.sequence));
        }
        if fixed.rand & random_mask != 0 {
            return Err(free(Part::Rand, fixed.rand));
        }
        let base = self.encode(fixed)?;
        let shift_of = |part: Part| -> u32 {
            let mut below = 0;
            for &(p, bits) in self.parts.iter().rev() {
                if p == part {
                    return below;
                }
                below += bits;
            }
            0
        };
        Ok(Packer {
            base,
            time_shift: shift_of(Part::Time),
            sequence_shift: shift_of(Part::Sequence),
            rand_shift: shift_of(Part::Rand),
            random_mask,
            max_time: self.max_time(),
            max_sequence: self.max_sequence(),
        })
    }

    /// [`Layout::encode`] for the schemes held in a `u64` (the 64-bit ones and `js53`).
    pub fn encode_u64(&self, fields: &Fields) -> Result<u64, FieldError> {
        let bits = self.scheme.id_bits();
        if bits > 64 {
            return Err(FieldError::NotU64 { scheme: self.scheme, bits });
        }
        let id = self.encode(fields)?;
        assert!(id < 1 << 63, "a layout held in a u64 has a sign bit or only 53 bits");
        Ok(id as u64)
    }

    /// Unpacks an id; checks its width and constant bits (sign, UUID version and variant).
    pub fn decode(&self, id: u128) -> Result<Fields, DecodeError> {
        let bits = self.scheme.id_bits();
        if bits < 128 && id >> bits != 0 {
            return Err(DecodeError::TooWide { scheme: self.scheme, id, bits });
        }
        let mut fields = Fields::default();
        let mut rest = id;
        for &(part, width) in self.parts.iter().rev() {
            let value = (rest & u128::from(max_of(width))) as u64;
            rest >>= width;
            match part.constant() {
                Some(expected) if value != expected => {
                    let scheme = self.scheme;
                    return Err(DecodeError::BadConstant { scheme, part, found: value, expected });
                }
                Some(_) => {}
                None => fields.set(part, value),
            }
        }
        Ok(fields)
    }

    /// The text form of an id: RongCloud's 19 characters (`XXXX-XXXX-XXXX-XXXX`), the canonical
    /// UUID form, or decimal for the schemes held in a `u64`. Checks the id first, as [`Layout::decode`].
    pub fn format(&self, id: u128) -> Result<String, DecodeError> {
        self.decode(id)?;
        Ok(match self.scheme {
            Scheme::RongCloud => text::rongcloud_text(id),
            Scheme::UuidV7 => text::uuid_text(id),
            Scheme::Snowflake | Scheme::UidGenerator | Scheme::Weibo | Scheme::Js53 => {
                id.to_string()
            }
        })
    }

    /// Parses [`Layout::format`]'s text (RongCloud and UUID letters in either case) and checks
    /// the id as [`Layout::decode`].
    pub fn parse(&self, text: &str) -> Result<u128, DecodeError> {
        let parsed = match self.scheme {
            Scheme::RongCloud => text::parse_rongcloud(text),
            Scheme::UuidV7 => text::parse_uuid(text),
            Scheme::Snowflake | Scheme::UidGenerator | Scheme::Weibo | Scheme::Js53 => {
                text.parse::<u64>().map(u128::from).map_err(|e| format!("not a decimal u64 ({e})"))
            }
        };
        let id = parsed.map_err(|why| DecodeError::Text {
            scheme: self.scheme,
            text: text.to_string(),
            why,
        })?;
        self.decode(id)?;
        Ok(id)
    }
}

/// Packs ids of one [`Layout`] whose other fields are fixed ([`Layout::packer`]):
/// `pack(time, sequence, random)` is [`Layout::encode`] of the fixed fields with that time and
/// sequence and `random`'s low bits in the low bits of `rand`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packer {
    base: u128,
    time_shift: u32,
    sequence_shift: u32,
    rand_shift: u32,
    random_mask: u64,
    max_time: u64,
    max_sequence: u64,
}

impl Packer {
    /// Whether ids take random bits (`random` matters).
    pub fn takes_random(&self) -> bool {
        self.random_mask != 0
    }

    /// The id of `time` and `sequence` (both within the layout: a caller passing a wider one
    /// has broken the generator's invariant, so it is a crash, never a wrong id).
    #[inline]
    pub fn pack(&self, time: u64, sequence: u64, random: u64) -> u128 {
        assert!(
            time <= self.max_time && sequence <= self.max_sequence,
            "a stamp within the layout: time {time} (max {}), sequence {sequence} (max {})",
            self.max_time,
            self.max_sequence
        );
        self.base
            | u128::from(time) << self.time_shift
            | u128::from(sequence) << self.sequence_shift
            | u128::from(random & self.random_mask) << self.rand_shift
    }
}

/// Bits at the top of a UUIDv7's 62-bit `rand_b` that carry the leased worker id (§6.4's
/// "node id"): ids of different workers never collide, whatever the random bits below.
pub const UUID_WORKER_BITS: u32 = 16;
/// Random bits of `rand_b` below the worker id.
pub const UUID_RANDOM_BITS: u32 = 62 - UUID_WORKER_BITS;

/// How many worker ids a layout has: its worker field's values, 2^[`UUID_WORKER_BITS`] for
/// `uuidv7`, 0 for `rongcloud` (no worker: one owner per session instead).
pub fn worker_ids(layout: &Layout) -> u64 {
    match layout.scheme() {
        Scheme::UuidV7 => 1 << UUID_WORKER_BITS,
        Scheme::RongCloud => 0,
        Scheme::Snowflake | Scheme::UidGenerator | Scheme::Weibo | Scheme::Js53 => {
            layout.max_value(Part::Worker).saturating_add(1)
        }
    }
}

/// The fields of an id issued by `worker` at `stamp`: the worker id in the worker field, or in
/// the top of `rand_b` for `uuidv7` (with `random`'s low [`UUID_RANDOM_BITS`] bits below it).
pub fn issued_fields(
    layout: &Layout,
    worker: u64,
    stamp: Stamp,
    business: u64,
    random: u64,
) -> Fields {
    let mut fields =
        Fields { time: stamp.time, sequence: stamp.sequence, business, ..Fields::default() };
    match layout.scheme() {
        Scheme::UuidV7 => {
            fields.rand = (worker << UUID_RANDOM_BITS) | (random & ((1 << UUID_RANDOM_BITS) - 1))
        }
        _ => fields.worker = worker,
    }
    fields
}

/// RongCloud session types: 4 bits.
pub const SESSION_TYPES: u64 = 1 << 4;
/// RongCloud session-id hashes: 22 bits.
pub const SESSION_HASHES: u64 = 1 << 22;

/// A RongCloud session's key, `type << 22 | hash` (26 bits): what routes its ids to one owner.
/// `None` if a field does not fit.
pub fn session_key(session_type: u64, session_hash: u64) -> Option<u64> {
    (session_type < SESSION_TYPES && session_hash < SESSION_HASHES)
        .then_some(session_type << 22 | session_hash)
}

/// The 22-bit session hash of a session id given as text: the low 22 bits of Java's
/// `String.hashCode()` (seed 000 step 4 takes "the session id's hash"; RongCloud's servers are
/// Java), so ids match what a Java implementation of the seed would compute.
pub fn session_hash_of(session_id: &str) -> u64 {
    let mut h: i32 = 0;
    for unit in session_id.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    u64::from(h as u32) & (SESSION_HASHES - 1)
}

/// The fields of a `rongcloud` id of session (`session_type`, `session_hash`) at `stamp`.
pub fn session_fields(stamp: Stamp, session_type: u64, session_hash: u64) -> Fields {
    Fields {
        time: stamp.time,
        sequence: stamp.sequence,
        session_type,
        session_hash,
        ..Fields::default()
    }
}

/// The worker id an id of `layout` carries (`None` for `rongcloud`).
pub fn worker_of(layout: &Layout, fields: &Fields) -> Option<u64> {
    match layout.scheme() {
        Scheme::UuidV7 => Some(fields.rand >> UUID_RANDOM_BITS),
        Scheme::RongCloud => None,
        Scheme::Snowflake | Scheme::UidGenerator | Scheme::Weibo | Scheme::Js53 => {
            Some(fields.worker)
        }
    }
}

/// The largest value of `bits` bits (`bits` ≤ 64).
fn max_of(bits: u32) -> u64 {
    assert!(bits <= 64, "no field is wider than 64 bits");
    if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// [`Layout::shape`] of a recorded fingerprint (`Layout::fingerprint`, or a `rongcloud` scheme's
/// `IdSchemeConfig::fingerprint` with its `; sessions on uids [..)` suffix): the words before
/// any `;`, without the `epoch_ms=` one.
pub fn shape_of_fingerprint(fingerprint: &str) -> String {
    let layout = fingerprint.split(';').next().unwrap_or_default();
    let words: Vec<&str> = layout.split(' ').filter(|w| !w.starts_with("epoch_ms=")).collect();
    words.join(" ")
}
