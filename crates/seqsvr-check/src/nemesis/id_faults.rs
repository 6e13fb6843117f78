//! Ids in the nemesis (issue 10): the id load — a few tasks calling `IdService.NextIds` on
//! random AllocSvrs of every set, every configured scheme, recorded in `ids.jsonl` and checked by
//! [`crate::ids::check`] at the end — and the fault `clock-back-restart`.
//!
//! `rongcloud` ids come from the owner of their session's section only, so its calls go to a
//! small fixed set of sessions and are routed: to the AllocSvr that last served the session, else
//! to one of the set owning its uid, following NOT_OWNER answers (each one recorded: it issued
//! nothing).
//!
//! The other AllocSvr faults (kill-alloc, pause-alloc, partition-alloc, clock-jump...) reach
//! the ids through the same load: a killed or paused AllocSvr's worker ids go back to the pool
//! once its lease must have ended, and whoever leases them next must issue above their
//! persisted high-water mark.

use super::{Ctx, Fault, MEMBER_PICKS};
use crate::cluster::{wait_until, Cluster, ProcKey, WAIT_MAX};
use crate::ids::{CallSession, IdCall, IdOutcome, IdReport, FAULT_CLIENT};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use seqsvr_core::config::{IdSchemeConfig, IdsConfig, SetConfig};
use seqsvr_core::idscheme::{session_hash_of, session_key, Layout, Part, Scheme, SESSION_HASHES};
use seqsvr_proto::v1 as pb;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::{Code, Status};

/// Tasks calling `NextIds`: a few, so calls to one worker id overlap (order must not be
/// demanded of concurrent calls) and follow each other (it must be of sequential ones).
const ID_TASKS: usize = 3;
/// Most ids asked for in one call.
const MAX_COUNT: u32 = 50;
/// The pause between two calls of one task: keeps a soak run's id history (every id is kept
/// for the duplicate check) to a few thousand ids a second.
const PAUSE: Duration = Duration::from_millis(20);
/// Deadline of one load call, as the seq load's.
const CALL_DEADLINE: Duration = Duration::from_secs(3);
/// Wall-clock set-back of `clock-back-restart`, in seconds: drawn from the fault's seeded
/// `member` pick over this range.
const BACK_MIN_S: usize = 5;
const BACK_MAX_S: usize = 120;
/// Sessions a `rongcloud` scheme's load asks for: few, so each gets sequential calls (G2 holds
/// per session) and concurrent ones, yet enough to spread over the sets.
const SESSIONS: usize = 12;

/// A scheme the id load asks for: every configured one.
#[derive(Clone, Debug)]
pub(crate) struct ServedScheme {
    pub(crate) name: String,
    pub(crate) scheme: Scheme,
    /// The largest business number (weibo: 31; 0 for schemes without one).
    pub(crate) business_max: u64,
    /// `rongcloud`: the sessions asked for (empty for the schemes with worker ids).
    pub(crate) sessions: Vec<LoadSession>,
}

impl ServedScheme {
    /// Its ids carry worker ids (any AllocSvr serves it), not sessions.
    fn has_workers(&self) -> bool {
        self.scheme != Scheme::RongCloud
    }
}

/// One session of the `rongcloud` load.
#[derive(Clone, Debug)]
pub(crate) struct LoadSession {
    pub(crate) session: CallSession,
    /// The set owning the uid the session is routed by, when the load knows the sets: asked
    /// first.
    pub(crate) set: Option<u64>,
}

/// [`SESSIONS`] sessions of a `rongcloud` scheme drawn from `seed`, every other one named by a
/// text id (the others by their hash). Session k is one whose uid is in the k-th (modulo) of the
/// sets that own session uids, so every such set serves some; a set owns about 1/n of the
/// uids, so a few draws find one.
fn load_sessions(config: &IdSchemeConfig, sets: &[SetConfig], seed: u64) -> Vec<LoadSession> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5E55_1075);
    let uids = config.session_uids();
    let owner = |key: u64| {
        let uid = config.session_uid(key);
        sets.iter().find(|s| s.uid_begin <= uid && uid < s.uid_end).map(|s| s.id.0)
    };
    let targets: Vec<u64> = match uids.is_empty() {
        true => Vec::new(),
        false => sets
            .iter()
            .filter(|s| s.uid_begin < uids.end && uids.start < s.uid_end)
            .map(|s| s.id.0)
            .collect(),
    };
    (0..SESSIONS)
        .map(|k| {
            let mut draw = || {
                let session_type = rng.random_range(0..16u32);
                if k % 2 == 0 {
                    let id = format!("load-{k}-{:08x}", rng.random::<u32>());
                    let hash = session_hash_of(&id);
                    CallSession { session_type, session_id: id, session_hash: hash }
                } else {
                    let hash = rng.random_range(0..SESSION_HASHES);
                    CallSession { session_type, session_id: String::new(), session_hash: hash }
                }
            };
            let key = |s: &CallSession| session_key(u64::from(s.session_type), s.session_hash);
            let mut session = draw();
            if let Some(&want) = targets.get(k % targets.len().max(1)) {
                for _ in 0..1_000 {
                    if key(&session).and_then(owner) == Some(want) {
                        break;
                    }
                    session = draw();
                }
            }
            let set = match uids.is_empty() {
                true => None,
                false => key(&session).and_then(owner),
            };
            LoadSession { session, set }
        })
        .collect()
}

