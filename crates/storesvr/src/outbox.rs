//! What the driver needs from a Raft transport, and what a transport tells back: the seam
//! between `driver/` and `transport.rs` (neither imports the other), which lets the driver's
//! tests run a member over an in-memory network (`driver/harness.rs`).

use raft::eraftpb::Message;
use seqsvr_core::ids::NodeId;
use std::sync::Arc;

/// What a transport tells the driver after a send (the driver turns it into
/// `RawNode::report_unreachable` / `report_snapshot`).
#[derive(Debug)]
pub enum PeerReport {
    Unreachable(NodeId),
    Snapshot { to: NodeId, delivered: bool },
}

/// Where a transport sends its [`PeerReport`]s. It must never block (the real one `try_send`s
/// into the driver's queue: raft tolerates a lost report as it tolerates a lost message).
pub type ReportFn = Arc<dyn Fn(PeerReport) + Send + Sync>;

/// Why a peer cannot be dialled (a malformed address).
pub type PeerError = Box<dyn std::error::Error + Send + Sync>;

/// The operations the driver performs on its transport: send Raft messages, and follow the
/// replicated membership. Implemented by [`crate::transport::Transport`] (gRPC) and, in tests,
/// by an in-memory queue.
pub trait Outbox: Send {
    /// Queues messages for their peers; never blocks.
    fn send(&self, messages: Vec<Message>);

    /// Sends to `id` at `addr` from now on (a new peer, or a new address for a known one).
    fn set_peer(&mut self, id: NodeId, addr: &str) -> Result<(), PeerError>;

    /// Stops sending to `id` (removed from the set).
    fn remove_peer(&mut self, id: NodeId);

    /// Whether this member is vote-blocked, as its batches tell the others.
    fn set_vote_blocked(&self, blocked: bool);

    /// Whether messages to `id` have somewhere to go.
    fn knows(&self, id: NodeId) -> bool;
}
