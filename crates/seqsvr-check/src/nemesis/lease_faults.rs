//! Faults aimed at how an AllocSvr measures its lease, each built to fail when that measure is
//! wrong: `clock-jump` (its wall clock goes back while it is cut off from the store) and
//! `delay-alloc-replies` (the store's answers reach it late, then it is cut off).
//!
//! Both end the same way, in [`stale_owner_probe`]: as soon as the store is seen to have settled
//! one of the cut-off AllocSvr's sections at another AllocSvr, the fault asks the cut-off
//! AllocSvr for a uid of it directly, as a client with a stale route table would. The store
//! settles a section elsewhere only once the old owner's lease must be over (`lease + margin`
//! after its last grant, DESIGN.md I3), so from then on the heir may serve it at any moment: an
//! AllocSvr whose lease ran out refuses; one that still believes its lease answers (a value from
//! its old range, below the heir's), and that answer alone breaks I3. The probe goes out at once
//! rather than after the heir served, so the window a broken lease leaves open (about a second
//! for `delay-alloc-replies`) needs only one poll of the store and one call to be seen, however
//! long the heir takes to ask for its grant. Then the heir must serve the uid too (the hand-over
//! is real). The uid is one no load client uses (the last of its section), touched at the
//! target first, so the target has `max_seq` room for it and needs no advance to answer.

use super::Ctx;
use crate::cluster::{wait_until, Cluster, ProcKey};
use crate::history::{Operation, Outcome, Violation};
use crate::proxy::Delay;
use seqsvr_core::ids::{SectionId, SetId};
use seqsvr_proto::v1 as pb;
use std::time::Duration;
use tokio::time::Instant;
use tonic::Status;

/// The `client` of the calls these faults make themselves in the history.
const FAULT_CLIENT: u32 = u32::MAX - 2;
/// How long requests are held when a link's requests are to go nowhere: longer than any fault.
const HOLD_REQUESTS: Duration = Duration::from_secs(3600);
/// A delayed heartbeat answer must still arrive within the AllocSvr's attempt timeout: the
/// delay is this share of it, the rest left for the store's own time to answer (a ReadIndex
/// and a commit). Half: under load the store took longer than the quarter that 0.75 left, the
/// AllocSvr dropped the answer, and the lease-from-receive-time teeth went unseen; half leaves
/// the store ~740 ms with `scripts/test.sh`'s tuning, and the window the teeth open
/// (`delay − 2 × margin`, ~640 ms) is still many times what the probe needs.
const DELAY_SHARE_OF_ATTEMPT: f64 = 0.5;

/// The AllocSvr under test and the uid it is probed on.
struct Target {
    key: ProcKey,
    addr: String,
    alloc_id: u64,
    section: SectionId,
    /// The lease epoch of the target's run when it was picked: a run settled elsewhere counts
    /// only with a later epoch (epochs never go down, I4), so a store view older than the pick
    /// (a new leader still catching up) is never taken for the hand-over.
    lease_epoch: u64,
    uid: u64,
}

/// How long the waits of these faults may take: a few hand-overs.
fn limit(cluster: &Cluster) -> Duration {
    let t = &cluster.config.alloc;
    Duration::from_millis(4 * (t.lease_ms + t.lease_margin_ms)) + Duration::from_secs(10)
}

/// One `next(uid)` sent straight to the AllocSvr at `addr` (no route table, no retries),
/// recorded in the history like any client call.
async fn next_at(
    ctx: &Ctx<'_>,
    set: SetId,
    addr: &str,
    uid: u64,
    route_version: u64,
    deadline: Duration,
) -> Result<u64, Status> {
    let invoke_ns = ctx.t0.elapsed().as_nanos() as u64;
    let result = async {
        let channel = seqsvr_client::store::alloc_channel(addr)?;
        let mut client = pb::seq_service_client::SeqServiceClient::new(channel);
        let mut request = tonic::Request::new(pb::NextRequest { uid, route_version });
        request.set_timeout(deadline);
        match tokio::time::timeout(deadline, client.next(request)).await {
            Ok(reply) => reply.map(|r| r.into_inner().seq),
            Err(_) => Err(Status::deadline_exceeded(format!("{addr} did not answer in time"))),
        }
    }
    .await;
    let outcome = match &result {
        Ok(v) => Outcome::Ok { values: vec![*v] },
        // Possibly applied (a lost answer), or not: either way it constrains nothing.
        Err(s) => Outcome::Unknown { reason: format!("{:?}: {}", s.code(), s.message()) },
    };
    ctx.ops.lock().unwrap_or_else(|e| e.into_inner()).push(Operation {
        client: FAULT_CLIENT,
        set: set.0,
        uids: vec![uid],
        invoke_ns,
        complete_ns: ctx.t0.elapsed().as_nanos() as u64,
        outcome,
    });
    result
}