/// The schemes of the cluster config the id load asks for (with `rongcloud`'s sessions drawn
/// from `seed`), and every scheme's layout (for the checker), loaded at the current wall clock
/// as the AllocSvrs load them.
pub(crate) fn served_schemes(
    ids: &IdsConfig,
    sets: &[SetConfig],
    seed: u64,
) -> anyhow::Result<(Vec<ServedScheme>, BTreeMap<String, Layout>)> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| anyhow::anyhow!("the wall clock is before 1970: {e}"))?
        .as_millis() as u64;
    let loaded = ids.load(now_ms, sets).map_err(|e| anyhow::anyhow!("the cluster's [ids]: {e}"))?;
    let mut served = Vec::new();
    let mut layouts = BTreeMap::new();
    for (name, (layout, scheme)) in loaded {
        let sessions = match scheme.scheme {
            Scheme::RongCloud => load_sessions(&scheme, sets, seed),
            _ => Vec::new(),
        };
        served.push(ServedScheme {
            name: name.clone(),
            scheme: scheme.scheme,
            business_max: layout.max_value(Part::Business),
            sessions,
        });
        layouts.insert(name, layout);
    }
    Ok((served, layouts))
}

/// The id history of a run and what is needed to add to it.
pub(crate) struct IdRecorder {
    pub(crate) schemes: Vec<ServedScheme>,
    calls: Mutex<Vec<IdCall>>,
    t0: Instant,
}

impl IdRecorder {
    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// One `NextIds` at the AllocSvr behind `stub` (no retries), recorded; the answer's worker
    /// id and how many ids it held.
    #[allow(clippy::too_many_arguments)] // one recorded call, every field of its record
    async fn next_ids(
        &self,
        client: u32,
        set: u64,
        addr: &str,
        stub: &mut IdStub,
        scheme: &ServedScheme,
        count: u32,
        business: u64,
        session: Option<&CallSession>,
        deadline: Duration,
    ) -> Result<(u64, usize), Status> {
        let mut request = tonic::Request::new(pb::NextIdsRequest {
            scheme: scheme.name.clone(),
            count,
            business,
            session_type: session.map_or(0, |s| s.session_type),
            session_id: session.map_or_else(String::new, |s| s.session_id.clone()),
            session_hash: session.filter(|s| s.session_id.is_empty()).map(|s| s.session_hash),
            // As the SDK asks (older AllocSvrs answer in `ids128`: both are read).
            packed_ids128: true,
            packed_ids64: true,
        });
        request.set_timeout(deadline);
        let invoke_ns = self.now_ns();
        let result = match tokio::time::timeout(deadline, stub.next_ids(request)).await {
            Ok(reply) => reply.map(|r| r.into_inner()),
            Err(_) => Err(Status::deadline_exceeded(format!("{addr} did not answer in time"))),
        };
        let complete_ns = self.now_ns();
        let (outcome, back) = match result {
            Ok(answer) => {
                let outcome = IdOutcome::of_answer(scheme.scheme, &answer);
                let back = match &outcome {
                    IdOutcome::Ok { worker_id, ids } => Ok((*worker_id, ids.len())),
                    _ => Err(Status::internal("a malformed answer (see the id history)")),
                };
                (outcome, back)
            }
            Err(s) => (outcome_of_error(&s), Err(s)),
        };
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).push(IdCall {
            client,
            set,
            alloc: addr.to_string(),
            scheme: scheme.name.clone(),
            count,
            business,
            session: session.cloned(),
            invoke_ns,
            complete_ns,
            outcome,
        });
        back
    }

    /// `(scheme, worker id)` of every successful answer so far (of the schemes with workers).
    fn workers_used(&self) -> BTreeSet<(String, u64)> {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        calls
            .iter()
            .filter_map(|c| match &c.outcome {
                IdOutcome::Ok { worker_id, ids } if !ids.is_empty() && c.session.is_none() => {
                    Some((c.scheme.clone(), *worker_id))
                }
                _ => None,
            })
            .collect()
    }
}

/// Refused before anything was issued, or possibly issued with the answer lost. Neither
/// constrains the checker; the split is for the counts.
fn outcome_of_error(s: &Status) -> IdOutcome {
    if not_owner(s).is_some() {
        return IdOutcome::Fail { code: format!("{:?}: {}", s.code(), s.message()) };
    }
    match s.code() {
        Code::InvalidArgument
        | Code::NotFound
        | Code::Unimplemented
        | Code::PermissionDenied
        | Code::Unauthenticated => {
            IdOutcome::Fail { code: format!("{:?}: {}", s.code(), s.message()) }
        }
        _ => IdOutcome::Unknown { reason: format!("{:?}: {}", s.code(), s.message()) },
    }
}

