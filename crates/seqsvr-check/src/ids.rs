//! Histories of `IdService.NextIds` calls (issue 10) and the checker of the id guarantees over
//! them.
//!
//! Each call is recorded like a `next` of [`crate::history`]: invocation and completion on the
//! run's monotonic clock, the AllocSvr asked, the session asked for (`rongcloud`), and one
//! outcome: `ok` (the answer's worker id and its ids, 128-bit values for `uuidv7` and 80-bit ones
//! for `rongcloud`), `malformed` (an answer arrived but does not hold the scheme's ids: a broken
//! promise of its own), `fail` (refused) or `unknown` (timed out, lost).
//! The checker verifies, over `ok` answers only:
//! - **G1** no id is issued twice, per scheme, across the whole cluster (the whole id: all 128
//!   bits of a `uuidv7`);
//! - **G2** ids carrying the same worker id — for `rongcloud`, which has no worker, the same
//!   session (type, hash) — (decoded with the scheme's layout, not taken from the answer)
//!   strictly increase in real time: when call A completed before call B was invoked, every id
//!   of B with that worker (session) is above every id of A with it; within one answer every id
//!   is above the one before it;
//! - each answer is well formed: as many ids as asked for, each decodes with the layout, and
//!   each carries the worker id the answer names (`rongcloud`: the answer names worker 0 and
//!   each id carries the session asked for). Decoding checks the id's width, so every `js53` id
//!   got is at most 2^53 − 1 (JavaScript-safe) or the answer is malformed.
//!
//! `weibo` ids of one worker are compared with the business field zeroed: the AllocSvr keeps one
//! generator per worker id (one `(time, sequence)` stamp that only grows), and the business
//! number given per request sits between the worker and the sequence, so two calls in one ms
//! with different business numbers legitimately give ids whose order follows the business
//! number. What must grow is the stamp; with the same business number that is the whole id.
//!
//! `fail` and `unknown` calls constrain nothing: the ids of a lost answer were never seen.

use crate::history;
use seqsvr_core::idscheme::{rfc3339_ms, worker_of, Fields, Layout, Part, Scheme};
use seqsvr_proto::v1 as pb;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, Write};

/// The `client` of calls a fault makes itself (not a load task): named "a fault's probe".
pub const FAULT_CLIENT: u32 = u32::MAX;

/// One `NextIds` call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdCall {
    /// The load task that made it, or [`FAULT_CLIENT`].
    pub client: u32,
    /// The set of the AllocSvr asked.
    pub set: u64,
    /// The address of the AllocSvr asked.
    pub alloc: String,
    /// The scheme's name in the cluster config (`[ids.schemes.NAME]`).
    pub scheme: String,
    pub count: u32,
    pub business: u64,
    /// `rongcloud`: the session asked for (absent for the other schemes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<CallSession>,
    /// Nanoseconds since the run started, on the clock of the seq history.
    pub invoke_ns: u64,
    pub complete_ns: u64,
    pub outcome: IdOutcome,
}

/// The session of a `rongcloud` call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSession {
    pub session_type: u32,
    /// The session id sent as text; empty when `session_hash` itself was sent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_id: String,
    /// The 22-bit hash sent, or that of `session_id`: what the ids must carry.
    pub session_hash: u64,
}

impl CallSession {
    pub fn key(&self) -> SessionKey {
        SessionKey { session_type: u64::from(self.session_type), session_hash: self.session_hash }
    }
}

/// A `rongcloud` session as its ids carry it: G2 orders its ids as it orders a worker's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SessionKey {
    pub session_type: u64,
    pub session_hash: u64,
}

impl SessionKey {
    fn of(fields: &Fields) -> SessionKey {
        SessionKey { session_type: fields.session_type, session_hash: fields.session_hash }
    }

    /// `type << 22 | hash`, as the AllocSvrs route the session.
    pub fn key(self) -> u64 {
        self.session_type << 22 | self.session_hash
    }
}

impl std::fmt::Display for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "session (type {}, hash {})", self.session_type, self.session_hash)
    }
}

/// What G2 orders ids within: a worker id, or a session of a scheme without workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Group {
    Worker(u64),
    Session(SessionKey),
}

impl Group {
    fn worker(self) -> Option<u64> {
        match self {
            Group::Worker(w) => Some(w),
            Group::Session(_) => None,
        }
    }

    fn session(self) -> Option<SessionKey> {
        match self {
            Group::Worker(_) => None,
            Group::Session(s) => Some(s),
        }
    }
}

impl std::fmt::Display for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Group::Worker(w) => write!(f, "worker {w}"),
            Group::Session(s) => s.fmt(f),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum IdOutcome {
    /// The answer: its worker id and its ids in order (64-bit ids widened).
    Ok {
        worker_id: u64,
        #[serde(with = "wire_ids")]
        ids: Vec<u128>,
    },
    /// An answer that does not hold the scheme's ids (the wrong field, a `uuidv7` id that is not
    /// 16 bytes): reported as a violation.
    Malformed { reason: String },
    /// Refused before anything was issued (INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED...).
    Fail { code: String },
    /// May have issued ids nobody saw (timeout, lost connection, UNAVAILABLE...).
    Unknown { reason: String },
}

impl IdOutcome {
    /// Reads an answer of a `scheme` call: the 64-bit schemes and `js53` answer in
    /// `ids64_packed` or `ids` (8 big-endian bytes each, or a varint each), `uuidv7` and
    /// `rongcloud` in `ids128_packed` or `ids128` (16 bytes each, big-endian). Anything else is
    /// [`IdOutcome::Malformed`], never a panic: the answer is network input.
    pub fn of_answer(scheme: Scheme, answer: &pb::NextIdsResponse) -> IdOutcome {
        let malformed = |reason: String| IdOutcome::Malformed { reason };
        match scheme.id_bits() {
            53 | 64 => {
                let wide = seqsvr_proto::ids128_count(answer);
                if wide != 0 {
                    return malformed(format!(
                        "{scheme} is a 64-bit scheme but the answer has {wide} 128-bit ids"
                    ));
                }
                match seqsvr_proto::ids64_of(answer) {
                    Ok(ids) => IdOutcome::Ok {
                        worker_id: answer.worker_id,
                        ids: ids.into_iter().map(u128::from).collect(),
                    },
                    Err(why) => malformed(why),
                }
            }
            80 | 128 => {
                let narrow = seqsvr_proto::ids64_count(answer);
                if narrow != 0 {
                    return malformed(format!(
                        "{scheme} ids are wider than 64 bits but the answer has {narrow} 64-bit ids"
                    ));
                }
                match seqsvr_proto::ids128_of(answer) {
                    Ok(ids) => IdOutcome::Ok { worker_id: answer.worker_id, ids },
                    Err(why) => malformed(why),
                }
            }
            bits => malformed(format!("{scheme} ({bits}-bit ids) is not served by NextIds")),
        }
    }
}