/// Picks a settled section of AllocSvr `key` (waiting, bounded, for one: a restarted AllocSvr
/// gets sections back only after a hand-over) and a uid in it, and has the AllocSvr serve that
/// uid once. `Err` when it cannot run now (not registered, owns nothing settled, no second
/// AllocSvr to take over, does not serve).
async fn target(cluster: &Cluster, key: ProcKey, ctx: &Ctx<'_>) -> anyhow::Result<Target> {
    let ProcKey::Alloc(set, _) = key else { anyhow::bail!("{key:?} is not an AllocSvr") };
    let addr = cluster.proc(key).addr.clone();
    let last = std::sync::Mutex::new(String::from("no answer from the store"));
    let found = wait_until("the AllocSvr to own a settled section", limit(cluster), || async {
        let pick = pick_section(cluster, set, &addr).await;
        pick.map_err(|e| *last.lock().unwrap_or_else(|e| e.into_inner()) = format!("{e:#}")).ok()
    })
    .await;
    let (alloc_id, section, lease_epoch) = found.map_err(|e| {
        let last = last.lock().unwrap_or_else(|e| e.into_inner());
        e.context(format!("last seen: {last}"))
    })?;
    let size = cluster.config.section_size;
    // The last uid of the section: the load's hot uids sit at the start of theirs.
    let uid = section.0 * size + size - 1;
    let target = Target { key, addr, alloc_id, section, lease_epoch, uid };
    next_at(ctx, set, &target.addr, uid, 0, Duration::from_secs(3))
        .await
        .map_err(super::step("the target serving the probe uid"))?;
    Ok(target)
}

/// The registration of the AllocSvr at `addr`, the first section it owns settled and that run's
/// lease epoch, if a second live AllocSvr could take it over.
async fn pick_section(
    cluster: &Cluster,
    set: SetId,
    addr: &str,
) -> anyhow::Result<(u64, SectionId, u64)> {
    let l = cluster.leases(set).await.map_err(super::step("leases"))?;
    let live = |a: &&pb::AllocLease| !a.expired && !a.replaced && !a.draining;
    let me = l
        .allocs
        .iter()
        .filter(live)
        .find(|a| a.addr == addr)
        .ok_or_else(|| anyhow::anyhow!("the AllocSvr at {addr} is not registered and live"))?;
    anyhow::ensure!(
        l.allocs.iter().filter(live).any(|a| a.alloc_id != me.alloc_id),
        "no second live AllocSvr to take over"
    );
    let run = l
        .runs
        .iter()
        .find(|r| r.alloc_id == me.alloc_id && r.settled && r.section_end > r.section_begin)
        .ok_or_else(|| anyhow::anyhow!("alloc {} owns no settled section", me.alloc_id))?;
    Ok((me.alloc_id, SectionId(run.section_begin), run.lease_epoch))
}

/// Once the store has settled `target`'s section at another AllocSvr, asks `target` for the uid
/// directly at once, then has the heir serve it (see the module doc). `Err`: it could not be
/// put to the test (no hand-over, the heir never served). `cut` is when `t` was cut off (for
/// the log).
async fn stale_owner_probe(
    cluster: &Cluster,
    t: &Target,
    cut: Instant,
    ctx: &Ctx<'_>,
) -> anyhow::Result<()> {
    let ProcKey::Alloc(set, _) = t.key else { unreachable!("targets are AllocSvrs") };
    let limit = limit(cluster);
    let (heir, heir_addr, route_version) =
        wait_until("the store to settle the section at another AllocSvr", limit, || async {
            let l = cluster.leases(set).await.ok()?;
            let run = l.runs.iter().find(|r| {
                r.section_begin <= t.section.0
                    && t.section.0 < r.section_end
                    && r.settled
                    && r.alloc_id != t.alloc_id
                    && r.lease_epoch > t.lease_epoch
            })?;
            let heir = l.allocs.iter().find(|a| a.alloc_id == run.alloc_id)?;
            Some((heir.alloc_id, heir.addr.clone(), l.route_version))
        })
        .await?;
    // Settled elsewhere: the cut-off AllocSvr's lease must be over by now.
    let settled_seen_ns = ctx.t0.elapsed().as_nanos() as u64;
    let after_ms = cut.elapsed().as_millis();
    // Sent after the settle was seen, so a longer deadline adds no false positive; a loaded
    // machine's slow answer is still seen.
    let stale = next_at(ctx, set, &t.addr, t.uid, 0, Duration::from_secs(2)).await;
    let stale_done_ns = ctx.t0.elapsed().as_nanos() as u64;
    if let Ok(v) = stale {
        ctx.violate(
            Violation {
                uid: t.uid,
                kind: "single owner (I3): served after the store settled the section elsewhere",
                earlier: Operation {
                    client: FAULT_CLIENT,
                    set: set.0,
                    uids: vec![t.uid],
                    invoke_ns: settled_seen_ns,
                    complete_ns: settled_seen_ns,
                    outcome: Outcome::Unknown {
                        reason: format!("the store settled section {} at alloc {heir}", t.section),
                    },
                },
                earlier_value: 0,
                later: Operation {
                    client: FAULT_CLIENT,
                    set: set.0,
                    uids: vec![t.uid],
                    invoke_ns: settled_seen_ns,
                    complete_ns: stale_done_ns,
                    outcome: Outcome::Ok { values: vec![v] },
                },
                later_value: v,
            },
            format!(
                "(CUT-OFF ALLOCSVR SERVED uid {} = {v} after the store settled its section at \
                 alloc {heir}, {after_ms} ms after the cut (I3)) ",
                t.uid
            ),
        );
    }
    // The store's route version tells the heir (if it has not heard yet) to ask for its grant.
    let served = wait_until("the heir to serve the probe uid", limit, || async {
        next_at(ctx, set, &heir_addr, t.uid, route_version, Duration::from_secs(1)).await.ok()
    })
    .await?;
    match stale {
        Ok(_) => ctx.say(format!("(the heir then served {served}) ")),
        Err(s) => ctx.say(format!(
            "(alloc {heir} took section {} over and served {served}; the cut-off one refused \
             {after_ms} ms after the cut: {:?}) ",
            t.section,
            s.code()
        )),
    }
    Ok(())
}