/// A NOT_OWNER answer to a session call (issued nothing): the uid the session is routed by, if
/// it says.
fn not_owner(s: &Status) -> Option<Option<u64>> {
    seqsvr_client::ids::session_not_owner_uid(s)
}

/// The AllocSvr `table` (a set's route table) names as serving `uid`: its set and address.
fn owner_in(table: &pb::RouteTable, uid: u64) -> Option<(u64, String)> {
    table.owner_addr_of_uid(uid).map(|addr| (table.set_id, addr.to_string()))
}

/// Marked `seqsvr-no-forward`: each AllocSvr answers for itself (the checks count who issued
/// what; a forwarded call would be the owner's answer under another address).
type IdStub = pb::id_service_client::IdServiceClient<seqsvr_client::seq::AllocChannel>;

fn stub(addr: &str) -> Result<IdStub, Status> {
    let channel = seqsvr_client::store::alloc_channel(addr)?;
    let no_forward = seqsvr_client::seq::NoForward;
    Ok(pb::id_service_client::IdServiceClient::with_interceptor(channel, no_forward))
}

/// The stub of `addr`, made once per task.
async fn cached_stub<'a>(
    stubs: &'a mut BTreeMap<String, IdStub>,
    addr: &str,
) -> Option<&'a mut IdStub> {
    if !stubs.contains_key(addr) {
        match stub(addr) {
            Ok(s) => {
                stubs.insert(addr.to_string(), s);
            }
            Err(e) => {
                // No channel to it (a bad address or TLS setup): nothing sent.
                eprintln!("id load: no channel to {addr}: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                return None;
            }
        }
    }
    stubs.get_mut(addr)
}

/// One load task's state of the `rongcloud` routing: per (scheme, session), the AllocSvr (set,
/// address) that last served it.
type Owners = BTreeMap<(String, usize), (u64, String)>;

/// One load call of a random session of `scheme`: at the AllocSvr that last served it, else at
/// one of the set owning its uid (any, when that is not known). A NOT_OWNER answer (recorded)
/// sends the next try to the owner its route table names, else to another AllocSvr not asked
/// yet; any other failure ends the call and forgets the owner.
#[allow(clippy::too_many_arguments)] // one task's state, passed down
async fn session_call(
    recorder: &IdRecorder,
    client: u32,
    allocs: &[(u64, String)],
    stubs: &mut BTreeMap<String, IdStub>,
    owners: &mut Owners,
    rng: &mut StdRng,
    scheme: &ServedScheme,
    count: u32,
) {
    let k = rng.random_range(0..scheme.sessions.len());
    let session = &scheme.sessions[k];
    let key = (scheme.name.clone(), k);
    let mut refused: BTreeSet<String> = BTreeSet::new();
    let mut next = owners.get(&key).cloned();
    for _ in 0..=allocs.len() {
        let (set, addr) = match next.take() {
            Some(target) => target,
            None => {
                let fresh: Vec<&(u64, String)> =
                    allocs.iter().filter(|(_, a)| !refused.contains(a)).collect();
                let owning: Vec<&(u64, String)> =
                    fresh.iter().copied().filter(|(s, _)| Some(*s) == session.set).collect();
                let pool = if owning.is_empty() { fresh } else { owning };
                if pool.is_empty() {
                    return;
                }
                pool[rng.random_range(0..pool.len())].clone()
            }
        };
        let Some(stub) = cached_stub(stubs, &addr).await else { return };
        let s = Some(&session.session);
        match recorder.next_ids(client, set, &addr, stub, scheme, count, 0, s, CALL_DEADLINE).await
        {
            Ok(_) => {
                owners.insert(key, (set, addr));
                return;
            }
            Err(status) => {
                owners.remove(&key);
                let Some(uid) = not_owner(&status) else { return };
                refused.insert(addr);
                let table = seqsvr_proto::route_table_of(&status);
                next = uid
                    .zip(table)
                    .and_then(|(uid, table)| owner_in(&table, uid))
                    .filter(|(_, a)| !refused.contains(a));
            }
        }
    }
}

