//! The cluster config (`cluster.toml`): the sets, the uid range each owns, the StoreSvr members of
//! each, and the tunables. Every process and `seqctl` read the same file; a process picks its own
//! entry by `(set id, node id)`. Parsing is pure (`from_toml_str`); reading the file is the
//! caller's business.

use crate::ids::{NodeId, SectionId, SetId};
use crate::section::SectionRange;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Default uids per section, as in WeChat's seqsvr: 2^32 uids → ~43k sections.
pub const DEFAULT_SECTION_SIZE: u64 = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot parse cluster config: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("invalid cluster config: {0}")]
    Invalid(String),
}

/// The port of a `host:port` address (host non-empty), e.g. `127.0.0.1:7101` or `store1:7101`.
pub fn port_of(addr: &str) -> Option<u16> {
    let (host, port) = addr.rsplit_once(':')?;
    if host.is_empty() {
        return None;
    }
    port.parse().ok()
}

/// Where a process advertised as `addr` listens by default: `addr` itself when it is an IP
/// address, else every interface on its port (a host name, as in docker-compose).
pub fn default_listen(addr: &str) -> Option<std::net::SocketAddr> {
    addr.parse().ok().or_else(|| Some(std::net::SocketAddr::from(([0, 0, 0, 0], port_of(addr)?))))
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid(msg.into()))
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Uids per section. Every set's uid range must be a whole number of sections.
    #[serde(default = "default_section_size")]
    pub section_size: u64,
    #[serde(default)]
    pub store: StoreTuning,
    #[serde(default)]
    pub alloc: AllocTuning,
    pub sets: Vec<SetConfig>,
    /// Transport security (mutual TLS) and the identity → role map. Absent: plaintext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// Globally unique id schemes the AllocSvrs serve (`IdService`). Absent: none.
    #[serde(default, skip_serializing_if = "IdsConfig::is_empty")]
    pub ids: IdsConfig,
}

/// `[ids]`: the id schemes served, by name, and how far ahead of the clock they may run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdsConfig {
    /// How far ahead of its clock an AllocSvr reserves a worker id's high-water mark in the
    /// store (one Raft write per about `reserve_ms / 2` per worker id in use).
    pub reserve_ms: u64,
    /// How far ahead of the clock issued times may run (by borrowing later time units when a
    /// unit's sequence is used up, or after the clock stepped back) before `NextIds` waits.
    /// Below `reserve_ms`.
    pub max_ahead_ms: u64,
    /// Most ids in one `NextIds` call.
    pub max_count: u32,
    /// How far an AllocSvr's wall clock may run ahead of its store leader's before the store
    /// refuses its time reservations (it then serves no ids until its clock is fixed). Every
    /// later holder of a worker id, and every later owner of a `rongcloud` section, starts
    /// above the reserved time, so a clock far ahead would stall them until the real time
    /// catches up: the worst stall is about `reserve_ms + max_ahead_ms + max_clock_skew_ms`.
    /// Default one minute (NTP keeps clocks within milliseconds); at most an hour.
    pub max_clock_skew_ms: u64,
    /// Scheme name → layout. The name is what requests use.
    pub schemes: BTreeMap<String, IdSchemeConfig>,
}

impl Default for IdsConfig {
    fn default() -> IdsConfig {
        IdsConfig {
            reserve_ms: 3_000,
            max_ahead_ms: 2_000,
            max_count: 100_000,
            max_clock_skew_ms: 60_000,
            schemes: BTreeMap::new(),
        }
    }
}

/// One `[ids.schemes.NAME]`: a layout ([`crate::idscheme::LayoutSpec`]) and the worker ids each
/// set leases out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdSchemeConfig {
    pub scheme: crate::idscheme::Scheme,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<crate::idscheme::TimeUnit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_bits: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_bits: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_bits: Option<u32>,
    /// Worker ids each set leases out: set `s` owns `[s × n, (s + 1) × n)`, fixed by its set id
    /// so adding a set never moves another set's worker ids. Default: the scheme's worker ids
    /// / 8 (set ids 0 to 7). Fixed for good once a worker id of the scheme was leased: each
    /// set's store records its pool and cannot see the others', so a changed split could hand
    /// one worker id to two sets (plan it for the most sets the scheme will ever serve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers_per_set: Option<u64>,
    /// `rongcloud` only: the uids its sessions are routed by, `[session_uid_begin,
    /// session_uid_end)` (default `[0, 2^26)`, one uid per (type, hash) key). A session's ids
    /// are issued by the owner of the section of its uid ([`session_uid`]),
    /// so each session has one owner at a time, with the same leases and fencing as its uids'
    /// sequences. Every uid of the range must belong to a set. Fixed for good once the scheme
    /// issued ids (the store refuses a changed range like a changed layout): a session moved to
    /// another section would start from that section's time mark, not its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_uid_begin: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_uid_end: Option<u64>,
}

/// The session keys of `rongcloud` (4-bit type + 22-bit hash): the default session uid range.
pub const SESSION_KEYS: u64 = 1 << 26;

/// The uid of session `key` (< [`SESSION_KEYS`]) in `uids`: keys scaled onto the range in
/// order, `start + key × len / 2^26`, so every part of a range wider than the keys gets
/// sessions (every set it spans), and a narrower one gets runs of neighbouring keys.
pub fn session_uid(uids: std::ops::Range<u64>, key: u64) -> u64 {
    assert!(uids.start < uids.end && key < SESSION_KEYS, "validated at load and at the request");
    let offset = u128::from(key) * u128::from(uids.end - uids.start) / u128::from(SESSION_KEYS);
    uids.start + offset as u64
}

/// Set ids the default `workers_per_set` makes room for.
pub const DEFAULT_WORKER_SHARES: u64 = 8;

impl IdSchemeConfig {
    /// `scheme` with every setting left to its default (what `[ids.schemes.NAME]` with only
    /// `scheme = "…"` loads as).
    pub fn of(scheme: crate::idscheme::Scheme) -> IdSchemeConfig {
        IdSchemeConfig {
            scheme,
            epoch_ms: None,
            unit: None,
            time_bits: None,
            worker_bits: None,
            seq_bits: None,
            workers_per_set: None,
            session_uid_begin: None,
            session_uid_end: None,
        }
    }

    pub fn layout_spec(&self) -> crate::idscheme::LayoutSpec {
        crate::idscheme::LayoutSpec {
            scheme: self.scheme,
            epoch_ms: self.epoch_ms,
            unit: self.unit,
            time_bits: self.time_bits,
            worker_bits: self.worker_bits,
            seq_bits: self.seq_bits,
        }
    }

    /// `rongcloud`: the uids sessions are routed by (see `session_uid_begin`).
    pub fn session_uids(&self) -> std::ops::Range<u64> {
        self.session_uid_begin.unwrap_or(0)..self.session_uid_end.unwrap_or(SESSION_KEYS)
    }

    /// `rongcloud`: the uid whose section's owner issues the ids of session `key` (see
    /// [`session_uid`]).
    pub fn session_uid(&self, key: u64) -> u64 {
        session_uid(self.session_uids(), key)
    }

    /// What the store records for the scheme and refuses to see change: the layout and, for
    /// `rongcloud`, the session uid range.
    pub fn fingerprint(&self, layout: &crate::idscheme::Layout) -> String {
        match layout.scheme() {
            crate::idscheme::Scheme::RongCloud => {
                let r = self.session_uids();
                format!("{}; sessions on uids [{}, {})", layout.fingerprint(), r.start, r.end)
            }
            _ => layout.fingerprint(),
        }
    }

