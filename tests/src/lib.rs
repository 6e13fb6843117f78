//! Cluster tests: they start real seqsvr processes on 127.0.0.1 through the harness in
//! `seqsvr-check` (shared with the nemesis runner) and check invariants from outside.

pub use seqsvr_check::cluster::*;
pub use seqsvr_check::{history, lost_disk, observe};

use history::{Operation, Outcome};
use seqsvr_client::seq::SeqClient;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::Code;

/// Client load that records every call into a history for [`history::check`]: `tasks`
/// concurrent callers sharing one `SeqClient`, each calling `next` round-robin over `uids` (of
/// set 0).
/// INVALID_ARGUMENT is a failure; every other error is "unknown" (it may have allocated).
pub struct RecordedLoad {
    stop: Arc<AtomicBool>,
    ops: Arc<Mutex<Vec<Operation>>>,
    ok: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RecordedLoad {
    pub fn start(client: Arc<SeqClient>, uids: Vec<u64>, tasks: usize) -> RecordedLoad {
        Self::start_at(Instant::now(), client, uids, tasks)
    }

    /// Like [`RecordedLoad::start`], timing calls from `t0`, so that several loads of one test
    /// form one history on one clock.
    pub fn start_at(
        t0: Instant,
        client: Arc<SeqClient>,
        uids: Vec<u64>,
        tasks: usize,
    ) -> RecordedLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(Mutex::new(Vec::new()));
        let ok = Arc::new(AtomicU64::new(0));
        let tasks = (0..tasks)
            .map(|c| {
                let (client, stop, ops, ok, uids) =
                    (client.clone(), stop.clone(), ops.clone(), ok.clone(), uids.clone());
                tokio::spawn(async move {
                    let mut i = c;
                    while !stop.load(Ordering::SeqCst) {
                        let uid = uids[i % uids.len()];
                        i += 1;
                        let invoke_ns = t0.elapsed().as_nanos() as u64;
                        let result = client.next(uid, Duration::from_secs(5)).await;
                        let complete_ns = t0.elapsed().as_nanos() as u64;
                        let outcome = match result {
                            Ok(v) => {
                                ok.fetch_add(1, Ordering::SeqCst);
                                Outcome::Ok { values: vec![v] }
                            }
                            Err(s) if s.code() == Code::InvalidArgument => {
                                Outcome::Fail { code: format!("{:?}", s.code()) }
                            }
                            Err(s) => Outcome::Unknown {
                                reason: format!("{:?}: {}", s.code(), s.message()),
                            },
                        };
                        ops.lock().unwrap_or_else(|e| e.into_inner()).push(Operation {
                            client: c as u32,
                            set: 0,
                            uids: vec![uid],
                            invoke_ns,
                            complete_ns,
                            outcome,
                        });
                    }
                })
            })
            .collect();
        RecordedLoad { stop, ops, ok, tasks }
    }

    /// Successful calls so far.
    pub fn ok_count(&self) -> u64 {
        self.ok.load(Ordering::SeqCst)
    }

    /// Waits until `n` more calls succeeded than when this was called: the set still serves.
    pub async fn wait_progress(&self, what: &str, n: u64) {
        let from = self.ok_count();
        wait_for(&format!("{n} more successful calls {what}"), || async {
            (self.ok_count() >= from + n).then_some(())
        })
        .await
    }