/// The running id load.
pub(crate) struct IdLoad {
    stop: Arc<AtomicBool>,
    pub(crate) recorder: Arc<IdRecorder>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts [`ID_TASKS`] tasks, each calling `NextIds` on a random AllocSvr of `allocs` (set,
/// address) for a random served scheme, 1 to [`MAX_COUNT`] ids, a random business number where
/// the scheme has one (`rongcloud`: a random one of its sessions, routed as [`session_call`]
/// says). With no scheme served, no task runs.
pub(crate) fn start_id_load(
    allocs: Vec<(u64, String)>,
    schemes: Vec<ServedScheme>,
    seed: u64,
    t0: Instant,
) -> IdLoad {
    let stop = Arc::new(AtomicBool::new(false));
    let recorder = Arc::new(IdRecorder { schemes, calls: Mutex::new(Vec::new()), t0 });
    let runs = !allocs.is_empty() && !recorder.schemes.is_empty();
    let tasks = (0..if runs { ID_TASKS } else { 0 })
        .map(|task| {
            let (stop, recorder, allocs) = (stop.clone(), recorder.clone(), allocs.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed ^ 0x1D5_1D5 ^ ((task as u64 + 1) << 32));
                let mut stubs = BTreeMap::new();
                let mut owners = Owners::new();
                while !stop.load(Ordering::SeqCst) {
                    let (set, addr) = &allocs[rng.random_range(0..allocs.len())];
                    let scheme = &recorder.schemes[rng.random_range(0..recorder.schemes.len())];
                    let count = rng.random_range(1..=MAX_COUNT);
                    let business = rng.random_range(0..=scheme.business_max);
                    let client = task as u32;
                    if !scheme.sessions.is_empty() {
                        let (r, o, s) = (&*recorder, &mut owners, &mut stubs);
                        session_call(r, client, &allocs, s, o, &mut rng, scheme, count).await;
                        tokio::time::sleep(PAUSE).await;
                        continue;
                    }
                    let Some(s) = cached_stub(&mut stubs, addr).await else { continue };
                    // Recorded whatever the outcome; the checker reads the history.
                    let _ = recorder
                        .next_ids(
                            client,
                            *set,
                            addr,
                            s,
                            scheme,
                            count,
                            business,
                            None,
                            CALL_DEADLINE,
                        )
                        .await;
                    tokio::time::sleep(PAUSE).await;
                }
            })
        })
        .collect();
    IdLoad { stop, recorder, tasks }
}

impl IdLoad {
    /// Stops the tasks, waits for their last calls and saves the history as `ids.jsonl` in
    /// `out_dir` (call #N is line N).
    pub(crate) async fn finish(self, out_dir: &std::path::Path) -> anyhow::Result<Vec<IdCall>> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = t.await;
        }
        let recorder = Arc::try_unwrap(self.recorder)
            .map_err(|_| anyhow::anyhow!("the id load is still running"))?;
        let calls = recorder.calls.into_inner().unwrap_or_else(|e| e.into_inner());
        crate::ids::write_jsonl(
            &calls,
            std::io::BufWriter::new(std::fs::File::create(out_dir.join("ids.jsonl"))?),
        )?;
        Ok(calls)
    }
}

/// The schemes the id load never got one id of, with the last error seen: a run whose id check
/// would be empty for a scheme is not a passing run.
pub(crate) fn unserved(report: &IdReport, schemes: &[ServedScheme]) -> Option<anyhow::Error> {
    let missing: Vec<String> = schemes
        .iter()
        .filter_map(|s| {
            let tally = report.by_scheme.get(&s.name);
            if tally.is_some_and(|t| t.ids > 0) {
                return None;
            }
            let why = tally.and_then(|t| t.last_error.clone()).unwrap_or("no call made".into());
            Some(format!("{} (last: {why})", s.name))
        })
        .collect();
    (!missing.is_empty()).then(|| {
        anyhow::anyhow!(
            "the id load got no id at all of: {}; the id checks are empty for them",
            missing.join(", ")
        )
    })
}

/// The clock set-back of a `clock-back-restart` fault: [`BACK_MIN_S`] to [`BACK_MAX_S`] seconds,
/// from the fault's seeded pick.
fn back_seconds(fault: &Fault) -> usize {
    BACK_MIN_S + (fault.member % MEMBER_PICKS) * (BACK_MAX_S - BACK_MIN_S) / (MEMBER_PICKS - 1)
}