/// Ids in JSON: a number when it fits in a `u64` (the 64-bit schemes), else the 8-4-4-4-12 hex
/// form (`uuidv7`, `rongcloud`), so the file stays readable and no JSON reader rounds a 128-bit
/// number.
mod wire_ids {
    use serde::de::Error as _;
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ids: &[u128], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(ids.len()))?;
        for &id in ids {
            match u64::try_from(id) {
                Ok(small) => seq.serialize_element(&small)?,
                Err(_) => seq.serialize_element(&super::hex128(id))?,
            }
        }
        seq.end()
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Number(u64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u128>, D::Error> {
        let wire = Vec::<Wire>::deserialize(d)?;
        wire.into_iter()
            .map(|w| match w {
                Wire::Number(n) => Ok(u128::from(n)),
                Wire::Text(t) => {
                    let hex: String = t.chars().filter(|&c| c != '-').collect();
                    if hex.len() != 32 {
                        return Err(D::Error::custom(format!("{t:?}: not 32 hex digits")));
                    }
                    u128::from_str_radix(&hex, 16)
                        .map_err(|e| D::Error::custom(format!("{t:?}: {e}")))
                }
            })
            .collect()
    }
}

/// A 128-bit value in the 8-4-4-4-12 hex form.
fn hex128(id: u128) -> String {
    let h = format!("{id:032x}");
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// Which promise an [`IdViolation`] breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdViolationKind {
    /// G1: an id issued twice.
    Duplicate,
    /// G2: a call invoked after another completed issued a lower id with the same worker id
    /// (`rongcloud`: of the same session).
    WentBack,
    /// G2: an answer's ids are not strictly increasing.
    NotIncreasing,
    /// The answer does not hold what was asked for (see the module doc).
    Malformed,
}

impl IdViolationKind {
    pub fn label(self) -> &'static str {
        match self {
            IdViolationKind::Duplicate => "G1 duplicate id",
            IdViolationKind::WentBack => "G2 worker or session went back",
            IdViolationKind::NotIncreasing => "G2 not increasing within an answer",
            IdViolationKind::Malformed => "malformed answer",
        }
    }

    /// The `kind` of the violation in the seq report (see [`IdReport::mirror_into`]); `session`:
    /// the violation is a `rongcloud` session's, whose key stands for the uid.
    fn mirror_label(self, session: bool) -> &'static str {
        if session {
            return match self {
                IdViolationKind::Duplicate => "ids: G1 duplicate id (uid = its session key)",
                IdViolationKind::WentBack => "ids: G2 session went back (uid = the session key)",
                IdViolationKind::NotIncreasing => {
                    "ids: G2 not increasing within an answer (uid = the session key)"
                }
                IdViolationKind::Malformed => "ids: malformed answer (uid = its session key)",
            };
        }
        match self {
            IdViolationKind::Duplicate => "ids: G1 duplicate id (uid = its worker id)",
            IdViolationKind::WentBack => "ids: G2 worker went back (uid = the worker id)",
            IdViolationKind::NotIncreasing => {
                "ids: G2 not increasing within an answer (uid = the worker id)"
            }
            IdViolationKind::Malformed => "ids: malformed answer (uid = its worker id)",
        }
    }
}

/// One broken promise, with the calls involved (numbered from 1 as the lines of the run's
/// `ids.jsonl`) and a sentence saying what happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IdViolation {
    pub kind: IdViolationKind,
    pub scheme: String,
    pub worker: Option<u64>,
    /// `rongcloud`: the session whose ids broke the promise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionKey>,
    pub earlier_call: Option<usize>,
    pub later_call: usize,
    /// The ids in question, in the scheme's text form.
    pub earlier_id: Option<String>,
    pub later_id: Option<String>,
    pub message: String,
    #[serde(skip)]
    raw: (Option<u128>, Option<u128>),
}

/// Per scheme: what the calls did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SchemeTally {
    pub calls_ok: u64,
    pub calls_failed: u64,
    pub calls_unknown: u64,
    pub calls_malformed: u64,
    pub ids: u64,
    /// Distinct worker ids seen in the ids.
    pub workers: u64,
    /// Worker ids seen in answers of more than one AllocSvr: handed over (a holder's lease ran
    /// out and another leased the id), so G2 held across holders.
    pub workers_on_several_allocs: u64,
    /// `rongcloud`: distinct sessions seen in the ids.
    pub sessions: u64,
    /// Sessions served by more than one AllocSvr: their section changed owner.
    pub sessions_on_several_allocs: u64,
    /// The last error of a failed or unknown call, to say why a scheme was never served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct IdReport {
    pub n_ok: u64,
    pub n_fail: u64,
    pub n_unknown: u64,
    pub n_malformed: u64,
    pub n_ids: u64,
    pub by_scheme: BTreeMap<String, SchemeTally>,
    pub violations: Vec<IdViolation>,
}

