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