    /// Checks `session_uid_begin`/`_end`: only for `rongcloud`, a non-empty range, every uid of
    /// it in one of `sets`.
    fn check_sessions(&self, sets: &[SetConfig]) -> Result<(), String> {
        let given = self.session_uid_begin.is_some() || self.session_uid_end.is_some();
        if self.scheme != crate::idscheme::Scheme::RongCloud {
            return match given {
                true => Err("session_uid_begin/session_uid_end are for rongcloud only".into()),
                false => Ok(()),
            };
        }
        let range = self.session_uids();
        if range.start >= range.end {
            return Err(format!(
                "session_uid_begin ({}) must be below session_uid_end ({})",
                range.start, range.end
            ));
        }
        let mut sorted: Vec<&SetConfig> = sets.iter().collect();
        sorted.sort_by_key(|s| s.uid_begin);
        let mut next = range.start;
        for set in sorted {
            if set.uid_begin <= next && next < set.uid_end {
                next = set.uid_end;
            }
            if next >= range.end {
                return Ok(());
            }
        }
        Err(format!(
            "sessions are routed by uids [{}, {}) but no set owns uid {next}: set              session_uid_begin/session_uid_end to uids the sets own",
            range.start, range.end
        ))
    }

    /// The worker ids set `set` leases out for this scheme (empty for `rongcloud`, which has
    /// none), given the loaded layout.
    pub fn worker_pool(
        &self,
        layout: &crate::idscheme::Layout,
        set: SetId,
    ) -> Result<std::ops::Range<u64>, String> {
        let total = crate::idscheme::worker_ids(layout);
        if total == 0 {
            return Ok(0..0);
        }
        let per_set = self.workers_per_set.unwrap_or(total / DEFAULT_WORKER_SHARES);
        if per_set == 0 || per_set > total {
            return Err(format!(
                "workers_per_set ({per_set}) must be within [1, {total}] ({} has {total} worker ids)",
                layout.scheme()
            ));
        }
        let begin =
            set.0.checked_mul(per_set).filter(|b| b + per_set <= total).ok_or_else(|| {
                format!(
                "set {set} has no worker ids: {} has {total} worker ids, {per_set} per set, so \
                 set ids up to {} only. Do not change workers_per_set of a scheme whose worker \
                 ids were ever leased: every set keeps the pool it recorded, and a new split \
                 would give this set ids another set still issues. Serve more sets under a new \
                 scheme name with the split planned for them (ids are unique per scheme name)",
                layout.scheme(),
                total / per_set - 1
            )
            })?;
        Ok(begin..begin + per_set)
    }
}

/// Two schemes of one shape ([`crate::idscheme::Layout::shape`]: the bit fields, epochs aside)
/// lease their worker ids apart, so both would hand out the same values: refused, naming both.
fn check_one_scheme_per_shape(
    schemes: &BTreeMap<String, (crate::idscheme::Layout, IdSchemeConfig)>,
) -> Result<(), ConfigError> {
    let mut by_shape: BTreeMap<String, &str> = BTreeMap::new();
    for (name, (layout, _)) in schemes {
        if let Some(first) = by_shape.insert(layout.shape(), name) {
            return invalid(format!(
                "ids.schemes.{first} and ids.schemes.{name} have the same id layout ({}): their \
                 worker ids are leased apart, so they would issue the same ids (whatever their \
                 epochs); serve one scheme under one name, or give the second other widths",
                layout.shape()
            ));
        }
    }
    Ok(())
}

impl IdsConfig {
    pub fn is_empty(&self) -> bool {
        *self == IdsConfig::default()
    }

    /// Loads every scheme's layout at `now_ms` (refusing one that has run out) and checks that
    /// every set has worker ids of each: `name → (layout, config)`.
    pub fn load(
        &self,
        now_ms: u64,
        sets: &[SetConfig],
    ) -> Result<BTreeMap<String, (crate::idscheme::Layout, IdSchemeConfig)>, ConfigError> {
        self.load_with(sets, |spec| spec.load(now_ms))
    }

    fn load_with(
        &self,
        sets: &[SetConfig],
        load: impl Fn(
            &crate::idscheme::LayoutSpec,
        ) -> Result<crate::idscheme::Layout, crate::idscheme::LayoutError>,
    ) -> Result<BTreeMap<String, (crate::idscheme::Layout, IdSchemeConfig)>, ConfigError> {
        let mut out = BTreeMap::new();
        for (name, scheme) in &self.schemes {
            let layout = load(&scheme.layout_spec())
                .map_err(|e| ConfigError::Invalid(format!("ids.schemes.{name}: {e}")))?;
            for set in sets {
                scheme
                    .worker_pool(&layout, set.id)
                    .map_err(|e| ConfigError::Invalid(format!("ids.schemes.{name}: {e}")))?;
            }
            if !sets.is_empty() {
                scheme
                    .check_sessions(sets)
                    .map_err(|e| ConfigError::Invalid(format!("ids.schemes.{name}: {e}")))?;
            }
            out.insert(name.clone(), (layout, scheme.clone()));
        }
        check_one_scheme_per_shape(&out)?;
        Ok(out)
    }

    /// [`IdsConfig::load`] without the time range ([`crate::idscheme::LayoutSpec::load_shape`]):
    /// for servers, which must start (and serve sequences) even when a scheme has run out or
    /// its epoch is ahead of their clock.
    pub fn load_shapes(
        &self,
        sets: &[SetConfig],
    ) -> Result<BTreeMap<String, (crate::idscheme::Layout, IdSchemeConfig)>, ConfigError> {
        self.load_with(sets, |spec| spec.load_shape())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_ahead_ms == 0 || self.reserve_ms <= self.max_ahead_ms {
            return invalid(format!(
                "ids.max_ahead_ms ({}) must be > 0 and below ids.reserve_ms ({}): issued times \
                 may run ahead of the clock only within what is reserved in the store",
                self.max_ahead_ms, self.reserve_ms
            ));
        }
        if self.reserve_ms > 3_600_000 {
            return invalid("ids.reserve_ms must be at most an hour (3600000)");
        }
        if self.max_count == 0 {
            return invalid("ids.max_count must be > 0");
        }
        if !(1_000..=3_600_000).contains(&self.max_clock_skew_ms) {
            return invalid(format!(
                "ids.max_clock_skew_ms ({}) must be within [1000, 3600000]: the store refuses \
                 time reservations from an AllocSvr whose clock runs further ahead of its own",
                self.max_clock_skew_ms
            ));
        }
        for name in self.schemes.keys() {
            let ok = !name.is_empty()
                && name.len() <= 64
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok {
                return invalid(format!(
                    "ids.schemes: name {name:?} must be 1 to 64 of [A-Za-z0-9_-]"
                ));
            }
        }
        Ok(())
    }
}

/// The most an AllocSvr budget counted by a semaphore may be (`alloc.max_streams`,
/// `alloc.max_stream_bytes`): tokio's `Semaphore::MAX_PERMITS` (`usize::MAX >> 3`), above which
/// the AllocSvr could not start (the allocsvr crate checks the two agree).
pub const MAX_BUDGET: usize = usize::MAX >> 3;