impl IdReport {
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }

    /// Rows for the nemesis summary's Markdown table: totals, per scheme, and the first
    /// violations in full.
    pub fn table_rows(&self) -> String {
        let mut t = format!(
            "| id calls | {} ok ({} ids), {} failed, {} unknown, {} malformed |\n",
            self.n_ok, self.n_ids, self.n_fail, self.n_unknown, self.n_malformed
        );
        for (name, s) in &self.by_scheme {
            let (n, what, several) = match s.sessions {
                0 => (s.workers, "worker ids", s.workers_on_several_allocs),
                _ => (s.sessions, "sessions", s.sessions_on_several_allocs),
            };
            t.push_str(&format!(
                "| ids: {name} | {} ok calls, {} ids, {n} {what} ({several} on several AllocSvrs) \
                 |\n",
                s.calls_ok, s.ids
            ));
        }
        t.push_str(&format!("| id violations | {} |\n", self.violations.len()));
        for v in self.violations.iter().take(10) {
            t.push_str(&format!("| id violation | {} |\n", v.message.replace('|', "/")));
        }
        if self.violations.len() > 10 {
            t.push_str(&format!(
                "| id violation | ... and {} more |\n",
                self.violations.len() - 10
            ));
        }
        t
    }

    /// Adds one violation per id violation to the seq history's report, so that a run with id
    /// violations fails exactly as one with seq violations does (`Report::is_valid`, the exit
    /// status of `seqcheck nemesis`). The mirrored entry's `uid` is the worker id, or the session
    /// key of a `rongcloud` session (`u64::MAX` when there is neither), its values the ids (the
    /// high 64 bits of a wider one: a 128-bit id's time and counter, an 80-bit one's time and
    /// sequence), its operations the calls' times with the full `message` as their outcome (an
    /// `unknown` outcome: `seqcheck` prints it with the violation; nothing checks it again).
    pub fn mirror_into(&self, report: &mut history::Report, calls: &[IdCall]) {
        for v in &self.violations {
            let op = |n: usize| {
                let call = n.checked_sub(1).and_then(|i| calls.get(i));
                history::Operation {
                    client: call.map_or(0, |c| c.client),
                    set: call.map_or(0, |c| c.set),
                    uids: Vec::new(),
                    invoke_ns: call.map_or(0, |c| c.invoke_ns),
                    complete_ns: call.map_or(0, |c| c.complete_ns),
                    outcome: history::Outcome::Unknown { reason: v.message.clone() },
                }
            };
            let later = op(v.later_call);
            report.violations.push(history::Violation {
                uid: v.worker.or(v.session.map(SessionKey::key)).unwrap_or(u64::MAX),
                kind: v.kind.mirror_label(v.session.is_some()),
                earlier: v.earlier_call.map_or_else(|| later.clone(), op),
                earlier_value: v.raw.0.map_or(0, value64),
                later,
                later_value: v.raw.1.map_or(0, value64),
            });
        }
    }
}

/// A 64-bit id as is; an 80-bit or 128-bit one as its high 64 bits.
fn value64(id: u128) -> u64 {
    let shift = if id >> 80 == 0 { 16 } else { 64 };
    u64::try_from(id).unwrap_or((id >> shift) as u64)
}

/// The key G2 orders one worker's (session's) ids by: the id, with the business field zeroed
/// where the layout has one (see the module doc).
fn order_key(layout: &Layout, fields: &Fields, id: u128) -> u128 {
    if layout.width(Part::Business) == 0 {
        return id;
    }
    layout.encode(&Fields { business: 0, ..*fields }).unwrap_or(id)
}

/// One call's ids of one worker or session, for the G2 sweep.
#[derive(Clone, Copy)]
struct Point {
    call: usize,
    invoke_ns: u64,
    complete_ns: u64,
    min: (u128, u128),
    max: (u128, u128),
}

/// Says which call, by whom, when: "call #12 (client 3, alloc 127.0.0.1:4001 of set 0,
/// 1.204–1.209 s)".
fn describe(calls: &[IdCall], i: usize) -> String {
    let c = &calls[i];
    let who = if c.client == FAULT_CLIENT {
        "a fault's probe".to_string()
    } else {
        format!("client {}", c.client)
    };
    format!(
        "call #{} ({who}, alloc {} of set {}, {:.3}–{:.3} s)",
        i + 1,
        c.alloc,
        c.set,
        c.invoke_ns as f64 / 1e9,
        c.complete_ns as f64 / 1e9
    )
}

/// The id in the scheme's text form (hex when it does not decode).
fn id_text(layout: &Layout, id: u128) -> String {
    layout.format(id).unwrap_or_else(|_| hex128(id))
}

/// The id's text form and its time and sequence: "1234 (time 2026-…Z, sequence 5)".
fn describe_id(layout: &Layout, id: u128) -> String {
    let text = id_text(layout, id);
    match layout.decode(id) {
        Ok(f) => {
            let business = if layout.width(Part::Business) > 0 {
                format!(", business {}", f.business)
            } else {
                String::new()
            };
            format!(
                "{text} (time {}, sequence {}{business})",
                rfc3339_ms(layout.unix_ms(f.time)),
                f.sequence
            )
        }
        Err(_) => text,
    }
}