/// `clock-jump`: the AllocSvr's wall clock jumps 1 h forward under load (a lease on the wall
/// clock would lapse: harmless), then 2 h back while it is cut off from every store member (a
/// lease on the wall clock would look valid for hours). Then the stale-owner probe, then the
/// links heal and the clock is reset.
pub(super) async fn clock_jump(
    cluster: &Cluster,
    key: ProcKey,
    ctx: &Ctx<'_>,
) -> anyhow::Result<()> {
    let t = target(cluster, key, ctx).await?;
    ctx.say(format!("(alloc {}, section {}) ", t.alloc_id, t.section));
    cluster.set_wall_clock_offset(key, "+1h");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.set_wall_clock_offset(key, "-2h");
    cluster.cut_links_of(key, true, false);
    let probed = stale_owner_probe(cluster, &t, Instant::now(), ctx).await;
    cluster.heal_all_links();
    cluster.set_wall_clock_offset(key, "+0");
    probed
}

/// The longest a heartbeat answer may take and still be taken by the AllocSvr: its store
/// client gives each attempt the heartbeat period split over the members it knows, between
/// 150 ms and 1.5 s (`seqsvr-client/src/store.rs`, `StoreClient::call`).
fn heartbeat_attempt(cluster: &Cluster, set: SetId) -> Duration {
    let members = cluster.config.set(set).map_or(3, |s| s.stores.len()).max(2) as u64;
    Duration::from_millis((cluster.config.alloc.heartbeat_ms / members).clamp(150, 1500))
}

/// `delay-alloc-replies`: every answer from the store to the AllocSvr is held for most of its
/// heartbeat attempt timeout (so it is still taken). Once the store granted a heartbeat whose
/// answer is held, the AllocSvr's requests are held too (no later grant), the held answer is
/// let through, and its links are cut. The lease from that grant must be measured from the
/// heartbeat's send time: measured from the answer's arrival it outlasts the store's wait by
/// the delay minus `2 × margin`. Then the stale-owner probe, then the links heal.
///
/// The delay is below `2 × margin` when the heartbeat attempt timeout is (the default tuning):
/// then a lease measured from the answer's arrival is still safe, and this fault checks only
/// that delayed grants and the cut-off that follows keep the promise.
pub(super) async fn delay_alloc_replies(
    cluster: &Cluster,
    key: ProcKey,
    ctx: &Ctx<'_>,
) -> anyhow::Result<()> {
    let ProcKey::Alloc(set, _) = key else { anyhow::bail!("{key:?} is not an AllocSvr") };
    let t = target(cluster, key, ctx).await?;
    let delay = heartbeat_attempt(cluster, set).mul_f64(DELAY_SHARE_OF_ATTEMPT);
    let margin = Duration::from_millis(cluster.config.alloc.lease_margin_ms);
    ctx.say(format!(
        "(alloc {}, section {}, answers held {} ms{}) ",
        t.alloc_id,
        t.section,
        delay.as_millis(),
        if delay > 2 * margin { "" } else { ", within 2 × margin" }
    ));
    let probed = async {
        let held_from = Instant::now();
        cluster.delay_links_from(key, Delay { forward: Duration::ZERO, back: delay });
        wait_until("a heartbeat granted while answers are held", limit(cluster), || async {
            let asked = Instant::now();
            let l = cluster.leases(set).await.ok()?;
            let a = l.allocs.iter().find(|a| a.alloc_id == t.alloc_id)?;
            let since = Duration::from_millis(u64::try_from(a.ms_since_grant).ok()?);
            // Granted after `asked - since`, which must be after the delay began.
            (asked.checked_sub(since)? > held_from).then_some(())
        })
        .await?;
        // Its answer is on its way (held); nothing the AllocSvr sends from now on gets through.
        cluster.delay_links_from(key, Delay { forward: HOLD_REQUESTS, back: delay });
        tokio::time::sleep(delay + Duration::from_millis(100)).await;
        cluster.cut_links_of(key, true, false);
        stale_owner_probe(cluster, &t, Instant::now(), ctx).await
    }
    .await;
    cluster.heal_all_links();
    probed
}