/// Tunables of every AllocSvr, and the lease both tiers agree on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AllocTuning {
    /// How long a grant lets an AllocSvr serve, from the send time of its heartbeat.
    pub lease_ms: u64,
    /// Safety margin for clock-rate differences: the AllocSvr stops `margin` early and the
    /// store waits `margin` longer before handing a section over.
    pub lease_margin_ms: u64,
    /// Heartbeat period (default a third of the lease).
    pub heartbeat_ms: u64,
    /// How far each advance raises a section's `max_seq` (persisted writes ≈ values / step).
    pub step: u64,
    /// Ask for the next step once less than `prefetch_ratio * step` values remain above the
    /// highest value served in the section (0.9: after 10% of a step is used, as Leaf does).
    pub prefetch_ratio: f64,
    /// Most uids in one NextBatch call.
    pub max_batch_uids: usize,
    /// Upper bound on how long one client call waits (for an advance or a hand-over); a longer
    /// `grpc-timeout` from the caller is clamped to it.
    pub request_timeout_ms: u64,
    /// Most `SeqService` calls that may wait at once (for an advance, a load, a hand-over or a
    /// lease); one more is refused at once with RESOURCE_EXHAUSTED instead of queueing.
    pub max_waiting_calls: usize,
    /// Most `NextIds` calls that may wait at once (for the clock, a worker id or a time
    /// reservation in the store), a pool of their own: id calls waiting for the clock never
    /// take the places of sequence calls. One more is refused at once with RESOURCE_EXHAUSTED.
    pub max_waiting_id_calls: usize,
    /// Most `NextStream` streams open at once on one AllocSvr (the SDK keeps one per client
    /// process); one more is refused with RESOURCE_EXHAUSTED, and that client sends RPCs.
    pub max_streams: usize,
    /// Bytes all `NextStream` batches and `NextBatch` calls together may hold, from when a
    /// batch is read until the transport has taken its reply ([`AllocTuning::stream_batch_bytes`]
    /// each, plus the route table a reply carries to a client with an older one); past it a
    /// stream stops reading (HTTP/2 flow control holds its client back) and a batch that finds
    /// no room before its deadline is answered RESOURCE_EXHAUSTED; a `NextBatch` call that finds
    /// no room is refused at once with RESOURCE_EXHAUSTED. At most [`MAX_BUDGET`].
    pub max_stream_bytes: usize,
    /// The same, for one stream: a client that reads no replies holds at most this much.
    pub max_bytes_per_stream: usize,
    /// Ids all `NextIds` calls together may hold between their checks and their answers (one
    /// call holds its count); a call past it is refused at once with RESOURCE_EXHAUSTED.
    /// At least `ids.max_count` (the AllocSvr refuses to start otherwise).
    pub max_ids_in_flight: usize,
}

impl Default for AllocTuning {
    fn default() -> AllocTuning {
        AllocTuning {
            lease_ms: 5_000,
            lease_margin_ms: 500,
            heartbeat_ms: 1_500,
            step: 10_000,
            prefetch_ratio: 0.9,
            max_batch_uids: 10_000,
            request_timeout_ms: 3_000,
            max_waiting_calls: 10_000,
            max_waiting_id_calls: 1_000,
            max_streams: 4_096,
            max_stream_bytes: 128 << 20,
            max_bytes_per_stream: 1 << 20,
            max_ids_in_flight: 1_000_000,
        }
    }
}

impl AllocTuning {
    pub fn validate(&self) -> Result<(), ConfigError> {
        // The same rule as a replicated `SetLease` (the first one comes from this file).
        if self.lease_ms > crate::lease::MAX_LEASE_MS {
            return invalid(format!(
                "alloc.lease_ms ({}) must be at most {} (10 minutes)",
                self.lease_ms,
                crate::lease::MAX_LEASE_MS
            ));
        }
        if self.lease_margin_ms == 0 || self.lease_margin_ms.saturating_mul(2) >= self.lease_ms {
            return invalid(format!(
                "alloc.lease_margin_ms ({}) must be > 0 and less than half of alloc.lease_ms ({})",
                self.lease_margin_ms, self.lease_ms
            ));
        }
        if self.heartbeat_ms == 0
            || self.heartbeat_ms.saturating_mul(2) > self.lease_ms - self.lease_margin_ms
        {
            return invalid(format!(
                "alloc.heartbeat_ms ({}) must be > 0 and at most half of lease_ms - lease_margin_ms \
                 so one lost heartbeat does not lapse the lease",
                self.heartbeat_ms
            ));
        }
        if self.step == 0 {
            return invalid("alloc.step must be > 0");
        }
        if !(0.0..=1.0).contains(&self.prefetch_ratio) {
            return invalid("alloc.prefetch_ratio must be within [0, 1]");
        }
        if self.max_batch_uids == 0
            || self.request_timeout_ms == 0
            || self.max_waiting_calls == 0
            || self.max_waiting_id_calls == 0
            || self.max_streams == 0
        {
            return invalid(
                "alloc.max_batch_uids, alloc.request_timeout_ms, alloc.max_waiting_calls, \
                 alloc.max_waiting_id_calls and alloc.max_streams must be > 0",
            );
        }
        // Each is a semaphore's permits: tokio's `Semaphore::new` panics above its MAX_PERMITS.
        for (key, value) in [
            ("alloc.max_streams", self.max_streams),
            ("alloc.max_stream_bytes", self.max_stream_bytes),
        ] {
            if value > MAX_BUDGET {
                return invalid(format!("{key} ({value}) must be at most {MAX_BUDGET}"));
            }
        }
        let batch = self.stream_batch_bytes(self.max_batch_uids);
        if self.max_bytes_per_stream < batch || self.max_bytes_per_stream > u32::MAX as usize {
            return invalid(format!(
                "alloc.max_bytes_per_stream ({}) must be within [{batch}, {}]: one NextStream \
                 batch of alloc.max_batch_uids ({}) uids is held as {batch} bytes",
                self.max_bytes_per_stream,
                u32::MAX,
                self.max_batch_uids
            ));
        }
        if self.max_stream_bytes < self.max_bytes_per_stream {
            return invalid(format!(
                "alloc.max_stream_bytes ({}) must be at least alloc.max_bytes_per_stream ({})",
                self.max_stream_bytes, self.max_bytes_per_stream
            ));
        }
        if self.max_ids_in_flight == 0 || self.max_ids_in_flight > u32::MAX as usize {
            return invalid(format!(
                "alloc.max_ids_in_flight ({}) must be within [1, {}] (and at least ids.max_count)",
                self.max_ids_in_flight,
                u32::MAX
            ));
        }
        Ok(())
    }

    /// Fixed bytes a `NextStream` batch is counted for besides its uids (the messages' own
    /// fields, an error message or a route table in the reply).
    pub const STREAM_BATCH_OVERHEAD_BYTES: usize = 512;

    /// The bytes a `NextStream` batch of `uids` uids holds until its reply is taken by the
    /// transport: its decoded request and its reply, 8 bytes a uid each, and
    /// [`AllocTuning::STREAM_BATCH_OVERHEAD_BYTES`].
    pub fn stream_batch_bytes(&self, uids: usize) -> usize {
        uids.saturating_mul(16).saturating_add(Self::STREAM_BATCH_OVERHEAD_BYTES)
    }

    /// `prefetch_ratio * step`, in values.
    pub fn prefetch_remaining(&self) -> u64 {
        (self.step as f64 * self.prefetch_ratio) as u64
    }
}

#[cfg(test)]
mod alloc_tuning_tests {
    use super::*;