/// Checks `calls` against the guarantees (see the module doc). `layouts`: scheme name → its
/// layout as the cluster config loads it.
pub fn check(calls: &[IdCall], layouts: &BTreeMap<String, Layout>) -> IdReport {
    let mut report = IdReport::default();
    // G1: per scheme, id → the first call that issued it.
    let mut issued: HashMap<&str, HashMap<u128, usize>> = HashMap::new();
    // G2: per (scheme, worker or session), one point per call.
    let mut points: BTreeMap<(&str, Group), Vec<Point>> = BTreeMap::new();
    // Per (scheme, worker or session): the AllocSvrs that answered with it.
    let mut holders: BTreeMap<(&str, Group), BTreeSet<&str>> = BTreeMap::new();
    let mut violations = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let scheme = call.scheme.as_str();
        let tally = report.by_scheme.entry(call.scheme.clone()).or_default();
        let malformed = |group: Option<Group>, id: Option<u128>, why: String| IdViolation {
            kind: IdViolationKind::Malformed,
            scheme: call.scheme.clone(),
            worker: group.and_then(Group::worker),
            session: group.and_then(Group::session),
            earlier_call: None,
            later_call: i + 1,
            earlier_id: None,
            later_id: id
                .map(|id| layouts.get(scheme).map_or_else(|| hex128(id), |l| id_text(l, id))),
            message: format!("malformed answer of {} ({scheme}): {why}", describe(calls, i)),
            raw: (None, id),
        };
        let (worker_id, ids) = match &call.outcome {
            IdOutcome::Ok { worker_id, ids } => (*worker_id, ids),
            IdOutcome::Malformed { reason } => {
                report.n_malformed += 1;
                tally.calls_malformed += 1;
                violations.push(malformed(None, None, reason.clone()));
                continue;
            }
            IdOutcome::Fail { code } => {
                report.n_fail += 1;
                tally.calls_failed += 1;
                tally.last_error = Some(code.clone());
                continue;
            }
            IdOutcome::Unknown { reason } => {
                report.n_unknown += 1;
                tally.calls_unknown += 1;
                tally.last_error = Some(reason.clone());
                continue;
            }
        };
        report.n_ok += 1;
        report.n_ids += ids.len() as u64;
        tally.calls_ok += 1;
        tally.ids += ids.len() as u64;
        let Some(layout) = layouts.get(scheme) else {
            let why = "the scheme is not in the cluster config, its ids cannot be decoded".into();
            violations.push(malformed(None, None, why));
            continue;
        };
        // Who the answer says issued its ids: its worker id, or the session asked for.
        let sessions = layout.scheme() == Scheme::RongCloud;
        let named = match (&call.session, sessions) {
            (_, false) => Some(Group::Worker(worker_id)),
            (Some(session), true) => Some(Group::Session(session.key())),
            (None, true) => None,
        };
        if sessions && worker_id != 0 {
            let why = format!("{scheme} has no worker id but the answer names worker {worker_id}");
            violations.push(malformed(named, None, why));
        }
        if ids.len() != call.count as usize {
            let why = format!("asked for {} ids, got {}", call.count, ids.len());
            violations.push(malformed(named, None, why));
        }
        let mut mine: BTreeMap<Group, Point> = BTreeMap::new();
        for (pos, &id) in ids.iter().enumerate() {
            if pos > 0 && id <= ids[pos - 1] {
                let who = named.map_or_else(|| "no session named".to_string(), |g| g.to_string());
                violations.push(IdViolation {
                    kind: IdViolationKind::NotIncreasing,
                    scheme: call.scheme.clone(),
                    worker: named.and_then(Group::worker),
                    session: named.and_then(Group::session),
                    earlier_call: Some(i + 1),
                    later_call: i + 1,
                    earlier_id: Some(id_text(layout, ids[pos - 1])),
                    later_id: Some(id_text(layout, id)),
                    message: format!(
                        "G2 not increasing within {} ({scheme}, {who}): id {} at position {pos} \
                         after {}",
                        describe(calls, i),
                        describe_id(layout, id),
                        describe_id(layout, ids[pos - 1])
                    ),
                    raw: (Some(ids[pos - 1]), Some(id)),
                });
            }
            let fields = match layout.decode(id) {
                Ok(f) => f,
                Err(e) => {
                    let why = format!("id {} at position {pos} does not decode: {e}", hex128(id));
                    violations.push(malformed(named, Some(id), why));
                    continue;
                }
            };
            let group = match worker_of(layout, &fields) {
                Some(worker) => Group::Worker(worker),
                None => Group::Session(SessionKey::of(&fields)),
            };
            if let Some(asked) = named.filter(|&g| g != group) {
                let says = match asked {
                    Group::Worker(w) => format!("the answer names worker {w}"),
                    Group::Session(s) => format!("the call asked for {s}"),
                };
                let why = format!("{says} but id {} carries {group}", describe_id(layout, id));
                violations.push(malformed(Some(group), Some(id), why));
            }
            // G1.
            let first = issued.entry(scheme).or_default().entry(id).or_insert(i);
            if *first != i || ids[..pos].contains(&id) {
                let j = *first;
                violations.push(IdViolation {
                    kind: IdViolationKind::Duplicate,
                    scheme: call.scheme.clone(),
                    worker: group.worker(),
                    session: group.session(),
                    earlier_call: Some(j + 1),
                    later_call: i + 1,
                    earlier_id: Some(id_text(layout, id)),
                    later_id: Some(id_text(layout, id)),
                    message: format!(
                        "G1 duplicate id {} ({scheme}, {group}) issued by calls #{} and #{}: {} \
                         and {}",
                        describe_id(layout, id),
                        j + 1,
                        i + 1,
                        describe(calls, j),
                        describe(calls, i)
                    ),
                    raw: (Some(id), Some(id)),
                });
            }
            let key = (order_key(layout, &fields, id), id);
            let p = mine.entry(group).or_insert(Point {
                call: i,
                invoke_ns: call.invoke_ns,
                complete_ns: call.complete_ns,
                min: key,
                max: key,
            });
            p.min = p.min.min(key);
            p.max = p.max.max(key);
        }
        for (group, p) in mine {
            points.entry((scheme, group)).or_default().push(p);
            holders.entry((scheme, group)).or_default().insert(call.alloc.as_str());
        }
    }
    for ((scheme, group), allocs) in &holders {
        let tally = report.by_scheme.entry(scheme.to_string()).or_default();
        let several = allocs.len() > 1;
        match group {
            Group::Worker(_) => {
                tally.workers += 1;
                tally.workers_on_several_allocs += u64::from(several);
            }
            Group::Session(_) => {
                tally.sessions += 1;
                tally.sessions_on_several_allocs += u64::from(several);
            }
        }
    }
    // G2 across calls: sweep one worker's (session's) calls by invocation, keeping the largest
    // id among the calls that completed strictly before.
    for ((scheme, group), list) in &points {
        let Some(layout) = layouts.get(*scheme) else { continue };
        let mut by_invoke: Vec<&Point> = list.iter().collect();
        by_invoke.sort_by_key(|p| (p.invoke_ns, p.call));
        let mut by_complete: Vec<&Point> = list.iter().collect();
        by_complete.sort_by_key(|p| (p.complete_ns, p.call));
        let mut j = 0;
        let mut max_done: Option<&Point> = None;
        for b in by_invoke {
            while j < by_complete.len() && by_complete[j].complete_ns < b.invoke_ns {
                if max_done.is_none_or(|m| by_complete[j].max > m.max) {
                    max_done = Some(by_complete[j]);
                }
                j += 1;
            }
            let Some(a) = max_done else { continue };
            if a.max.0 >= b.min.0 {
                let zeroed = if layout.width(Part::Business) > 0 {
                    " (compared with the business field zeroed)"
                } else {
                    ""
                };
                violations.push(IdViolation {
                    kind: IdViolationKind::WentBack,
                    scheme: scheme.to_string(),
                    worker: group.worker(),
                    session: group.session(),
                    earlier_call: Some(a.call + 1),
                    later_call: b.call + 1,
                    earlier_id: Some(id_text(layout, a.max.1)),
                    later_id: Some(id_text(layout, b.min.1)),
                    message: format!(
                        "G2 {group} went back ({scheme}): {} issued {} after {} had issued \
                         {}{zeroed}",
                        describe(calls, b.call),
                        describe_id(layout, b.min.1),
                        describe(calls, a.call),
                        describe_id(layout, a.max.1)
                    ),
                    raw: (Some(a.max.1), Some(b.min.1)),
                });
            }
        }
    }
    violations.sort_by_key(|v| (v.later_call, v.kind));
    report.violations = violations;
    report
}