    /// Stops the callers and returns the history.
    pub async fn finish(self) -> Vec<Operation> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.expect("load task");
        }
        std::mem::take(&mut *self.ops.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Checks `history` with the I1 checker: it must hold successful calls and no violation (the
/// failure message starts with "I1/I3 violated", which the teeth runs of `scripts/test.sh` look
/// for).
pub fn assert_no_violation(history: &[Operation]) {
    let report = history::check(history);
    assert!(report.n_ok > 0, "no successful call in the history");
    assert!(
        report.is_valid(),
        "I1/I3 violated: {} violations, first: {:?}",
        report.violations.len(),
        &report.violations[..report.violations.len().min(3)]
    );
}

/// Waits until the AllocSvr at `owner_addr` and another AllocSvr of set 0 both own sections
/// (the second one took half of the first's), as `client`'s route table shows; then up to 8
/// uids of each (`(owner's, others')`), spread over their runs.
pub async fn uids_by_owner(client: &Arc<SeqClient>, owner_addr: &str) -> (Vec<u64>, Vec<u64>) {
    wait_for("both AllocSvrs own sections", || {
        let (client, addr) = (client.clone(), owner_addr.to_string());
        async move {
            let _ = client.current(0, Duration::from_secs(2)).await;
            let tables = client.route_tables();
            let table = tables.first()?;
            let uids_of = |owners: bool| -> Vec<u64> {
                let runs = table.entries.iter().filter(|e| (e.addr == addr) == owners);
                let mut uids: Vec<u64> = runs
                    .flat_map(|e| {
                        let len = e.section_end - e.section_begin;
                        (0..4).map(move |k| e.section_begin + k * len / 4).collect::<Vec<_>>()
                    })
                    .map(|s| s * table.section_size + 3)
                    .collect();
                uids.dedup();
                uids.truncate(8);
                uids
            };
            let (mine, theirs) = (uids_of(true), uids_of(false));
            (!mine.is_empty() && !theirs.is_empty()).then_some((mine, theirs))
        }
    })
    .await
}

/// `NextIds` calls recorded for the id checker (`seqsvr_check::ids`): each call's invoke and
/// completion time on one clock, and what it answered.
pub struct IdRecorder {
    t0: Instant,
    calls: Mutex<Vec<seqsvr_check::ids::IdCall>>,
}

impl Default for IdRecorder {
    fn default() -> Self {
        IdRecorder { t0: Instant::now(), calls: Mutex::new(Vec::new()) }
    }
}

impl IdRecorder {
    /// One `NextIds` at the AllocSvr at `addr` (set 0), recorded; answers the ids (or the
    /// error).
    pub async fn next_ids(
        &self,
        addr: &str,
        scheme: &str,
        count: u32,
        business: u64,
    ) -> Result<(u64, Vec<u128>), tonic::Status> {
        use seqsvr_check::ids::{IdCall, IdOutcome};
        let layout_scheme = test_ids_config().schemes[scheme].scheme;
        let channel = seqsvr_client::store::alloc_channel(addr)?;
        let mut client = seqsvr_proto::v1::id_service_client::IdServiceClient::new(channel);
        let invoke_ns = self.t0.elapsed().as_nanos() as u64;
        let request = seqsvr_proto::v1::NextIdsRequest {
            scheme: scheme.into(),
            count,
            business,
            // As the SDK asks (both are read).
            packed_ids128: true,
            packed_ids64: true,
            ..Default::default()
        };
        let answer = client.next_ids(request).await;
        let complete_ns = self.t0.elapsed().as_nanos() as u64;
        let (outcome, result) = match answer {
            Ok(r) => {
                let outcome = IdOutcome::of_answer(layout_scheme, r.get_ref());
                let result = match &outcome {
                    IdOutcome::Ok { worker_id, ids } => Ok((*worker_id, ids.clone())),
                    other => Err(tonic::Status::internal(format!("{other:?}"))),
                };
                (outcome, result)
            }
            Err(s)
                if matches!(
                    s.code(),
                    Code::InvalidArgument | Code::NotFound | Code::Unimplemented
                ) =>
            {
                (IdOutcome::Fail { code: format!("{:?}", s.code()) }, Err(s))
            }
            Err(s) => (IdOutcome::Unknown { reason: s.message().to_string() }, Err(s)),
        };
        let call = IdCall {
            client: 0,
            set: 0,
            alloc: addr.to_string(),
            scheme: scheme.to_string(),
            count,
            business,
            session: None,
            invoke_ns,
            complete_ns,
            outcome,
        };
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).push(call);
        result
    }

    /// Like [`IdRecorder::next_ids`], but a call that fails the way a busy machine makes calls
    /// fail (a heartbeat answered late lapses the lease for a moment: `UNAVAILABLE`) is
    /// recorded and tried again, until one succeeds or `wait_for` gives up. A wrong answer is
    /// never retried away: every call stays in the history the checker reads.
    pub async fn served_ids(
        &self,
        addr: &str,
        scheme: &str,
        count: u32,
        business: u64,
    ) -> (u64, Vec<u128>) {
        wait_for(&format!("{count} {scheme} ids from {addr}"), || async {
            self.next_ids(addr, scheme, count, business).await.ok()
        })
        .await
    }

    /// `count` ids of a `rongcloud` session through the SDK (which finds the session's owner),
    /// recorded; answers the ids (or the error).
    pub async fn next_session_ids(
        &self,
        client: &seqsvr_client::ids::IdClient,
        scheme: &str,
        count: u32,
        session: &seqsvr_client::ids::Session,
    ) -> Result<Vec<u128>, tonic::Status> {
        use seqsvr_check::ids::{CallSession, IdCall, IdOutcome};
        let invoke_ns = self.t0.elapsed().as_nanos() as u64;
        let answer = client.next_session_ids(scheme, count, session, Duration::from_secs(10)).await;
        let complete_ns = self.t0.elapsed().as_nanos() as u64;
        let (outcome, result) = match answer {
            Ok(ids) => {
                let ids: Vec<u128> = ids.ids.iter().map(|id| id.value()).collect();
                (IdOutcome::Ok { worker_id: 0, ids: ids.clone() }, Ok(ids))
            }
            Err(s) if matches!(s.code(), Code::InvalidArgument | Code::NotFound) => {
                (IdOutcome::Fail { code: format!("{:?}", s.code()) }, Err(s))
            }
            Err(s) => (IdOutcome::Unknown { reason: s.message().to_string() }, Err(s)),
        };
        let session_id = match &session.id {
            seqsvr_client::ids::SessionId::Text(text) => text.clone(),
            seqsvr_client::ids::SessionId::Hash(_) => String::new(),
        };
        let call = IdCall {
            client: 0,
            set: 0,
            alloc: "the session's owner".to_string(),
            scheme: scheme.to_string(),
            count,
            business: 0,
            session: Some(CallSession {
                session_type: session.session_type,
                session_id,
                session_hash: session.hash(),
            }),
            invoke_ns,
            complete_ns,
            outcome,
        };
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).push(call);
        result
    }

    /// Checks every recorded call: successful ones, no id twice, each worker id's ids
    /// increasing in real time. A failure starts with "ids violated", which the teeth runs of
    /// `scripts/test.sh` look for.
    pub fn assert_no_violation(&self) -> seqsvr_check::ids::IdReport {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let layouts = test_ids_config()
            .load(seqsvr_server_now_ms(), &[])
            .expect("the test id schemes load")
            .into_iter()
            .map(|(name, (layout, _))| (name, layout))
            .collect();
        let report = seqsvr_check::ids::check(&calls, &layouts);
        assert!(report.n_ok > 0, "no successful NextIds call recorded");
        assert!(
            report.is_valid(),
            "ids violated: {} violations, first: {:?}",
            report.violations.len(),
            &report.violations[..report.violations.len().min(3)]
        );
        report
    }
}

/// The wall clock in Unix ms (the test process is never under libfaketime).
fn seqsvr_server_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