    /// The memory budgets (issue 30): the defaults hold, a stream budget that could not take
    /// one largest batch, a total below one stream's and an empty id budget are refused.
    #[test]
    fn the_memory_budgets_must_hold_one_largest_batch_and_one_stream() {
        let ok = AllocTuning::default();
        ok.validate().expect("the defaults are valid");
        assert_eq!(ok.stream_batch_bytes(10), 10 * 16 + AllocTuning::STREAM_BATCH_OVERHEAD_BYTES);
        let exact = AllocTuning {
            max_bytes_per_stream: ok.stream_batch_bytes(ok.max_batch_uids),
            ..ok.clone()
        };
        exact.validate().expect("one largest batch per stream is enough");
        let small =
            AllocTuning { max_bytes_per_stream: exact.max_bytes_per_stream - 1, ..ok.clone() };
        let e = small.validate().unwrap_err().to_string();
        assert!(e.contains("alloc.max_bytes_per_stream") && e.contains("max_batch_uids"), "{e}");
        let total = AllocTuning { max_stream_bytes: ok.max_bytes_per_stream - 1, ..ok.clone() };
        let e = total.validate().unwrap_err().to_string();
        assert!(e.contains("alloc.max_stream_bytes"), "{e}");
        let no_ids = AllocTuning { max_ids_in_flight: 0, ..ok.clone() };
        assert!(no_ids.validate().unwrap_err().to_string().contains("alloc.max_ids_in_flight"));
        let no_id_waits = AllocTuning { max_waiting_id_calls: 0, ..ok };
        let e = no_id_waits.validate().unwrap_err().to_string();
        assert!(e.contains("alloc.max_waiting_id_calls"), "{e}");
    }

    /// A budget counted by a semaphore above its most permits is refused (the AllocSvr's
    /// `Semaphore::new` would panic at start), the most itself is accepted.
    #[test]
    fn a_budget_past_the_semaphore_limit_is_refused() {
        let ok = AllocTuning::default();
        let at_most =
            AllocTuning { max_stream_bytes: MAX_BUDGET, max_streams: MAX_BUDGET, ..ok.clone() };
        at_most.validate().expect("the most is accepted");
        let bytes = AllocTuning { max_stream_bytes: MAX_BUDGET + 1, ..ok.clone() };
        let e = bytes.validate().unwrap_err().to_string();
        assert!(e.contains("alloc.max_stream_bytes") && e.contains(&MAX_BUDGET.to_string()), "{e}");
        let streams = AllocTuning { max_streams: usize::MAX, ..ok };
        let e = streams.validate().unwrap_err().to_string();
        assert!(e.contains("alloc.max_streams"), "{e}");
    }
}

/// Tunables of every StoreSvr. Each can be overridden per process by flag or env.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreTuning {
    /// One Raft logical clock tick.
    pub tick_ms: u64,
    /// Ticks without a leader before a member starts a (pre-)election.
    pub election_ticks: usize,
    /// Ticks between leader heartbeats.
    pub heartbeat_ticks: usize,
    /// Most sections in one AdvanceMaxSeq / GetMaxSeq call.
    pub max_batch_sections: usize,
    /// Compact the Raft log (keeping a snapshot) once this many applied entries sit in it.
    pub compact_log_entries: u64,
    /// Upper bound on how long one client call waits for commit or read (callers may ask less).
    pub request_timeout_ms: u64,
    /// Most one operator raise (`seqctl store advance`, an unfenced AdvanceMaxSeq) may add to a
    /// section's committed `max_seq`: a mistyped target cannot burn the section's values.
    pub max_operator_raise: u64,
}

fn default_section_size() -> u64 {
    DEFAULT_SECTION_SIZE
}

impl Default for StoreTuning {
    fn default() -> StoreTuning {
        StoreTuning {
            tick_ms: 100,
            election_ticks: 10,
            heartbeat_ticks: 2,
            max_batch_sections: 4096,
            compact_log_entries: 10_000,
            request_timeout_ms: 5_000,
            max_operator_raise: 1 << 40,
        }
    }
}

impl StoreTuning {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.tick_ms == 0 {
            return invalid("store.tick_ms must be > 0");
        }
        if self.heartbeat_ticks == 0 || self.election_ticks <= self.heartbeat_ticks {
            return invalid(format!(
                "store.election_ticks ({}) must be greater than store.heartbeat_ticks ({}) > 0",
                self.election_ticks, self.heartbeat_ticks
            ));
        }
        if self.max_batch_sections == 0 {
            return invalid("store.max_batch_sections must be > 0");
        }
        if self.compact_log_entries == 0 {
            return invalid("store.compact_log_entries must be > 0");
        }
        if self.request_timeout_ms == 0 {
            return invalid("store.request_timeout_ms must be > 0");
        }
        if self.max_operator_raise == 0 {
            return invalid("store.max_operator_raise must be > 0");
        }
        Ok(())
    }
}

/// One set: an independent Raft group owning the uids `[uid_begin, uid_end)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetConfig {
    pub id: SetId,
    pub uid_begin: u64,
    /// Exclusive.
    pub uid_end: u64,
    /// The initial Raft voters. Every member must list the same ones.
    pub stores: Vec<MemberConfig>,
    /// AllocSvr addresses clients may use as seeds (any one is enough; each learns the rest from
    /// the route table). AllocSvrs themselves register with the store at start.
    #[serde(default)]
    pub allocs: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    pub id: NodeId,
    /// `host:port` other members and clients dial.
    pub addr: String,
}

impl ClusterConfig {
    pub fn from_toml_str(text: &str) -> Result<ClusterConfig, ConfigError> {
        let config: ClusterConfig = toml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    pub fn to_toml_string(&self) -> String {
        // Serializing plain structs of integers and strings cannot fail.
        toml::to_string_pretty(self).expect("a cluster config serializes to TOML")
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.section_size == 0 {
            return invalid("section_size must be > 0");
        }
        self.store.validate()?;
        self.alloc.validate()?;
        if self.sets.is_empty() {
            return invalid("no [[sets]]: at least one set is needed");
        }
        let mut set_ids = BTreeSet::new();
        for set in &self.sets {
            if !set_ids.insert(set.id) {
                return invalid(format!("set id {} appears twice", set.id));
            }
            set.validate(self.section_size)?;
        }
        if let Some(tls) = &self.tls {
            tls.validate(&set_ids)?;
        }
        self.ids.validate()?;
        let mut by_range: Vec<&SetConfig> = self.sets.iter().collect();
        by_range.sort_by_key(|s| s.uid_begin);
        for pair in by_range.windows(2) {
            if pair[0].uid_end > pair[1].uid_begin {
                return invalid(format!(
                    "sets {} [{}, {}) and {} [{}, {}) overlap",
                    pair[0].id,
                    pair[0].uid_begin,
                    pair[0].uid_end,
                    pair[1].id,
                    pair[1].uid_begin,
                    pair[1].uid_end
                ));
            }
        }
        Ok(())
    }

    pub fn set(&self, id: SetId) -> Option<&SetConfig> {
        self.sets.iter().find(|s| s.id == id)
    }

    /// The set owning `uid`, if any.
    pub fn set_for_uid(&self, uid: u64) -> Option<&SetConfig> {
        self.sets.iter().find(|s| s.uid_begin <= uid && uid < s.uid_end)
    }
}

impl SetConfig {
    fn validate(&self, section_size: u64) -> Result<(), ConfigError> {
        if self.uid_begin >= self.uid_end {
            return invalid(format!(
                "set {}: uid_begin ({}) must be < uid_end ({})",
                self.id, self.uid_begin, self.uid_end
            ));
        }
        if !self.uid_begin.is_multiple_of(section_size)
            || !self.uid_end.is_multiple_of(section_size)
        {
            return invalid(format!(
                "set {}: uid_begin and uid_end must be multiples of section_size ({section_size}) so \
                 that no section spans two sets",
                self.id
            ));
        }
        if self.stores.is_empty() {
            return invalid(format!("set {}: no [[sets.stores]] members", self.id));
        }
        let mut ids = BTreeSet::new();
        let mut addrs = BTreeSet::new();
        for m in &self.stores {
            if m.id.0 == 0 {
                return invalid(format!("set {}: member id 0 is reserved by Raft", self.id));
            }
            if !ids.insert(m.id) {
                return invalid(format!("set {}: member id {} appears twice", self.id, m.id));
            }
            if port_of(&m.addr).is_none() {
                return invalid(format!(
                    "set {}: member {} addr {:?} is not host:port",
                    self.id, m.id, m.addr
                ));
            }
            if !addrs.insert(m.addr.as_str()) {
                return invalid(format!("set {}: addr {} appears twice", self.id, m.addr));
            }
        }
        Ok(())
    }