/// Writes calls as JSON lines (call #N is line N).
pub fn write_jsonl(calls: &[IdCall], mut out: impl Write) -> std::io::Result<()> {
    for call in calls {
        serde_json::to_writer(&mut out, call)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads calls from JSON lines; names the first bad line.
pub fn read_jsonl(input: impl BufRead) -> Result<Vec<IdCall>, String> {
    let mut calls = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        calls.push(serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", n + 1))?);
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use seqsvr_core::idscheme::{issued_fields, LayoutSpec, Stamp};

    /// 2025-06-15, after every default epoch: layouts load at a fixed "now".
    const NOW_MS: u64 = 1_750_000_000_000;

    fn layouts() -> BTreeMap<String, Layout> {
        [Scheme::Snowflake, Scheme::Weibo, Scheme::UuidV7, Scheme::RongCloud, Scheme::Js53]
            .into_iter()
            .map(|s| (s.name().to_string(), LayoutSpec::of(s).load(NOW_MS).unwrap()))
            .collect()
    }

    /// The id `worker` issues at `(time, sequence)` in `scheme` (business 0).
    fn id(scheme: Scheme, worker: u64, time: u64, sequence: u64) -> u128 {
        id_b(scheme, worker, time, sequence, 0)
    }

    fn id_b(scheme: Scheme, worker: u64, time: u64, sequence: u64, business: u64) -> u128 {
        let layout = &layouts()[scheme.name()];
        let fields = issued_fields(layout, worker, Stamp { time, sequence }, business, 0xABCD);
        layout.encode(&fields).unwrap()
    }

    fn ok(scheme: Scheme, worker: u64, invoke_ms: u64, complete_ms: u64, ids: Vec<u128>) -> IdCall {
        IdCall {
            client: 0,
            set: 0,
            alloc: "127.0.0.1:1".into(),
            scheme: scheme.name().into(),
            count: ids.len() as u32,
            business: 0,
            session: None,
            invoke_ns: invoke_ms * 1_000_000,
            complete_ns: complete_ms * 1_000_000,
            outcome: IdOutcome::Ok { worker_id: worker, ids },
        }
    }

    const RC: Scheme = Scheme::RongCloud;

    /// The id session (`session_type`, `session_hash`) gets at `(time, sequence)`.
    fn rc_id(session: (u32, u64), time: u64, sequence: u64) -> u128 {
        let fields = seqsvr_core::idscheme::session_fields(
            Stamp { time: NOW_MS + time, sequence },
            u64::from(session.0),
            session.1,
        );
        layouts()[RC.name()].encode(&fields).unwrap()
    }

    /// A `rongcloud` call of `session` (sent as its hash), answered with `ids` and worker 0.
    fn ok_rc(session: (u32, u64), invoke_ms: u64, complete_ms: u64, ids: Vec<u128>) -> IdCall {
        let session = CallSession {
            session_type: session.0,
            session_id: String::new(),
            session_hash: session.1,
        };
        IdCall { session: Some(session), ..ok(RC, 0, invoke_ms, complete_ms, ids) }
    }

    fn kinds(r: &IdReport) -> Vec<IdViolationKind> {
        r.violations.iter().map(|v| v.kind).collect()
    }

    const SF: Scheme = Scheme::Snowflake;

    #[test]
    fn sequential_calls_of_one_worker_pass_and_are_counted() {
        let calls = vec![
            ok(SF, 3, 0, 10, vec![id(SF, 3, 100, 0), id(SF, 3, 100, 1)]),
            ok(SF, 3, 20, 30, vec![id(SF, 3, 100, 2)]),
            ok(SF, 3, 40, 50, vec![id(SF, 3, 250, 0), id(SF, 3, 250, 1), id(SF, 3, 251, 0)]),
        ];
        let r = check(&calls, &layouts());
        assert!(r.is_valid(), "{:#?}", r.violations);
        assert_eq!((r.n_ok, r.n_ids), (3, 6));
        assert_eq!(r.by_scheme["snowflake"].workers, 1);
    }

    #[test]
    fn a_duplicate_is_found_across_calls_and_workers_names_both_calls() {
        let dup = id(SF, 3, 100, 5);
        // Concurrent calls, so only G1 can catch it.
        let calls = vec![
            ok(SF, 3, 0, 30, vec![id(SF, 3, 100, 4), dup]),
            ok(SF, 3, 10, 40, vec![dup, id(SF, 3, 100, 6)]),
        ];
        let r = check(&calls, &layouts());
        assert_eq!(kinds(&r), vec![IdViolationKind::Duplicate]);
        let v = &r.violations[0];
        assert_eq!((v.earlier_call, v.later_call, v.worker), (Some(1), 2, Some(3)));
        assert!(v.message.starts_with("G1 duplicate id"), "{}", v.message);
        assert!(v.message.contains("issued by calls #1 and #2"), "{}", v.message);
    }

    #[test]
    fn a_duplicate_within_one_answer_is_found() {
        let dup = id(SF, 1, 7, 0);
        let r = check(&[ok(SF, 1, 0, 1, vec![dup, dup])], &layouts());
        assert!(kinds(&r).contains(&IdViolationKind::Duplicate), "{:#?}", r.violations);
        assert!(kinds(&r).contains(&IdViolationKind::NotIncreasing), "{:#?}", r.violations);
    }

    #[test]
    fn a_worker_going_back_across_calls_is_found() {
        let calls = vec![
            ok(SF, 3, 0, 10, vec![id(SF, 3, 500, 0)]),
            // Another worker in between changes nothing.
            ok(SF, 4, 12, 14, vec![id(SF, 4, 1, 0)]),
            // A restart with the clock set back: lower time, same worker.
            ok(SF, 3, 20, 30, vec![id(SF, 3, 400, 0), id(SF, 3, 400, 1)]),
        ];
        let r = check(&calls, &layouts());
        assert_eq!(kinds(&r), vec![IdViolationKind::WentBack]);
        let v = &r.violations[0];
        assert_eq!((v.earlier_call, v.later_call, v.worker), (Some(1), 3, Some(3)));
        assert!(v.message.starts_with("G2 worker 3 went back"), "{}", v.message);
        assert_eq!(v.later_id.as_deref(), Some(id(SF, 3, 400, 0).to_string().as_str()));
    }

    #[test]
    fn repeating_the_last_id_of_an_earlier_call_is_going_back() {
        // Equal is not above: B must be strictly greater than all of A.
        let a = id(SF, 2, 9, 9);
        let calls = vec![ok(SF, 2, 0, 10, vec![a]), ok(SF, 2, 11, 12, vec![a])];
        let r = check(&calls, &layouts());
        assert!(kinds(&r).contains(&IdViolationKind::WentBack), "{:#?}", r.violations);
    }

    #[test]
    fn only_the_largest_id_of_the_earlier_call_counts() {
        // B's ids are above A's first id but not above its last.
        let calls = vec![
            ok(SF, 2, 0, 10, vec![id(SF, 2, 5, 0), id(SF, 2, 8, 0)]),
            ok(SF, 2, 20, 30, vec![id(SF, 2, 6, 0)]),
        ];
        let r = check(&calls, &layouts());
        assert_eq!(kinds(&r), vec![IdViolationKind::WentBack]);
    }

    #[test]
    fn overlapping_calls_may_come_in_any_order() {
        // B was invoked before A completed: no real-time order between them.
        let calls = vec![
            ok(SF, 3, 0, 30, vec![id(SF, 3, 100, 5), id(SF, 3, 100, 6)]),
            ok(SF, 3, 29, 40, vec![id(SF, 3, 100, 1), id(SF, 3, 100, 2)]),
            // C follows both: above the larger of them.
            ok(SF, 3, 41, 50, vec![id(SF, 3, 100, 7)]),
        ];
        let r = check(&calls, &layouts());
        assert!(r.is_valid(), "{:#?}", r.violations);
        // And C below A's ids is caught even though it is above B's.
        let mut bad = calls.clone();
        bad[2] = ok(SF, 3, 41, 50, vec![id(SF, 3, 100, 3)]);
        assert_eq!(kinds(&check(&bad, &layouts())), vec![IdViolationKind::WentBack]);
    }

    #[test]
    fn different_workers_interleave_freely() {
        let calls = vec![
            ok(SF, 1, 0, 10, vec![id(SF, 1, 900, 0)]),
            ok(SF, 2, 20, 30, vec![id(SF, 2, 100, 0)]),
            ok(SF, 1, 40, 50, vec![id(SF, 1, 901, 0)]),
            ok(SF, 2, 60, 70, vec![id(SF, 2, 101, 0)]),
        ];
        let r = check(&calls, &layouts());
        assert!(r.is_valid(), "{:#?}", r.violations);
        assert_eq!(r.by_scheme["snowflake"].workers, 2);
    }

    #[test]
    fn schemes_are_checked_apart() {
        // The same 64-bit value from two schemes is not a duplicate, nor an order (snowflake
        // worker 1 reads as weibo server 0, business 1).
        let w = Scheme::Weibo;
        let shared = id(SF, 1, 50, 0);
        let as_weibo = ok(w, 0, 20, 30, vec![shared]);
        let r = check(&[ok(SF, 1, 0, 10, vec![shared]), as_weibo.clone()], &layouts());
        assert!(r.is_valid(), "{:#?}", r.violations);
        assert_eq!(r.n_ids, 2);
    }

    #[test]
    fn failed_and_unknown_calls_constrain_nothing() {
        let failed = IdCall {
            outcome: IdOutcome::Fail { code: "Unimplemented".into() },
            ..ok(SF, 3, 12, 13, vec![])
        };
        let unknown = IdCall {
            outcome: IdOutcome::Unknown { reason: "DeadlineExceeded: timed out".into() },
            ..ok(SF, 3, 11, 50, vec![])
        };
        let calls = vec![
            ok(SF, 3, 0, 10, vec![id(SF, 3, 100, 0)]),
            unknown,
            failed,
            ok(SF, 3, 60, 70, vec![id(SF, 3, 100, 1)]),
        ];
        let r = check(&calls, &layouts());
        assert!(r.is_valid(), "{:#?}", r.violations);
        assert_eq!((r.n_ok, r.n_fail, r.n_unknown, r.n_ids), (2, 1, 1, 2));
        let t = &r.by_scheme["snowflake"];
        assert_eq!(t.last_error.as_deref(), Some("Unimplemented"));
    }

    #[test]
    fn uuidv7_ids_compare_all_128_bits() {
        let u = Scheme::UuidV7;
        // Same time and counter: the worker bits in rand_b tell them apart; no duplicate.
        let calls = vec![
            ok(u, 1, 0, 10, vec![id(u, 1, NOW_MS, 0)]),
            ok(u, 2, 0, 10, vec![id(u, 2, NOW_MS, 0)]),
            ok(u, 1, 20, 30, vec![id(u, 1, NOW_MS, 1)]),
        ];
        let r = check(&calls, &layouts());
        assert!(r.is_valid(), "{:#?}", r.violations);
        assert_eq!(r.by_scheme["uuidv7"].workers, 2);
        // One ms earlier, same worker, later call: G2.
        let mut bad = calls.clone();
        bad.push(ok(u, 1, 40, 50, vec![id(u, 1, NOW_MS - 1, 9)]));
        let r = check(&bad, &layouts());
        assert_eq!(kinds(&r), vec![IdViolationKind::WentBack]);
        assert!(r.violations[0].later_id.as_deref().unwrap().contains('-'), "uuid text form");
        // The very same 128-bit value twice: G1.
        bad.push(ok(u, 2, 60, 70, vec![id(u, 2, NOW_MS, 0)]));
        assert!(kinds(&check(&bad, &layouts())).contains(&IdViolationKind::Duplicate));
    }

    #[test]
    fn weibo_orders_one_worker_by_its_stamp_whatever_the_business_number() {
        let w = Scheme::Weibo;
        // Same ms, the later call has a lower business number but the next sequence: its
        // whole id is lower, its stamp higher. Not a violation.
        let a = ok(w, 7, 0, 10, vec![id_b(w, 7, 100, 0, 5)]);
        let b = ok(w, 7, 20, 30, vec![id_b(w, 7, 100, 1, 0)]);
        assert!(id_b(w, 7, 100, 1, 0) < id_b(w, 7, 100, 0, 5));
        let r = check(&[a.clone(), b], &layouts());
        assert!(r.is_valid(), "{:#?}", r.violations);
        // The same stamp again under another business number is a worker going back.
        let again = ok(w, 7, 20, 30, vec![id_b(w, 7, 100, 0, 1)]);
        let r = check(&[a, again], &layouts());
        assert_eq!(kinds(&r), vec![IdViolationKind::WentBack]);
        assert!(r.violations[0].message.contains("business field zeroed"));
    }

    #[test]
    fn malformed_answers_are_violations() {
        let layouts = layouts();
        // Fewer ids than asked for.
        let short = IdCall { count: 3, ..ok(SF, 3, 0, 1, vec![id(SF, 3, 1, 0)]) };
        // The answer names another worker than its ids carry.
        let wrong = ok(SF, 9, 2, 3, vec![id(SF, 3, 2, 0)]);
        // A sign bit set: not a snowflake id.
        let negative = ok(SF, 3, 4, 5, vec![1u128 << 63]);
        let r = check(&[short, wrong, negative], &layouts);
        assert_eq!(kinds(&r), vec![IdViolationKind::Malformed; 3], "{:#?}", r.violations);
        assert!(r.violations[1].message.contains("names worker 9"), "{}", r.violations[1].message);
        // Answers that cannot be read at all.
        let mut answer = pb::NextIdsResponse { ids: vec![5], worker_id: 1, ..Default::default() };
        assert!(matches!(
            IdOutcome::of_answer(Scheme::UuidV7, &answer),
            IdOutcome::Malformed { .. }
        ));
        answer.ids.clear();
        answer.ids128 = vec![vec![0; 15]];
        assert!(matches!(
            IdOutcome::of_answer(Scheme::UuidV7, &answer),
            IdOutcome::Malformed { .. }
        ));
        assert!(matches!(IdOutcome::of_answer(SF, &answer), IdOutcome::Malformed { .. }));
        answer.ids128 = vec![(7u128 << 76).to_be_bytes().to_vec()];
        assert_eq!(
            IdOutcome::of_answer(Scheme::UuidV7, &answer),
            IdOutcome::Ok { worker_id: 1, ids: vec![7u128 << 76] }
        );
        // 64-bit ids packed 8 bytes each: read back; a short buffer, or packed 64-bit ids for a
        // 128-bit scheme, is malformed.
        let mut answer = pb::NextIdsResponse { worker_id: 1, ..Default::default() };
        seqsvr_proto::put_ids64(&mut answer, [5u64, 6].into_iter(), true);
        assert_eq!(
            IdOutcome::of_answer(SF, &answer),
            IdOutcome::Ok { worker_id: 1, ids: vec![5, 6] }
        );
        assert!(matches!(
            IdOutcome::of_answer(Scheme::UuidV7, &answer),
            IdOutcome::Malformed { .. }
        ));
        answer.ids64_packed.pop();
        assert!(matches!(IdOutcome::of_answer(SF, &answer), IdOutcome::Malformed { .. }));
        let m = IdCall {
            outcome: IdOutcome::Malformed { reason: "ids128[0] has 15 bytes".into() },
            ..ok(SF, 3, 0, 1, vec![])
        };
        assert_eq!(kinds(&check(&[m], &layouts)), vec![IdViolationKind::Malformed]);
    }

    /// `js53` answers in 64-bit ids; one above 2^53 - 1 (not JavaScript-safe) is malformed.
    #[test]
    fn js53_ids_above_2_pow_53_are_violations() {
        const JS: Scheme = Scheme::Js53;
        let mut answer = pb::NextIdsResponse { worker_id: 3, ..Default::default() };
        let fine = [id(JS, 3, 100, 0), id(JS, 3, 100, 1)];
        seqsvr_proto::put_ids64(&mut answer, fine.iter().map(|&i| i as u64), true);
        let outcome = IdOutcome::of_answer(JS, &answer);
        assert_eq!(outcome, IdOutcome::Ok { worker_id: 3, ids: fine.to_vec() });
        let ok_call = IdCall { outcome, ..ok(JS, 3, 0, 1, fine.to_vec()) };
        let r = check(&[ok_call], &layouts());
        assert!(r.violations.is_empty(), "{:#?}", r.violations);
        // The same worker id and stamp with bit 53 set: above Number.MAX_SAFE_INTEGER.
        let above = fine[1] | (1 << 53);
        let r = check(&[ok(JS, 3, 2, 3, vec![above])], &layouts());
        assert_eq!(kinds(&r), vec![IdViolationKind::Malformed], "{:#?}", r.violations);
        assert!(
            r.violations[0].message.contains("more than 53 bits"),
            "{}",
            r.violations[0].message
        );
    }

    #[test]
    fn id_violations_fail_the_seq_report_too() {
        let a = id(SF, 3, 500, 0);
        let calls = vec![ok(SF, 3, 0, 10, vec![a]), ok(SF, 3, 20, 30, vec![a])];
        let r = check(&calls, &layouts());
        assert_eq!(r.violations.len(), 2, "a duplicate that also goes back: {:#?}", r.violations);
        let mut seq = history::check(&[]);
        assert!(seq.is_valid());
        r.mirror_into(&mut seq, &calls);
        assert!(!seq.is_valid());
        assert_eq!(seq.violations.len(), 2);
        assert_eq!(seq.violations[0].uid, 3);
        assert_eq!(seq.violations[0].later.invoke_ns, 20_000_000);
        assert_eq!(seq.violations[0].earlier.complete_ns, 10_000_000);
        assert!(r.table_rows().contains("| id violations | 2 |"));
    }

    const S1: (u32, u64) = (3, 77);
    const S2: (u32, u64) = (1, 4_000_000);

    #[test]
    fn sequential_calls_of_one_session_pass_and_are_counted() {
        let calls = vec![
            ok_rc(S1, 0, 10, vec![rc_id(S1, 100, 0), rc_id(S1, 100, 1)]),
            ok_rc(S1, 20, 30, vec![rc_id(S1, 100, 2)]),
            ok_rc(S1, 40, 50, vec![rc_id(S1, 250, 0), rc_id(S1, 250, 1), rc_id(S1, 251, 0)]),
        ];
        let r = check(&calls, &layouts());
        assert!(r.is_valid(), "{:#?}", r.violations);
        assert_eq!((r.n_ok, r.n_ids), (3, 6));
        let t = &r.by_scheme["rongcloud"];
        assert_eq!((t.sessions, t.workers, t.ids), (1, 0, 6), "grouped by session: {t:?}");
        assert!(r.table_rows().contains("| ids: rongcloud | 3 ok calls, 6 ids, 1 sessions"));
    }

    #[test]
    fn a_session_going_back_across_calls_is_found_and_named() {
        let calls = vec![
            ok_rc(S1, 0, 10, vec![rc_id(S1, 500, 0)]),
            // Another session in between changes nothing.
            ok_rc(S2, 12, 14, vec![rc_id(S2, 1, 0)]),
            // Its section's new owner started below the time the old one had used.
            ok_rc(S1, 20, 30, vec![rc_id(S1, 400, 0), rc_id(S1, 400, 1)]),
        ];
        let r = check(&calls, &layouts());
        assert_eq!(kinds(&r), vec![IdViolationKind::WentBack], "{:#?}", r.violations);
        let v = &r.violations[0];
        let s1 = SessionKey { session_type: 3, session_hash: 77 };
        assert_eq!(
            (v.earlier_call, v.later_call, v.worker, v.session),
            (Some(1), 3, None, Some(s1))
        );
        assert!(
            v.message.starts_with("G2 session (type 3, hash 77) went back (rongcloud)"),
            "{}",
            v.message
        );
        // Equal is not above either.
        let again = vec![calls[0].clone(), ok_rc(S1, 20, 30, vec![rc_id(S1, 500, 0)])];
        let r = check(&again, &layouts());
        assert!(kinds(&r).contains(&IdViolationKind::WentBack), "{:#?}", r.violations);
        // Mirrored into the seq report under the session's key.
        let mut seq = history::check(&[]);
        r.mirror_into(&mut seq, &again);
        assert_eq!(seq.violations.len(), 2, "a duplicate that also goes back");
        assert!(seq.violations.iter().all(|m| m.uid == 3 << 22 | 77), "{:?}", seq.violations);
        assert!(seq.violations.iter().any(|m| m.kind.contains("session went back")));
        let time_and_sequence = (rc_id(S1, 500, 0) >> 16) as u64;
        assert!(seq.violations.iter().all(|m| m.later_value == time_and_sequence));
    }

    #[test]
    fn different_sessions_interleave_freely() {
        // The same hash under another type is another session.
        let s3 = (S1.0 + 1, S1.1);
        let calls = vec![
            ok_rc(S1, 0, 10, vec![rc_id(S1, 900, 0)]),
            ok_rc(S2, 20, 30, vec![rc_id(S2, 100, 0)]),
            ok_rc(s3, 25, 35, vec![rc_id(s3, 50, 0)]),
            ok_rc(S1, 40, 50, vec![rc_id(S1, 901, 0)]),
            ok_rc(S2, 60, 70, vec![rc_id(S2, 101, 0)]),
            ok_rc(s3, 60, 70, vec![rc_id(s3, 51, 0)]),
        ];
        let r = check(&calls, &layouts());
        assert!(r.is_valid(), "{:#?}", r.violations);
        assert_eq!(r.by_scheme["rongcloud"].sessions, 3);
    }

    #[test]
    fn a_duplicate_across_session_calls_is_found() {
        let dup = rc_id(S1, 100, 5);
        // Concurrent calls, so only G1 can catch it.
        let calls = vec![
            ok_rc(S1, 0, 30, vec![rc_id(S1, 100, 4), dup]),
            ok_rc(S1, 10, 40, vec![dup, rc_id(S1, 100, 6)]),
        ];
        let r = check(&calls, &layouts());
        assert_eq!(kinds(&r), vec![IdViolationKind::Duplicate], "{:#?}", r.violations);
        let v = &r.violations[0];
        assert_eq!((v.earlier_call, v.later_call), (Some(1), 2));
        assert_eq!(v.session, Some(SessionKey { session_type: 3, session_hash: 77 }));
        assert!(v.message.contains("(rongcloud, session (type 3, hash 77))"), "{}", v.message);
        // A concurrent call of another session answered with that id: a duplicate, and not the
        // session asked for.
        let mut bad = calls.clone();
        bad.push(ok_rc(S2, 5, 60, vec![dup]));
        let r = check(&bad, &layouts());
        use IdViolationKind::{Duplicate, Malformed};
        assert_eq!(kinds(&r), vec![Duplicate, Duplicate, Malformed], "{:#?}", r.violations);
        assert!(r.violations[1].message.contains("issued by calls #1 and #3"));
    }

    #[test]
    fn a_session_answer_must_carry_the_session_and_no_worker() {
        let other = ok_rc(S1, 0, 1, vec![rc_id(S2, 1, 0)]);
        let worker = IdCall {
            outcome: IdOutcome::Ok { worker_id: 5, ids: vec![rc_id(S1, 2, 0)] },
            ..ok_rc(S1, 2, 3, vec![rc_id(S1, 2, 0)])
        };
        let r = check(&[other, worker], &layouts());
        assert_eq!(kinds(&r), vec![IdViolationKind::Malformed; 2], "{:#?}", r.violations);
        let m = &r.violations[0].message;
        assert!(m.contains("the call asked for session (type 3, hash 77) but id "), "{m}");
        assert!(m.ends_with("carries session (type 1, hash 4000000)"), "{m}");
        let m = &r.violations[1].message;
        assert!(m.ends_with("rongcloud has no worker id but the answer names worker 5"), "{m}");
        // Answers in ids128, 16 bytes each; 64-bit ids are not rongcloud's.
        let id = rc_id(S1, 3, 0);
        let mut answer =
            pb::NextIdsResponse { ids128: vec![id.to_be_bytes().to_vec()], ..Default::default() };
        assert_eq!(
            IdOutcome::of_answer(RC, &answer),
            IdOutcome::Ok { worker_id: 0, ids: vec![id] }
        );
        answer.ids = vec![1];
        assert!(matches!(IdOutcome::of_answer(RC, &answer), IdOutcome::Malformed { .. }));
        // Or packed in one buffer, as the nemesis asks for them.
        let mut answer = pb::NextIdsResponse::default();
        seqsvr_proto::put_ids128(&mut answer, &[id], true);
        assert_eq!(
            IdOutcome::of_answer(RC, &answer),
            IdOutcome::Ok { worker_id: 0, ids: vec![id] }
        );
        answer.ids128_packed.pop();
        assert!(matches!(IdOutcome::of_answer(RC, &answer), IdOutcome::Malformed { .. }));
    }

    #[test]
    fn jsonl_round_trip_keeps_128_bit_ids() {
        let u = Scheme::UuidV7;
        let calls = vec![
            ok(SF, 3, 0, 10, vec![id(SF, 3, 1, 0), u128::from(u64::MAX)]),
            ok(u, 1, 0, 10, vec![id(u, 1, NOW_MS, 0)]),
            IdCall { outcome: IdOutcome::Unknown { reason: "x".into() }, ..ok(u, 1, 0, 1, vec![]) },
            ok_rc(S1, 20, 30, vec![rc_id(S1, 1, 0)]),
        ];
        let mut buf = Vec::new();
        write_jsonl(&calls, &mut buf).unwrap();
        let text = String::from_utf8(buf.clone()).unwrap();
        assert!(text.lines().nth(1).unwrap().contains("-7"), "uuid text form: {text}");
        assert_eq!(read_jsonl(buf.as_slice()).unwrap(), calls);
        assert!(read_jsonl(&b"{\"nope\": 1}\n"[..]).unwrap_err().starts_with("line 1"));
        let bad = text.replace("-7", "-x");
        assert!(read_jsonl(bad.as_bytes()).unwrap_err().starts_with("line 2"));
    }
}
