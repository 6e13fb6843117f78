//! Ids in the nemesis (issue 10): the id load — a few tasks calling `IdService.NextIds` on
//! random AllocSvrs of every set, every served scheme, recorded in `ids.jsonl` and checked by
//! [`crate::ids::check`] at the end — and the fault `clock-back-restart`.
//!
//! The other AllocSvr faults (kill-alloc, pause-alloc, partition-alloc, clock-jump...) reach
//! the ids through the same load: a killed or paused AllocSvr's worker ids go back to the pool
//! once its lease must have ended, and whoever leases them next must issue above their
//! persisted high-water mark.

use super::{Ctx, Fault, MEMBER_PICKS};
use crate::cluster::{wait_until, Cluster, ProcKey, WAIT_MAX};
use crate::ids::{IdCall, IdOutcome, IdReport, FAULT_CLIENT};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use seqsvr_core::config::{IdsConfig, SetConfig};
use seqsvr_core::idscheme::{Layout, Part, Scheme};
use seqsvr_proto::v1 as pb;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::Channel;
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

/// A scheme the id load asks for (every configured one but `rongcloud`, which `NextIds` does not
/// serve).
#[derive(Clone, Debug)]
pub(crate) struct ServedScheme {
    pub(crate) name: String,
    pub(crate) scheme: Scheme,
    /// The largest business number (weibo: 31; 0 for schemes without one).
    pub(crate) business_max: u64,
}