    /// The sections this set owns.
    pub fn sections(&self, section_size: u64) -> SectionRange {
        let begin = SectionId(self.uid_begin / section_size);
        let end = SectionId(self.uid_end / section_size);
        // validate() guarantees uid_begin < uid_end, so begin <= end.
        SectionRange::new(begin, end).unwrap_or_else(|| unreachable_range(begin))
    }

    pub fn member(&self, id: NodeId) -> Option<&MemberConfig> {
        self.stores.iter().find(|m| m.id == id)
    }
}

/// `[tls]`: mutual TLS on the three planes and who may do what. Paths are as written in the
/// file (relative to the cluster file's directory); resolving and reading them is the caller's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The base of the DNS names server certificates carry as SANs, one per server role:
    /// `store.<server_name>` for StoreSvrs, `alloc.<server_name>` for AllocSvrs
    /// ([`TlsConfig::store_server_name`]). Clients dial IP addresses and check the name of the
    /// role they mean to reach, so an AllocSvr's certificate cannot pose as a StoreSvr (or the
    /// other way round) even though one CA issued both.
    pub server_name: String,
    /// CA bundle of the client plane: what AllocSvrs verify clients and admins against
    /// (`SeqService`). Clients verify the AllocSvrs' own certificates against `store_ca`
    /// instead (AllocSvrs are members of the store plane): whoever issues application
    /// certificates must never vouch for a server.
    pub client_ca: String,
    /// CA bundle of the store plane: AllocSvr and admin → StoreSvr (`StoreService`, `StoreAdmin`).
    pub store_ca: String,
    /// CA bundle of the peer plane: StoreSvr ↔ StoreSvr (`RaftTransport`).
    pub peer_ca: String,
    /// The most current AllocSvr registrations (not replaced, not released) one `alloc`
    /// identity may hold in a set: the store leader refuses one more (at another address; one
    /// at the same address replaces the old) with RESOURCE_EXHAUSTED before proposing it. A
    /// registration is replicated into the control state and every route table, so one
    /// certificate must not be able to add them without end. Default
    /// [`DEFAULT_MAX_REGISTRATIONS_PER_IDENTITY`]: one AllocSvr per certificate, plus restarts
    /// at new addresses whose old registration is not forgotten yet; raise it where many
    /// AllocSvrs of a set share one certificate.
    #[serde(
        default = "default_max_registrations_per_identity",
        skip_serializing_if = "is_default_max_registrations_per_identity"
    )]
    pub max_registrations_per_identity: u32,
    /// Certificate identity (its subject CN, or any of its DNS SANs) → role.
    #[serde(default)]
    pub identities: BTreeMap<String, IdentityEntry>,
}

/// `[tls] max_registrations_per_identity` when the file does not say.
pub const DEFAULT_MAX_REGISTRATIONS_PER_IDENTITY: u32 = 8;
/// The largest `[tls] max_registrations_per_identity` accepted.
pub const MAX_REGISTRATIONS_PER_IDENTITY_LIMIT: u32 = 1024;

fn default_max_registrations_per_identity() -> u32 {
    DEFAULT_MAX_REGISTRATIONS_PER_IDENTITY
}

fn is_default_max_registrations_per_identity(v: &u32) -> bool {
    *v == DEFAULT_MAX_REGISTRATIONS_PER_IDENTITY
}

/// What a certificate identity may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The public API (`SeqService`).
    Client,
    /// An AllocSvr: `StoreService` (register, heartbeat, load, advance).
    Alloc,
    /// An operator: `StoreAdmin` (membership, unfenced advances, section moves) and `SeqService`.
    Admin,
    /// A StoreSvr member: `RaftTransport`, within its own set only.
    Peer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Alloc => "alloc",
            Role::Admin => "admin",
            Role::Peer => "peer",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[tls.identities]` entry: `"app-1" = "client"` or
/// `"store-0-1" = { role = "peer", set = 0, node = 1 }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IdentityEntry {
    Role(Role),
    Member(MemberIdentity),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberIdentity {
    pub role: Role,
    /// The set a `peer` belongs to (required), or an `alloc` (optional: then it may use only
    /// that set's StoreSvrs); refused for the other roles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<SetId>,
    /// The member (Raft node id) a `peer` is, refused for the other roles: a member may send
    /// Raft messages only as this node (`RaftTransport/Send` refuses a batch whose `from` is
    /// another), so one member's certificate cannot speak for another. One certificate per
    /// member. Optional in the file, so that a file written for builds before it (which refuse
    /// the key) still parses in every binary; but a StoreSvr refuses to start when its own
    /// entry has none, and refuses every Raft batch from a peer whose entry has none
    /// (README "Upgrading": when to add it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeId>,
}

impl IdentityEntry {
    pub fn role(&self) -> Role {
        match self {
            IdentityEntry::Role(r) => *r,
            IdentityEntry::Member(m) => m.role,
        }
    }

    pub fn set(&self) -> Option<SetId> {
        match self {
            IdentityEntry::Role(_) => None,
            IdentityEntry::Member(m) => m.set,
        }
    }

    /// The member a `peer` identity is; `None` for a peer entry written before peers named
    /// their node (its member can neither start on this build nor be heard by one).
    pub fn node(&self) -> Option<NodeId> {
        match self {
            IdentityEntry::Role(_) => None,
            IdentityEntry::Member(m) => m.node,
        }
    }
}

/// Why a certificate's names do not give one identity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("none of its certificate names {0:?} is in [tls.identities]")]
    Unknown(Vec<String>),
    #[error("its certificate names {0:?} match entries of different roles in [tls.identities]")]
    Ambiguous(Vec<String>),
}

/// The DNS name a StoreSvr's certificate carries and everyone dialling a StoreSvr checks.
pub fn store_server_name(base: &str) -> String {
    format!("store.{base}")
}

/// The DNS name an AllocSvr's certificate carries and everyone dialling an AllocSvr checks.
pub fn alloc_server_name(base: &str) -> String {
    format!("alloc.{base}")
}

/// The DNS name a StoreSvr of set `set` carries besides [`store_server_name`]: what a client
/// that knows which set it dials (an AllocSvr, a member dialling its peers) checks, so a store
/// of another set cannot answer for this one.
pub fn set_store_server_name(base: &str, set: SetId) -> String {
    format!("store-{set}.{base}")
}