/// Asks the AllocSvr at `addr` for one id of every served scheme with worker ids, again and
/// again (recorded) until each answered once or `limit` passed: per scheme, its worker id or the
/// last error. (`rongcloud` sessions are only served by their owner: the load reaches them.)
async fn serve_each(
    ctx: &Ctx<'_>,
    set: u64,
    addr: &str,
    business: u64,
    limit: Duration,
) -> BTreeMap<String, Result<u64, String>> {
    let rec = ctx.ids;
    let schemes: Vec<&ServedScheme> = rec.schemes.iter().filter(|s| s.has_workers()).collect();
    let mut out: BTreeMap<String, Result<u64, String>> =
        schemes.iter().map(|s| (s.name.clone(), Err("not asked".into()))).collect();
    let until = Instant::now() + limit;
    let mut stub = match stub(addr) {
        Ok(s) => s,
        Err(e) => {
            return out.into_keys().map(|k| (k, Err(format!("no channel: {e}")))).collect();
        }
    };
    loop {
        for &scheme in &schemes {
            if out.get(&scheme.name).is_some_and(|r| r.is_ok()) {
                continue;
            }
            let business = business % scheme.business_max.saturating_add(1);
            let deadline = Duration::from_secs(2);
            let result = rec
                .next_ids(FAULT_CLIENT, set, addr, &mut stub, scheme, 1, business, None, deadline)
                .await;
            let entry = result
                .map(|(worker, _)| worker)
                .map_err(|s| format!("{:?}: {}", s.code(), s.message()));
            out.insert(scheme.name.clone(), entry);
        }
        if out.values().all(|r| r.is_ok()) || Instant::now() >= until {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// "snowflake: worker 3 (re-leased), uuidv7: no id (Unavailable: ...)".
fn describe_served(
    served: &BTreeMap<String, Result<u64, String>>,
    used_before: &BTreeSet<(String, u64)>,
) -> String {
    let parts: Vec<String> = served
        .iter()
        .map(|(name, r)| match r {
            Ok(w) if used_before.contains(&(name.clone(), *w)) => {
                format!("{name}: worker {w} (issued with before: re-leased)")
            }
            Ok(w) => format!("{name}: worker {w}"),
            Err(e) => format!("{name}: no id ({})", e.chars().take(120).collect::<String>()),
        })
        .collect();
    parts.join(", ")
}

/// `clock-back-restart`: `kill -9` an AllocSvr, set its wall clock back by 5 to 120 s (seeded),
/// and once the store has let its registration go (its worker ids back in the pool) restart it:
/// whatever worker ids it leases now — maybe its own former ones, last used at a clock ahead of
/// its own — it must issue above their high-water marks. It must issue ids of at least one
/// scheme (else the fault could not run). After a lease of load on it, `kill -9` and restart it
/// once more with its clock right (a jump forward). The checker judges every id issued.
pub(super) async fn clock_back_restart(
    cluster: &mut Cluster,
    key: ProcKey,
    fault: &Fault,
    ctx: &Ctx<'_>,
) -> anyhow::Result<()> {
    let ProcKey::Alloc(set, i) = key else { anyhow::bail!("{key:?} is not an AllocSvr") };
    anyhow::ensure!(
        ctx.ids.schemes.iter().any(ServedScheme::has_workers),
        "the cluster serves no id scheme with worker ids"
    );
    let addr = cluster.proc(key).addr.clone();
    let t = &cluster.config.alloc;
    let lease = Duration::from_millis(t.lease_ms + t.lease_margin_ms);
    // A few hand-overs, plus a lease of store writes for the high-water marks.
    let limit = 4 * lease + Duration::from_secs(10);
    let back_s = back_seconds(fault);
    let business = fault.member as u64;

    let before = serve_each(ctx, set.0, &addr, business, Duration::ZERO).await;
    ctx.say(format!(
        "(alloc {i}, clock -{back_s} s; it held {}) ",
        describe_served(&before, &BTreeSet::new())
    ));
    cluster.kill9_proc(key);
    cluster.set_wall_clock_offset(key, &format!("-{back_s}"));
    let expired = wait_until("the store to let the killed registration go", limit, || async {
        let l = cluster.leases(set).await.ok()?;
        l.allocs.iter().filter(|a| a.addr == addr).all(|a| a.expired || a.replaced).then_some(())
    })
    .await;
    if let Err(e) = expired {
        // Restarting replaces the registration anyway; its worker ids are freed later.
        ctx.say(format!("({e:#}; restarting anyway) "));
    }
    let used_before = ctx.ids.workers_used();
    cluster.start_proc(key);
    let served = serve_each(ctx, set.0, &addr, business, limit).await;
    let text = describe_served(&served, &used_before);
    if served.values().all(|r| r.is_err()) {
        cluster.set_wall_clock_offset(key, "+0");
        anyhow::bail!("restarted with its clock {back_s} s back, it issued no id: {text}");
    }
    ctx.say(format!("(restarted {back_s} s back: {text}) "));
    // The load's calls reach it at the set-back clock for a while.
    tokio::time::sleep(lease).await;
    let used_before = ctx.ids.workers_used();
    cluster.kill9_proc(key);
    cluster.set_wall_clock_offset(key, "+0");
    cluster.start_proc(key);
    let again = serve_each(ctx, set.0, &addr, business, WAIT_MAX.min(limit)).await;
    ctx.say(format!(
        "(restarted with its clock right: {}) ",
        describe_served(&again, &used_before)
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::FaultKind;

    #[test]
    fn the_set_back_spans_its_range_from_the_seeded_pick() {
        let at = |member| {
            back_seconds(&Fault { kind: FaultKind::ClockBackRestart, set: 0, alloc: 0, member })
        };
        assert_eq!(at(0), BACK_MIN_S);
        assert_eq!(at(MEMBER_PICKS - 1), BACK_MAX_S);
        assert!((0..MEMBER_PICKS).all(|m| (BACK_MIN_S..=BACK_MAX_S).contains(&at(m))));
    }

    #[test]
    fn a_scheme_without_ids_makes_the_run_fail_with_its_last_error() {
        let served = |name: &str, scheme, business_max| ServedScheme {
            name: name.into(),
            scheme,
            business_max,
            sessions: Vec::new(),
        };
        let schemes =
            vec![served("snowflake", Scheme::Snowflake, 0), served("weibo", Scheme::Weibo, 31)];
        let mut report = IdReport::default();
        report.by_scheme.entry("snowflake".into()).or_default().ids = 4;
        report.by_scheme.entry("weibo".into()).or_default().last_error =
            Some("Unimplemented: not yet".into());
        let e = unserved(&report, &schemes).expect("weibo got no id");
        assert!(e.to_string().contains("weibo (last: Unimplemented: not yet)"), "{e}");
        assert!(!e.to_string().contains("snowflake"), "{e}");
        report.by_scheme.entry("weibo".into()).or_default().ids = 1;
        assert!(unserved(&report, &schemes).is_none());
    }

    /// The test clusters' layout: 3 sets of 1000 sections of 100 uids, sessions on all of them.
    #[test]
    fn rongcloud_sessions_spread_over_every_set() {
        let span = 100 * 1000;
        let sets: Vec<SetConfig> = (0..3)
            .map(|set| SetConfig {
                id: seqsvr_core::ids::SetId(set),
                uid_begin: set * span,
                uid_end: (set + 1) * span,
                stores: Vec::new(),
                allocs: Vec::new(),
            })
            .collect();
        let mut ids = crate::cluster::test_ids_config();
        let rong = ids.schemes.get_mut("rongcloud").unwrap();
        (rong.session_uid_begin, rong.session_uid_end) = (Some(0), Some(3 * span));
        let config = rong.clone();
        let (schemes, _) = served_schemes(&ids, &sets, 42).unwrap();
        let rong = schemes.iter().find(|s| s.name == "rongcloud").unwrap();
        assert_eq!(rong.sessions.len(), SESSIONS);
        for (k, s) in rong.sessions.iter().enumerate() {
            let key = session_key(u64::from(s.session.session_type), s.session.session_hash);
            let uid = config.session_uid(key.unwrap());
            assert_eq!(s.set, Some(uid / span), "session {k}: {s:?}");
            assert_eq!(s.set, Some(k as u64 % 3), "session {k}: {s:?}");
            if k % 2 == 0 {
                assert_eq!(s.session.session_hash, session_hash_of(&s.session.session_id));
            } else {
                assert!(s.session.session_id.is_empty());
            }
        }
        let again = served_schemes(&ids, &sets, 42).unwrap().0;
        assert_eq!(format!("{:?}", again), format!("{schemes:?}"), "drawn from the seed");
        assert!(schemes.iter().filter(|s| s.name != "rongcloud").all(|s| s.sessions.is_empty()));
    }

    /// An `IdService` on loopback (plaintext) issuing one id per time unit from a counter, as
    /// worker 5 + its index (`rongcloud`: ids of the session asked for, worker 0); `broken`: the
    /// counter starts over with every call (a holder that forgot its high-water mark). Of
    /// `peers` fakes, session key `k` is served by fake `k % peers.len()` only; the others
    /// answer NOT_OWNER with the session's uid (its key) and a route table naming the owner.
    struct FakeIds {
        layouts: BTreeMap<String, Layout>,
        next: Mutex<u64>,
        broken: bool,
        peers: Vec<String>,
        me: usize,
    }

    /// `table` in protobuf's wire form (this crate has no `prost`), for the NOT_OWNER metadata.
    fn encode_route_table(table: &pb::RouteTable) -> Vec<u8> {
        fn varint(out: &mut Vec<u8>, mut v: u64) {
            while v >= 0x80 {
                out.push(v as u8 | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        }
        fn bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
            varint(out, field << 3 | 2);
            varint(out, b.len() as u64);
            out.extend_from_slice(b);
        }
        let number = |out: &mut Vec<u8>, field: u64, v: u64| {
            varint(out, field << 3);
            varint(out, v);
        };
        let mut out = Vec::new();
        number(&mut out, 1, table.set_id);
        number(&mut out, 2, table.version);
        number(&mut out, 3, table.uid_begin);
        number(&mut out, 4, table.uid_end);
        number(&mut out, 5, table.section_size);
        for e in &table.entries {
            let mut entry = Vec::new();
            number(&mut entry, 1, e.section_begin);
            number(&mut entry, 2, e.section_end);
            number(&mut entry, 3, e.alloc_id);
            bytes(&mut entry, 4, e.addr.as_bytes());
            bytes(&mut out, 6, &entry);
        }
        out
    }

    impl FakeIds {
        fn not_owner(&self, key: u64) -> Status {
            let owner = (key % self.peers.len() as u64) as usize;
            let table = pb::RouteTable {
                set_id: 0,
                version: 1,
                uid_begin: 0,
                uid_end: 1 << 26,
                section_size: 1,
                entries: vec![pb::RouteEntry {
                    section_begin: key,
                    section_end: key + 1,
                    alloc_id: owner as u64,
                    addr: self.peers[owner].clone(),
                }],
            };
            let mut status = Status::failed_precondition("NOT_OWNER: not this fake's session");
            let meta = status.metadata_mut();
            meta.insert(seqsvr_proto::SESSION_UID_METADATA, key.to_string().parse().unwrap());
            let bytes = encode_route_table(&table);
            meta.insert_bin(
                seqsvr_proto::ROUTE_TABLE_METADATA,
                tonic::metadata::MetadataValue::from_bytes(&bytes),
            );
            assert_eq!(seqsvr_proto::route_table_of(&status), Some(table));
            status
        }
    }

    #[tonic::async_trait]
    impl pb::id_service_server::IdService for FakeIds {
        async fn next_ids(
            &self,
            request: tonic::Request<pb::NextIdsRequest>,
        ) -> Result<tonic::Response<pb::NextIdsResponse>, Status> {
            use seqsvr_core::idscheme::{issued_fields, session_fields, Stamp};
            let r = request.into_inner();
            let layout = self.layouts.get(&r.scheme).ok_or_else(|| Status::not_found("scheme"))?;
            let rongcloud = layout.scheme() == Scheme::RongCloud;
            let hash = match r.session_id.is_empty() {
                true => r.session_hash.unwrap_or(0),
                false => session_hash_of(&r.session_id),
            };
            let key = session_key(u64::from(r.session_type), hash);
            if let Some(key) = key.filter(|_| rongcloud) {
                if key % self.peers.len() as u64 != self.me as u64 {
                    return Err(self.not_owner(key));
                }
            }
            let mut next = self.next.lock().unwrap();
            if self.broken {
                *next = 0;
            }
            let worker = if rongcloud { 0 } else { 5 + self.me as u64 };
            let mut answer = pb::NextIdsResponse { worker_id: worker, ..Default::default() };
            let (mut narrow, mut wide) = (Vec::new(), Vec::new());
            for _ in 0..r.count {
                *next += 1;
                let stamp = Stamp { time: 1_000_000 + *next, sequence: 0 };
                let fields = match rongcloud {
                    true => session_fields(stamp, u64::from(r.session_type), hash),
                    false => issued_fields(layout, worker, stamp, r.business, 9),
                };
                let id = layout.encode(&fields).unwrap();
                match u64::try_from(id) {
                    Ok(id) if !rongcloud => narrow.push(id),
                    _ => wide.push(id),
                }
            }
            if !narrow.is_empty() {
                seqsvr_proto::put_ids64(&mut answer, narrow.into_iter(), r.packed_ids64);
            }
            if !wide.is_empty() {
                seqsvr_proto::put_ids128(&mut answer, &wide, r.packed_ids128);
            }
            Ok(tonic::Response::new(answer))
        }

        async fn decode(
            &self,
            _: tonic::Request<pb::DecodeIdRequest>,
        ) -> Result<tonic::Response<pb::DecodeIdResponse>, Status> {
            Err(Status::unimplemented("not needed"))
        }
    }

    /// Runs the id load against `fakes` [`FakeIds`] (all of set 0) until it recorded 30
    /// successful calls, `rongcloud_ok` of them of `rongcloud`, then checks the saved history:
    /// the report, the calls and the fakes' addresses.
    async fn load_against_fakes(
        fakes: usize,
        broken: bool,
        rongcloud_ok: usize,
    ) -> (IdReport, Vec<IdCall>, Vec<String>) {
        let (schemes, layouts) =
            served_schemes(&crate::cluster::test_ids_config(), &[], 7).unwrap();
        let names: Vec<&str> = schemes.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["js53", "rongcloud", "snowflake", "uid-generator", "uuidv7", "weibo"]);
        assert_eq!(schemes[1].sessions.len(), SESSIONS, "rongcloud's sessions");
        let peers: Vec<String> =
            (0..fakes).map(|_| format!("127.0.0.1:{}", crate::cluster::free_port())).collect();
        let mut servers = Vec::new();
        for (me, addr) in peers.iter().enumerate() {
            let next = Mutex::new(0);
            let (layouts, peers) = (layouts.clone(), peers.clone());
            let fake = FakeIds { layouts, next, broken, peers, me };
            servers.push(tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(pb::id_service_server::IdServiceServer::new(fake))
                    .serve(addr.parse().unwrap()),
            ));
        }
        let allocs = peers.iter().map(|a| (0, a.clone())).collect();
        seqsvr_client::tls::use_plaintext(); // the fakes serve plaintext
        let load = start_id_load(allocs, schemes, 7, Instant::now());
        let recorder = load.recorder.clone();
        wait_until("30 successful id calls", WAIT_MAX, || {
            let calls = recorder.calls.lock().unwrap();
            let ok = calls.iter().filter(|c| c.outcome_is_ok());
            let rong = ok.clone().filter(|c| c.session.is_some()).count();
            let done = ok.count() >= 30 && rong >= rongcloud_ok;
            async move { done.then_some(()) }
        })
        .await
        .unwrap();
        drop(recorder);
        let dir = tempfile::tempdir().unwrap();
        let calls = load.finish(dir.path()).await.unwrap();
        servers.iter().for_each(|s| s.abort());
        let file = std::fs::File::open(dir.path().join("ids.jsonl")).unwrap();
        assert_eq!(crate::ids::read_jsonl(std::io::BufReader::new(file)).unwrap(), calls);
        (crate::ids::check(&calls, &layouts), calls, peers)
    }

    impl IdCall {
        fn outcome_is_ok(&self) -> bool {
            matches!(self.outcome, IdOutcome::Ok { .. })
        }
    }

    #[tokio::test]
    async fn the_id_load_records_what_an_id_service_answers() {
        let (r, calls, _) = load_against_fakes(1, false, 3).await;
        assert!(r.is_valid(), "{:#?}", r.violations);
        assert!(r.n_ok >= 30 && r.n_ids >= r.n_ok, "{r:?}");
        let served = r.by_scheme.values().filter(|t| t.ids > 0).count();
        assert!(served >= 3, "random schemes: {:?}", r.by_scheme);
        // Rongcloud calls name their session, which the checker groups by.
        assert!(r.by_scheme["rongcloud"].sessions >= 1, "{:?}", r.by_scheme["rongcloud"]);
        let rong = calls.iter().filter(|c| c.scheme == "rongcloud");
        assert!(rong.clone().all(|c| c.session.is_some()));
        assert!(calls.iter().filter(|c| c.scheme != "rongcloud").all(|c| c.session.is_none()));
    }

    /// The broken fake starts every call at the same time. 30 calls of 5 schemes over 3 tasks:
    /// some task asked for one scheme twice, one call after the other (both start at the same
    /// id); 37 session calls: some task asked for one of the 12 sessions twice.
    #[tokio::test]
    async fn the_id_load_catches_a_server_that_repeats_ids() {
        let (r, _, _) = load_against_fakes(1, true, ID_TASKS * SESSIONS + 1).await;
        let kinds: BTreeSet<_> = r.violations.iter().map(|v| v.kind).collect();
        assert!(kinds.contains(&crate::ids::IdViolationKind::Duplicate), "{kinds:?}");
        assert!(kinds.contains(&crate::ids::IdViolationKind::WentBack), "{kinds:?}");
        let session = r.violations.iter().filter(|v| v.scheme == "rongcloud");
        assert!(session.clone().any(|v| v.kind == crate::ids::IdViolationKind::WentBack));
        assert!(session.clone().all(|v| v.session.is_some() && v.worker.is_none()));
    }

    /// Three fakes, each owning a third of the sessions: every session is served by its owner
    /// only, and a NOT_OWNER (recorded as a refusal) is followed by a call at the owner its route
    /// table names, never at the third fake.
    #[tokio::test]
    async fn the_id_load_routes_sessions_to_their_owner() {
        let (r, calls, peers) = load_against_fakes(3, false, 20).await;
        assert!(r.is_valid(), "{:#?}", r.violations);
        let owner = |c: &IdCall| {
            let s = c.session.as_ref().unwrap();
            let key = session_key(u64::from(s.session_type), s.session_hash).unwrap();
            &peers[(key % 3) as usize]
        };
        let mut refusals = 0;
        let mut refused = BTreeSet::new();
        for task in 0..ID_TASKS as u32 {
            let mine: Vec<&IdCall> =
                calls.iter().filter(|c| c.client == task && c.session.is_some()).collect();
            for (i, c) in mine.iter().enumerate() {
                match &c.outcome {
                    IdOutcome::Ok { .. } => assert_eq!(&c.alloc, owner(c), "{c:?}"),
                    IdOutcome::Fail { code } if code.contains("NOT_OWNER") => {
                        refusals += 1;
                        assert_ne!(&c.alloc, owner(c), "{c:?}");
                        let first = refused.insert((task, owner(c), format!("{:?}", c.session)));
                        assert!(first, "the owner is remembered: {c:?}");
                        let Some(after) = mine.get(i + 1) else { continue };
                        assert_eq!((&after.alloc, &after.session), (owner(c), &c.session));
                        assert!(after.outcome_is_ok(), "{after:?}");
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        assert!(refusals > 0, "some first calls went elsewhere");
        let t = &r.by_scheme["rongcloud"];
        assert!(t.calls_failed == refusals as u64 && t.sessions >= 2, "{t:?}");
    }
}