/// The schemes of the cluster config the id load asks for, and every scheme's layout (for the
/// checker), loaded at the current wall clock as the AllocSvrs load them.
pub(crate) fn served_schemes(
    ids: &IdsConfig,
    sets: &[SetConfig],
) -> anyhow::Result<(Vec<ServedScheme>, BTreeMap<String, Layout>)> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| anyhow::anyhow!("the wall clock is before 1970: {e}"))?
        .as_millis() as u64;
    let loaded = ids.load(now_ms, sets).map_err(|e| anyhow::anyhow!("the cluster's [ids]: {e}"))?;
    let mut served = Vec::new();
    let mut layouts = BTreeMap::new();
    for (name, (layout, scheme)) in loaded {
        if scheme.scheme != Scheme::RongCloud {
            served.push(ServedScheme {
                name: name.clone(),
                scheme: scheme.scheme,
                business_max: layout.max_value(Part::Business),
            });
        }
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
        stub: &mut pb::id_service_client::IdServiceClient<Channel>,
        scheme: &ServedScheme,
        count: u32,
        business: u64,
        deadline: Duration,
    ) -> Result<(u64, usize), Status> {
        let mut request = tonic::Request::new(pb::NextIdsRequest {
            scheme: scheme.name.clone(),
            count,
            business,
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
            invoke_ns,
            complete_ns,
            outcome,
        });
        back
    }

    /// `(scheme, worker id)` of every successful answer so far.
    fn workers_used(&self) -> BTreeSet<(String, u64)> {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        calls
            .iter()
            .filter_map(|c| match &c.outcome {
                IdOutcome::Ok { worker_id, ids } if !ids.is_empty() => {
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

fn stub(addr: &str) -> Result<pb::id_service_client::IdServiceClient<Channel>, Status> {
    Ok(pb::id_service_client::IdServiceClient::new(seqsvr_client::store::alloc_channel(addr)?))
}

/// The running id load.
pub(crate) struct IdLoad {
    stop: Arc<AtomicBool>,
    pub(crate) recorder: Arc<IdRecorder>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts [`ID_TASKS`] tasks, each calling `NextIds` on a random AllocSvr of `allocs` (set,
/// address) for a random served scheme, 1 to [`MAX_COUNT`] ids, a random business number where
/// the scheme has one. With no scheme served, no task runs.
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
                while !stop.load(Ordering::SeqCst) {
                    let (set, addr) = &allocs[rng.random_range(0..allocs.len())];
                    let scheme = &recorder.schemes[rng.random_range(0..recorder.schemes.len())];
                    let count = rng.random_range(1..=MAX_COUNT);
                    let business = rng.random_range(0..=scheme.business_max);
                    if !stubs.contains_key(addr) {
                        match stub(addr) {
                            Ok(s) => {
                                stubs.insert(addr.clone(), s);
                            }
                            Err(e) => {
                                // No channel to it (a bad address or TLS setup): nothing sent.
                                eprintln!("id load: no channel to {addr}: {e}");
                                tokio::time::sleep(Duration::from_secs(1)).await;
                                continue;
                            }
                        }
                    }
                    let Some(s) = stubs.get_mut(addr) else { continue };
                    let client = task as u32;
                    // Recorded whatever the outcome; the checker reads the history.
                    let _ = recorder
                        .next_ids(client, *set, addr, s, scheme, count, business, CALL_DEADLINE)
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

/// Asks the AllocSvr at `addr` for one id of every served scheme, again and again (recorded)
/// until each answered once or `limit` passed: per scheme, its worker id or the last error.
async fn serve_each(
    ctx: &Ctx<'_>,
    set: u64,
    addr: &str,
    business: u64,
    limit: Duration,
) -> BTreeMap<String, Result<u64, String>> {
    let rec = ctx.ids;
    let mut out: BTreeMap<String, Result<u64, String>> =
        rec.schemes.iter().map(|s| (s.name.clone(), Err("not asked".into()))).collect();
    let until = Instant::now() + limit;
    let mut stub = match stub(addr) {
        Ok(s) => s,
        Err(e) => {
            return out.into_keys().map(|k| (k, Err(format!("no channel: {e}")))).collect();
        }
    };
    loop {
        for scheme in &rec.schemes {
            if out.get(&scheme.name).is_some_and(|r| r.is_ok()) {
                continue;
            }
            let business = business % scheme.business_max.saturating_add(1);
            let deadline = Duration::from_secs(2);
            let result = rec
                .next_ids(FAULT_CLIENT, set, addr, &mut stub, scheme, 1, business, deadline)
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
    anyhow::ensure!(!ctx.ids.schemes.is_empty(), "the cluster serves no id scheme with worker ids");
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
        let schemes = vec![
            ServedScheme { name: "snowflake".into(), scheme: Scheme::Snowflake, business_max: 0 },
            ServedScheme { name: "weibo".into(), scheme: Scheme::Weibo, business_max: 31 },
        ];
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

    /// An `IdService` on loopback (plaintext) issuing one id per time unit from a counter, as
    /// worker 5; `broken`: the counter starts over with every call (a holder that forgot its
    /// high-water mark).
    struct FakeIds {
        layouts: BTreeMap<String, Layout>,
        next: Mutex<u64>,
        broken: bool,
    }

    #[tonic::async_trait]
    impl pb::id_service_server::IdService for FakeIds {
        async fn next_ids(
            &self,
            request: tonic::Request<pb::NextIdsRequest>,
        ) -> Result<tonic::Response<pb::NextIdsResponse>, Status> {
            use seqsvr_core::idscheme::{issued_fields, Stamp};
            let r = request.into_inner();
            let layout = self.layouts.get(&r.scheme).ok_or_else(|| Status::not_found("scheme"))?;
            let mut next = self.next.lock().unwrap();
            if self.broken {
                *next = 0;
            }
            let mut answer = pb::NextIdsResponse { worker_id: 5, ..Default::default() };
            for _ in 0..r.count {
                *next += 1;
                let stamp = Stamp { time: 1_000_000 + *next, sequence: 0 };
                let id = layout.encode(&issued_fields(layout, 5, stamp, r.business, 9)).unwrap();
                match u64::try_from(id) {
                    Ok(id) => answer.ids.push(id),
                    Err(_) => answer.ids128.push(id.to_be_bytes().to_vec()),
                }
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

    /// Runs the id load against a [`FakeIds`] until it recorded 30 successful calls, then
    /// checks the saved history.
    async fn load_against_fake(broken: bool) -> IdReport {
        let (schemes, layouts) = served_schemes(&crate::cluster::test_ids_config(), &[]).unwrap();
        let names: Vec<&str> = schemes.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["snowflake", "uid-generator", "uuidv7", "weibo"], "rongcloud left out");
        let addr = format!("127.0.0.1:{}", crate::cluster::free_port());
        let fake = FakeIds { layouts: layouts.clone(), next: Mutex::new(0), broken };
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pb::id_service_server::IdServiceServer::new(fake))
                .serve(addr.parse().unwrap()),
        );
        let load = start_id_load(vec![(0, addr)], schemes, 7, Instant::now());
        let recorder = load.recorder.clone();
        wait_until("30 successful id calls", WAIT_MAX, || {
            let ok = recorder.calls.lock().unwrap().iter().filter(|c| c.outcome_is_ok()).count();
            async move { (ok >= 30).then_some(()) }
        })
        .await
        .unwrap();
        drop(recorder);
        let dir = tempfile::tempdir().unwrap();
        let calls = load.finish(dir.path()).await.unwrap();
        server.abort();
        let file = std::fs::File::open(dir.path().join("ids.jsonl")).unwrap();
        assert_eq!(crate::ids::read_jsonl(std::io::BufReader::new(file)).unwrap(), calls);
        crate::ids::check(&calls, &layouts)
    }

    impl IdCall {
        fn outcome_is_ok(&self) -> bool {
            matches!(self.outcome, IdOutcome::Ok { .. })
        }
    }

    #[tokio::test]
    async fn the_id_load_records_what_an_id_service_answers() {
        let r = load_against_fake(false).await;
        assert!(r.is_valid(), "{:#?}", r.violations);
        assert!(r.n_ok >= 30 && r.n_ids >= r.n_ok, "{r:?}");
        let served = r.by_scheme.values().filter(|t| t.ids > 0).count();
        assert!(served >= 2, "random schemes: {:?}", r.by_scheme);
    }

    /// 30 calls over 3 tasks: some task made 10, so it asked for one of the 4 schemes twice, one
    /// call after the other; both start at the same id.
    #[tokio::test]
    async fn the_id_load_catches_a_server_that_repeats_ids() {
        let r = load_against_fake(true).await;
        let kinds: BTreeSet<_> = r.violations.iter().map(|v| v.kind).collect();
        assert!(kinds.contains(&crate::ids::IdViolationKind::Duplicate), "{kinds:?}");
        assert!(kinds.contains(&crate::ids::IdViolationKind::WentBack), "{kinds:?}");
    }
}