impl TlsConfig {
    pub fn store_server_name(&self) -> String {
        store_server_name(&self.server_name)
    }

    pub fn alloc_server_name(&self) -> String {
        alloc_server_name(&self.server_name)
    }

    fn validate(&self, set_ids: &BTreeSet<SetId>) -> Result<(), ConfigError> {
        if !is_dns_name(&self.server_name) {
            return invalid(format!(
                "tls.server_name {:?} must be a DNS name (letters, digits, '-', '.')",
                self.server_name
            ));
        }
        if !(1..=MAX_REGISTRATIONS_PER_IDENTITY_LIMIT)
            .contains(&self.max_registrations_per_identity)
        {
            return invalid(format!(
                "tls.max_registrations_per_identity = {} must be 1 to \
                 {MAX_REGISTRATIONS_PER_IDENTITY_LIMIT} (default \
                 {DEFAULT_MAX_REGISTRATIONS_PER_IDENTITY})",
                self.max_registrations_per_identity
            ));
        }
        for (what, path) in [
            ("client_ca", &self.client_ca),
            ("store_ca", &self.store_ca),
            ("peer_ca", &self.peer_ca),
        ] {
            if path.trim().is_empty() {
                return invalid(format!("tls.{what} must name a CA bundle file"));
            }
        }
        for (name, entry) in &self.identities {
            if name.is_empty() {
                return invalid("tls.identities: an identity name is empty");
            }
            let mut shared =
                vec![self.server_name.clone(), self.store_server_name(), self.alloc_server_name()];
            shared.extend(set_ids.iter().map(|&s| set_store_server_name(&self.server_name, s)));
            if shared.iter().any(|s| name.eq_ignore_ascii_case(s)) {
                return invalid(format!(
                    "tls.identities: {name:?} is a server name every certificate of a role \
                     carries (server_name, store.<server_name>, store-<set>.<server_name> or \
                     alloc.<server_name>); it cannot name one identity"
                ));
            }
            match (entry.role(), entry.node()) {
                // Accepted: a file written for builds before `node` (which refuse the key) must
                // parse in every binary of this build during a rolling upgrade. What needs the
                // node refuses without it, naming the entry: a StoreSvr at start for its own
                // entry (`TlsSetup::check_member_identity`), Raft batches from a peer whose
                // entry has none (`authz.rs::require_own_node`).
                (Role::Peer, None) => {}
                (Role::Peer, Some(NodeId(0))) => {
                    return invalid(format!(
                        "tls.identities: peer {name:?} names node 0, which raft reserves"
                    ))
                }
                (Role::Peer, Some(_)) => {}
                (role, Some(_)) => {
                    return invalid(format!(
                        "tls.identities: {name:?} has role {role}; only a peer names a node"
                    ))
                }
                (_, None) => {}
            }
            match (entry.role(), entry.set()) {
                (Role::Peer, None) => {
                    return invalid(format!(
                        "tls.identities: peer {name:?} must name its set: {{ role = \"peer\", set = S, \
                         node = N }}"
                    ))
                }
                (Role::Peer | Role::Alloc, Some(set)) if !set_ids.contains(&set) => {
                    return invalid(format!(
                        "tls.identities: {name:?} names set {set}, which does not exist"
                    ))
                }
                (role, Some(_)) if !matches!(role, Role::Peer | Role::Alloc) => {
                    return invalid(format!(
                        "tls.identities: {name:?} has role {role}; only a peer or an alloc \
                         belongs to a set"
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The identity of a certificate with subject common name `cn` and DNS SANs `dns_sans`:
    /// every one of those names that `[tls.identities]` lists must agree on the role (and set);
    /// the CN is the name reported when it is listed, else the first listed SAN.
    pub fn resolve_identity(
        &self,
        cn: Option<&str>,
        dns_sans: &[String],
    ) -> Result<(String, IdentityEntry), IdentityError> {
        let names: Vec<&str> = cn.into_iter().chain(dns_sans.iter().map(String::as_str)).collect();
        let mut found: Option<(&str, &IdentityEntry)> = None;
        for name in &names {
            if let Some(entry) = self.identities.get(*name) {
                match found {
                    None => found = Some((name, entry)),
                    Some((_, first)) if first != entry => {
                        return Err(IdentityError::Ambiguous(
                            names.iter().map(|n| n.to_string()).collect(),
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        match found {
            Some((name, entry)) => Ok((name.to_string(), entry.clone())),
            None => Err(IdentityError::Unknown(names.iter().map(|n| n.to_string()).collect())),
        }
    }
}

fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

fn unreachable_range(at: SectionId) -> SectionRange {
    // Only reachable for an unvalidated config; an empty range serves nothing, which is safe.
    SectionRange::new(at, at).expect("begin == end is a valid range")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped cluster files parse, and their id schemes load (none has run out) with
    /// worker ids for every set.
    #[test]
    fn the_shipped_cluster_files_and_their_id_schemes_load() {
        let now_ms = 1_796_000_000_000; // 2026-11-30
        for (name, text) in [
            ("config/cluster.toml", include_str!("../../../config/cluster.toml")),
            ("config/compose.toml", include_str!("../../../config/compose.toml")),
            ("config/compose-2sets.toml", include_str!("../../../config/compose-2sets.toml")),
        ] {
            let config =
                ClusterConfig::from_toml_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let schemes =
                config.ids.load(now_ms, &config.sets).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(schemes.contains_key("snowflake"), "{name}");
        }
        // The local cluster serves JavaScript-safe ids too.
        let local = ClusterConfig::from_toml_str(include_str!("../../../config/cluster.toml"));
        let local = local.unwrap().ids.load(now_ms, &[]).unwrap();
        assert!(local.values().any(|(layout, _)| layout.js_safe()), "no js53 scheme");
    }

    /// Worker ids per set are fixed by the set id, so adding a set moves no other set's; a set
    /// beyond the scheme's worker ids, or a bad `[ids]` limit, is refused with a reason.
    #[test]
    fn worker_pools_follow_the_set_id_and_bad_id_settings_are_refused() {
        use crate::idscheme::Scheme;
        let now_ms = 1_796_000_000_000;
        let scheme = IdSchemeConfig::of;
        let snowflake = scheme(Scheme::Snowflake);
        let layout = snowflake.layout_spec().load(now_ms).unwrap();
        assert_eq!(snowflake.worker_pool(&layout, SetId(0)), Ok(0..128));
        assert_eq!(snowflake.worker_pool(&layout, SetId(7)), Ok(896..1024));
        let err = snowflake.worker_pool(&layout, SetId(8)).unwrap_err();
        assert!(err.contains("set 8 has no worker ids"), "{err}");
        let weibo = IdSchemeConfig { workers_per_set: Some(16), ..scheme(Scheme::Weibo) };
        let layout = weibo.layout_spec().load(now_ms).unwrap();
        assert_eq!(weibo.worker_pool(&layout, SetId(1)), Ok(16..32));
        let rong = scheme(Scheme::RongCloud);
        assert_eq!(rong.worker_pool(&rong.layout_spec().load(now_ms).unwrap(), SetId(3)), Ok(0..0));
        let bad = IdsConfig { max_ahead_ms: 5_000, reserve_ms: 5_000, ..IdsConfig::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("below ids.reserve_ms"));
        for skew in [0, 999, 3_600_001] {
            let bad = IdsConfig { max_clock_skew_ms: skew, ..IdsConfig::default() };
            assert!(
                bad.validate().unwrap_err().to_string().contains("max_clock_skew_ms"),
                "{skew}"
            );
        }
        let mut named = IdsConfig::default();
        named.schemes.insert("no spaces".into(), scheme(Scheme::Snowflake));
        assert!(named.validate().is_err());
        // The default uid-generator layout ran out in 2024: refused at load, naming the scheme.
        let mut ran_out = IdsConfig::default();
        ran_out.schemes.insert("uid".into(), scheme(Scheme::UidGenerator));
        let err = ran_out.load(now_ms, &[]).unwrap_err().to_string();
        assert!(err.contains("ids.schemes.uid") && err.contains("ran out"), "{err}");
    }

    /// `rongcloud` sessions route by a uid range every uid of which a set owns; the range is
    /// part of the recorded fingerprint; other schemes refuse the fields.
    #[test]
    fn rongcloud_session_uids_must_be_owned_by_sets() {
        let now_ms = 1_796_000_000_000;
        let set = |id, uid_begin, uid_end| SetConfig {
            id: SetId(id),
            uid_begin,
            uid_end,
            stores: Vec::new(),
            allocs: Vec::new(),
        };
        let rong = |b: Option<u64>, e: Option<u64>| IdSchemeConfig {
            session_uid_begin: b,
            session_uid_end: e,
            ..IdSchemeConfig::of(crate::idscheme::Scheme::RongCloud)
        };
        let load = |scheme: IdSchemeConfig, sets: &[SetConfig]| {
            let mut ids = IdsConfig::default();
            ids.schemes.insert("rc".into(), scheme);
            ids.load(now_ms, sets).map(|_| ()).map_err(|e| e.to_string())
        };
        let two = [set(1, 1_000, 2_000), set(0, 0, 1_000)];
        assert_eq!(load(rong(Some(500), Some(1_500)), &two), Ok(()));
        let err = load(rong(None, None), &two).unwrap_err();
        assert!(err.contains("no set owns uid 2000"), "{err}");
        let gap = [set(0, 0, 1_000), set(1, 1_001, 2_000)];
        let err = load(rong(Some(0), Some(1_500)), &gap).unwrap_err();
        assert!(err.contains("no set owns uid 1000"), "{err}");
        let err = load(rong(Some(9), Some(9)), &two).unwrap_err();
        assert!(err.contains("must be below"), "{err}");
        let snowflake =
            IdSchemeConfig { scheme: crate::idscheme::Scheme::Snowflake, ..rong(Some(0), None) };
        assert!(load(snowflake, &two).unwrap_err().contains("rongcloud only"));
        let r = rong(Some(500), Some(1_500));
        assert_eq!(r.session_uid(0), 500);
        assert_eq!(r.session_uid(1 << 25), 1_000, "keys scale onto the range");
        assert_eq!(r.session_uid((1 << 26) - 1), 1_499);
        let wide = rong(Some(0), Some(4_294_900_000));
        assert_eq!(wide.session_uid(1 << 25), 2_147_450_000, "the second half: the second set");
        let layout = r.layout_spec().load(now_ms).unwrap();
        assert!(r.fingerprint(&layout).ends_with("sessions on uids [500, 1500)"));
    }

    const GOOD: &str = r#"
section_size = 100
[store]
tick_ms = 50
[[sets]]
id = 0
uid_begin = 0
uid_end = 1000
stores = [{ id = 1, addr = "127.0.0.1:7001" }, { id = 2, addr = "127.0.0.1:7002" }]
[[sets]]
id = 1
uid_begin = 1000
uid_end = 5000
stores = [{ id = 1, addr = "127.0.0.1:7101" }]
"#;

    #[test]
    fn parses_and_routes_uids_to_sets() {
        let c = ClusterConfig::from_toml_str(GOOD).unwrap();
        assert_eq!(c.store.tick_ms, 50);
        assert_eq!(c.store.election_ticks, 10, "unset tunables take defaults");
        assert_eq!(c.set_for_uid(999).unwrap().id, SetId(0));
        assert_eq!(c.set_for_uid(1000).unwrap().id, SetId(1));
        assert!(c.set_for_uid(5000).is_none());
        let s = c.set(SetId(1)).unwrap().sections(c.section_size);
        assert_eq!((s.begin(), s.end()), (SectionId(10), SectionId(50)));
        let again = ClusterConfig::from_toml_str(&c.to_toml_string()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn addresses() {
        assert_eq!(port_of("127.0.0.1:7101"), Some(7101));
        assert_eq!(port_of("store1:7101"), Some(7101));
        assert_eq!(port_of(":7101"), None);
        assert_eq!(port_of("store1"), None);
        assert_eq!(port_of("store1:99999"), None);
        assert_eq!(default_listen("127.0.0.1:7101"), Some("127.0.0.1:7101".parse().unwrap()));
        assert_eq!(default_listen("store1:7101"), Some("0.0.0.0:7101".parse().unwrap()));
        assert_eq!(default_listen("store1"), None);
    }

    fn rejects(text: &str, needle: &str) {
        let err = ClusterConfig::from_toml_str(text).unwrap_err().to_string();
        assert!(err.contains(needle), "{err:?} should mention {needle:?}");
    }

    #[test]
    fn rejects_bad_configs() {
        rejects(&GOOD.replace("uid_begin = 1000", "uid_begin = 900"), "overlap");
        rejects(&GOOD.replace("uid_end = 5000", "uid_end = 5050"), "multiples of section_size");
        rejects(&GOOD.replace("id = 2,", "id = 1,"), "appears twice");
        rejects(&GOOD.replace("id = 2,", "id = 0,"), "reserved");
        rejects(&GOOD.replace("127.0.0.1:7002", "nope"), "host:port");
        rejects(
            &GOOD.replace("tick_ms = 50", "tick_ms = 50\nelection_ticks = 1"),
            "election_ticks",
        );
        rejects(&GOOD.replace("tick_ms = 50", "tick_ms = 50\nbogus = 1"), "unknown field");
        rejects(&GOOD.replace("section_size = 100", "section_size = 0"), "section_size");
        rejects(
            &format!("{GOOD}\n[alloc]\nlease_ms = 1000\nlease_margin_ms = 600\n"),
            "lease_margin_ms",
        );
        rejects(&format!("{GOOD}\n[alloc]\nheartbeat_ms = 2500\n"), "heartbeat_ms");
        rejects(&format!("{GOOD}\n[alloc]\nlease_ms = 600001\n"), "at most 600000");
    }

    const TLS: &str = r#"
[tls]
server_name = "seqsvr"
client_ca = "certs/client-ca.pem"
store_ca = "certs/store-ca.pem"
peer_ca = "certs/peer-ca.pem"
[tls.identities]
"app-1" = "client"
"alloc" = "alloc"
"alloc-1" = { role = "alloc", set = 1 }
"admin" = "admin"
"store-0-1" = { role = "peer", set = 0, node = 1 }
"store-1-2" = { role = "peer", set = 1, node = 2 }
"#;

    #[test]
    fn tls_section_parses_roles_and_round_trips() {
        let c = ClusterConfig::from_toml_str(&format!("{GOOD}{TLS}")).unwrap();
        let tls = c.tls.as_ref().unwrap();
        assert_eq!(tls.server_name, "seqsvr");
        assert_eq!(tls.identities["app-1"].role(), Role::Client);
        assert_eq!(tls.identities["store-1-2"].role(), Role::Peer);
        assert_eq!(tls.identities["store-1-2"].set(), Some(SetId(1)));
        assert_eq!(tls.identities["store-1-2"].node(), Some(NodeId(2)));
        assert_eq!(tls.identities["alloc-1"].node(), None);
        assert_eq!(tls.max_registrations_per_identity, DEFAULT_MAX_REGISTRATIONS_PER_IDENTITY);
        assert_eq!(tls.identities["admin"].set(), None);
        assert_eq!(tls.identities["alloc-1"].set(), Some(SetId(1)));
        let again = ClusterConfig::from_toml_str(&c.to_toml_string()).unwrap();
        assert_eq!(again, c);
        assert!(ClusterConfig::from_toml_str(GOOD).unwrap().tls.is_none(), "[tls] is optional");
    }

    #[test]
    fn tls_section_rejects_bad_entries() {
        let with = |extra: &str| format!("{GOOD}{TLS}{extra}\n");
        rejects(&with(r#""x" = "root""#), "untagged");
        rejects(&with(r#""x" = "peer""#), "must name its set");
        rejects(&with(r#""x" = { role = "peer", node = 1 }"#), "must name its set");
        rejects(&with(r#""x" = { role = "peer", set = 7, node = 1 }"#), "does not exist");
        // A peer written before peers named their node parses and validates (a rolling
        // upgrade's file): only a StoreSvr needs it, of its own entry and of its peers'.
        let old =
            ClusterConfig::from_toml_str(&with(r#""store-0-3" = { role = "peer", set = 0 }"#))
                .expect("a peer entry without node is accepted")
                .tls
                .unwrap();
        assert_eq!(old.identities["store-0-3"].node(), None);
        rejects(&with(r#""x" = { role = "peer", set = 0, node = 0 }"#), "reserves");
        rejects(&with(r#""x" = { role = "alloc", set = 0, node = 1 }"#), "only a peer names");
        rejects(&with(r#""x" = { role = "client", set = 0 }"#), "only a peer or an alloc");
        rejects(&with(r#""x" = { role = "alloc", set = 7 }"#), "does not exist");
        rejects(&with(r#""seqsvr" = "admin""#), "server_name");
        rejects(&format!("{GOOD}{}", TLS.replace(r#""seqsvr""#, r#""bad name""#)), "DNS name");
        rejects(&format!("{GOOD}{}", TLS.replace(r#""certs/peer-ca.pem""#, r#""""#)), "peer_ca");
        rejects(&format!("{GOOD}{}", TLS.replace("peer_ca", "peer_cab")), "unknown field");
        let most = |n: u32| {
            TLS.replace(
                "[tls.identities]",
                &format!("max_registrations_per_identity = {n}\n[tls.identities]"),
            )
        };
        rejects(&format!("{GOOD}{}", most(0)), "max_registrations_per_identity = 0 must be 1");
        rejects(&format!("{GOOD}{}", most(1025)), "must be 1 to 1024");
        let c = ClusterConfig::from_toml_str(&format!("{GOOD}{}", most(3))).unwrap();
        assert_eq!(c.tls.unwrap().max_registrations_per_identity, 3);
    }

    #[test]
    fn identity_resolution_uses_cn_or_any_dns_san_and_refuses_ambiguity() {
        let c = ClusterConfig::from_toml_str(&format!("{GOOD}{TLS}")).unwrap();
        let tls = c.tls.unwrap();
        let sans = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (name, e) = tls.resolve_identity(Some("admin"), &sans(&["seqsvr"])).unwrap();
        assert_eq!((name.as_str(), e.role()), ("admin", Role::Admin));
        let (name, e) =
            tls.resolve_identity(Some("whatever"), &sans(&["seqsvr", "store-0-1"])).unwrap();
        assert_eq!((name.as_str(), e.set()), ("store-0-1", Some(SetId(0))));
        assert!(matches!(
            tls.resolve_identity(Some("nobody"), &sans(&["seqsvr"])),
            Err(IdentityError::Unknown(_))
        ));
        assert!(matches!(
            tls.resolve_identity(Some("store-0-1"), &sans(&["store-1-2"])),
            Err(IdentityError::Ambiguous(_))
        ));
        assert!(matches!(tls.resolve_identity(None, &[]), Err(IdentityError::Unknown(_))));
    }

    /// Two schemes whose ids are made of the same bit fields would issue the same values under
    /// two names: refused, epochs aside, naming both; other shapes side by side are fine.
    #[test]
    fn two_schemes_of_one_shape_are_refused() {
        use crate::idscheme::Scheme;
        let mut ids = IdsConfig::default();
        ids.schemes.insert("orders".into(), IdSchemeConfig::of(Scheme::Snowflake));
        ids.schemes.insert("events".into(), IdSchemeConfig::of(Scheme::UuidV7));
        ids.schemes.insert("weibo".into(), IdSchemeConfig::of(Scheme::Weibo));
        ids.load_shapes(&[]).expect("three shapes");
        let later_epoch = IdSchemeConfig {
            epoch_ms: Some(1_577_836_800_000), // 2020-01-01
            ..IdSchemeConfig::of(Scheme::Snowflake)
        };
        ids.schemes.insert("payments".into(), later_epoch);
        let err = ids.load_shapes(&[]).expect_err("one shape twice").to_string();
        assert!(
            err.contains("ids.schemes.orders") && err.contains("ids.schemes.payments"),
            "{err}"
        );
        assert!(err.contains("same id layout"), "{err}");
    }

    /// `js53` sits beside the 63-bit schemes (a shape of its own); two `js53` schemes of one
    /// shape are refused as any two of one shape, other widths are another shape; widths that
    /// could pass 2^53 − 1 are refused at load, naming the scheme, the widths and their sum.
    #[test]
    fn js53_schemes_load_beside_the_others_one_per_shape() {
        use crate::idscheme::Scheme;
        let js53 = IdSchemeConfig::of(Scheme::Js53);
        let mut ids = IdsConfig::default();
        ids.schemes.insert("orders".into(), IdSchemeConfig::of(Scheme::Snowflake));
        ids.schemes.insert("web".into(), js53.clone());
        let loaded = ids.load(1_796_000_000_000, &[]).expect("two shapes");
        assert_eq!(loaded["web"].0.shape(), "js53 unit=ms time 41 + worker 5 + sequence 7");
        let later = IdSchemeConfig { epoch_ms: Some(1_767_225_600_000), ..js53.clone() };
        ids.schemes.insert("web2".into(), later);
        let err = ids.load_shapes(&[]).expect_err("one shape twice").to_string();
        assert!(err.contains("ids.schemes.web and ids.schemes.web2"), "{err}");
        let seconds = IdSchemeConfig {
            unit: Some(crate::idscheme::TimeUnit::Seconds),
            time_bits: Some(32),
            worker_bits: Some(5),
            seq_bits: Some(16),
            ..js53.clone()
        };
        ids.schemes.insert("web2".into(), seconds);
        ids.load_shapes(&[]).expect("another shape");
        let wide = IdSchemeConfig { worker_bits: Some(6), ..js53 };
        ids.schemes.insert("web2".into(), wide);
        let err = ids.load_shapes(&[]).expect_err("54 bits").to_string();
        assert!(
            err.contains(
                "ids.schemes.web2: js53: the widths (time 41 + worker 6 + sequence 7) sum to 54 \
                 bits"
            ),
            "{err}"
        );
    }
}
