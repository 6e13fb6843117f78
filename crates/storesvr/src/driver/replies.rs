//! Who waits for what: the reply owed to each pending proposal ([`ProposalReply`], answered at
//! apply) and to each pending read ([`PendingRead`], answered once its ReadIndex is applied).

use super::api::{
    Advanced, Grant, MembershipDone, ReadDone, Reply, RequestError, RouteView, WorkerLease,
};
use crate::leader_state::Unapplied;
use seqsvr_core::arbiter::LeaseConfig;
use seqsvr_core::ids::{AllocId, LeaseEpoch, RouteVersion, SectionId};
use seqsvr_core::section::SectionRange;
use seqsvr_core::store::Applied;

/// Who waits for a proposal, and what they want back.
pub(super) enum ProposalReply {
    Advance(Reply<Advanced>),
    /// A registration, with what it registers: in-flight ones count toward its identity's
    /// registrations (`Driver::check_registrations`).
    Register {
        reply: Reply<AllocId>,
        identity: Option<String>,
        addr: String,
    },
    Move(Reply<LeaseEpoch>),
    Done(Reply<()>),
    Membership(Reply<MembershipDone>),
    Lease(Reply<LeaseConfig>),
    /// A worker lease, with whom and what for: leases in flight count toward the holder's
    /// share (`worker_share.rs`).
    Worker {
        reply: Reply<WorkerLease>,
        alloc: AllocId,
        scheme: String,
    },
    HighWater(Reply<u64>),
    SessionMark(Reply<(u64, u64)>),
    /// The arbiter's own proposal: nobody waits, but the round is over when it resolves.
    Arbiter,
}

impl ProposalReply {
    pub(super) fn answer(self, index: u64, result: Result<Applied, RequestError>) {
        match self {
            ProposalReply::Advance(r) => {
                let _ = r.send(result.and_then(|a| match a {
                    Applied::MaxSeq(sections) => Ok(Advanced { sections, applied_index: index }),
                    other => Err(RequestError::Dropped(format!("unexpected result {other:?}"))),
                }));
            }
            ProposalReply::Register { reply: r, .. } => {
                let _ = r.send(result.and_then(|a| match a {
                    Applied::Registered(id) => Ok(id),
                    other => Err(RequestError::Dropped(format!("unexpected result {other:?}"))),
                }));
            }
            ProposalReply::Move(r) => {
                let _ = r.send(result.and_then(|a| match a {
                    Applied::Assigned { lease_epoch } => Ok(lease_epoch),
                    other => Err(RequestError::Dropped(format!("unexpected result {other:?}"))),
                }));
            }
            ProposalReply::Done(r) => {
                let _ = r.send(result.map(|_| ()));
            }
            ProposalReply::Worker { reply: r, .. } => {
                let _ = r.send(result.and_then(|a| match a {
                    Applied::Worker { worker, high_water_ms } => {
                        Ok(WorkerLease { worker, high_water_ms })
                    }
                    other => Err(RequestError::Dropped(format!("unexpected result {other:?}"))),
                }));
            }
            ProposalReply::HighWater(r) => {
                let _ = r.send(result.and_then(|a| match a {
                    Applied::HighWater(ms) => Ok(ms),
                    other => Err(RequestError::Dropped(format!("unexpected result {other:?}"))),
                }));
            }
            ProposalReply::SessionMark(r) => {
                let _ = r.send(result.and_then(|a| match a {
                    Applied::SessionMark { before, after } => Ok((before, after)),
                    other => Err(RequestError::Dropped(format!("unexpected result {other:?}"))),
                }));
            }
            ProposalReply::Lease(r) => {
                // Answered with the new lease in `Driver::apply`; only failures come here.
                let _ =
                    r.send(result.and_then(|a| {
                        Err(RequestError::Dropped(format!("unexpected result {a:?}")))
                    }));
            }
            ProposalReply::Membership(r) => {
                // Answered with the membership in `Driver::apply`; only failures come here.
                let _ =
                    r.send(result.and_then(|a| {
                        Err(RequestError::Dropped(format!("unexpected result {a:?}")))
                    }));
            }
            ProposalReply::Arbiter => {
                if let Err(e) = result {
                    tracing::info!(error = %e, "arbiter proposal did not apply; will re-plan");
                }
            }
        }
    }
}

/// What a confirmed ReadIndex is for.
pub(super) enum ReadKind {
    MaxSeq {
        sections: Vec<SectionId>,
        reply: Reply<ReadDone>,
    },
    Load {
        range: SectionRange,
        reply: Reply<ReadDone>,
    },
    Heartbeat {
        alloc: AllocId,
        route_version: RouteVersion,
        identity: Option<String>,
        reply: Reply<Grant>,
    },
    Route {
        reply: Reply<RouteView>,
    },
}

impl ReadKind {
    pub(super) fn fail(self, error: RequestError) {
        match self {
            ReadKind::MaxSeq { reply, .. } | ReadKind::Load { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            ReadKind::Heartbeat { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            ReadKind::Route { reply } => {
                let _ = reply.send(Err(error));
            }
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        match self {
            ReadKind::MaxSeq { reply, .. } | ReadKind::Load { reply, .. } => reply.is_closed(),
            ReadKind::Heartbeat { reply, .. } => reply.is_closed(),
            ReadKind::Route { reply } => reply.is_closed(),
        }
    }
}

pub(super) struct PendingRead {
    pub(super) kind: ReadKind,
    /// Set once the leader confirmed its leadership for this read (ReadIndex).
    pub(super) read_index: Option<u64>,
}

/// The error a proposal that did not simply apply is answered with.
pub(super) fn unapplied_error(unapplied: Unapplied) -> RequestError {
    match unapplied {
        Unapplied::Superseded => RequestError::Superseded,
        Unapplied::Unknown => RequestError::OutcomeUnknown,
    }
}
