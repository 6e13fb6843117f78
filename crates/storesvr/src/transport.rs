//! Raft transport: one task and one bounded queue per peer, sending batches of raft-rs messages
//! over gRPC (`RaftTransport.Send`). Raft tolerates lost messages, so a full queue or a failed
//! send drops the batch and reports the peer unreachable; nothing ever blocks the Ready loop.
//! It knows nothing of the driver: it implements [`Outbox`] and reports through a [`ReportFn`].

use crate::outbox::PeerReport;
use crate::outbox::{Outbox, PeerError, ReportFn};
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use seqsvr_core::ids::{NodeId, SetId};
use seqsvr_proto::v1::raft_transport_client::RaftTransportClient;
use seqsvr_proto::v1::RaftMessageBatch;
use seqsvr_tls::ReloadingClientTls;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::transport::Endpoint;

/// Messages queued per peer before new ones are dropped.
const PEER_QUEUE_MESSAGES_MAX: usize = 4096;
/// Messages sent in one RPC at most.
const BATCH_MESSAGES_MAX: usize = 256;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Upper bound on one send, snapshots included.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Peers come and go with the replicated membership: the driver calls [`Outbox::set_peer`]
/// and [`Outbox::remove_peer`] as membership changes apply. A peer task ends when its queue's
/// sender is dropped.
pub struct Transport {
    set_id: SetId,
    self_id: NodeId,
    self_addr: String,
    /// Where peer tasks report unreachable peers and snapshot outcomes (the driver's queue).
    report: ReportFn,
    runtime: tokio::runtime::Handle,
    peers: HashMap<u64, (String, mpsc::Sender<Message>)>,
    /// The peer plane's TLS (the peer CA bundle, this member's certificate, followed when the
    /// files change); None: plaintext.
    tls: Option<Arc<ReloadingClientTls>>,
    /// Told to every peer with each batch (see `RaftMessageBatch.sender_vote_blocked`).
    vote_blocked: Arc<AtomicBool>,
    /// This member's cluster-file layout, told with each batch (`sender_layout`).
    layout: Option<seqsvr_core::store::SetLayout>,
}

impl Transport {
    /// Spawns one sender task per peer on the current Tokio runtime (later peers too). `report`
    /// must not block: it is called from the peer tasks.
    pub fn start(
        set_id: SetId,
        self_id: NodeId,
        self_addr: String,
        peers: &[(NodeId, String)],
        report: ReportFn,
        tls: Option<Arc<ReloadingClientTls>>,
        layout: Option<seqsvr_core::store::SetLayout>,
    ) -> Result<Transport, tonic::transport::Error> {
        let mut transport = Transport {
            set_id,
            self_id,
            self_addr,
            report,
            runtime: tokio::runtime::Handle::current(),
            peers: HashMap::new(),
            vote_blocked: Arc::new(AtomicBool::new(false)),
            tls,
            layout,
        };
        for (id, addr) in peers {
            transport.dial(*id, addr)?;
        }
        Ok(transport)
    }

    /// Sends to `id` at `addr` from now on (a new peer, or a new address for a known one).
    fn dial(&mut self, id: NodeId, addr: &str) -> Result<(), tonic::transport::Error> {
        if id == self.self_id || self.peers.get(&id.0).is_some_and(|(a, _)| a == addr) {
            return Ok(());
        }
        // Checked now: a bad address is refused here, not in the peer's task.
        let current = self.tls.as_ref().map(|t| t.current());
        peer_endpoint(addr, current.as_ref().map(|(_, c)| c))?;
        let (tx, rx) = mpsc::channel(PEER_QUEUE_MESSAGES_MAX);
        let peer = Peer {
            set_id: self.set_id,
            from: self.self_id,
            from_addr: self.self_addr.clone(),
            to: id,
            addr: addr.to_string(),
            report: self.report.clone(),
            vote_blocked: self.vote_blocked.clone(),
            tls: self.tls.clone(),
            layout: self.layout.map(|l| seqsvr_proto::v1::SetLayout {
                section_size: l.section_size,
                uid_begin: l.uid_begin,
                uid_end: l.uid_end,
            }),
        };
        self.runtime.spawn(peer.run(rx));
        if let Some((old, _)) = self.peers.insert(id.0, (addr.to_string(), tx)) {
            tracing::info!(peer = %id, from = %old, to = %addr, "raft peer address changed");
        } else {
            tracing::info!(peer = %id, %addr, "raft peer added");
        }
        Ok(())
    }
}

impl Outbox for Transport {
    fn set_peer(&mut self, id: NodeId, addr: &str) -> Result<(), PeerError> {
        self.dial(id, addr).map_err(PeerError::from)
    }

    /// Stops sending to `id` (removed from the set); its task ends.
    fn remove_peer(&mut self, id: NodeId) {
        if self.peers.remove(&id.0).is_some() {
            tracing::info!(peer = %id, "raft peer removed");
        }
    }

    /// Whether this member is vote-blocked, as its batches tell the others.
    fn set_vote_blocked(&self, blocked: bool) {
        self.vote_blocked.store(blocked, Ordering::Relaxed);
    }

    /// Whether messages to `id` have somewhere to go.
    fn knows(&self, id: NodeId) -> bool {
        self.peers.contains_key(&id.0)
    }

    /// Queues messages for their peers; never blocks.
    fn send(&self, messages: Vec<Message>) {
        for m in messages {
            let to = m.to;
            match self.peers.get(&to) {
                Some((_, tx)) => {
                    if tx.try_send(m).is_err() {
                        tracing::debug!(to, "raft message dropped: peer queue full or closed");
                    }
                }
                None => tracing::warn!(to, "raft message for a member of unknown address dropped"),
            }
        }
    }
}

/// The endpoint of a peer at `addr`, over TLS with `tls` when given.
fn peer_endpoint(
    addr: &str,
    tls: Option<&tonic::transport::ClientTlsConfig>,
) -> Result<Endpoint, tonic::transport::Error> {
    Ok(seqsvr_tls::endpoint_with_config(addr, tls)?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(SEND_TIMEOUT)
        .tcp_nodelay(true))
}

struct Peer {
    set_id: SetId,
    from: NodeId,
    from_addr: String,
    to: NodeId,
    addr: String,
    report: ReportFn,
    vote_blocked: Arc<AtomicBool>,
    tls: Option<Arc<ReloadingClientTls>>,
    layout: Option<seqsvr_proto::v1::SetLayout>,
}

type PeerClient = RaftTransportClient<tonic::transport::Channel>;

impl Peer {
    /// A client on a new lazy channel, with the TLS configuration of `generation` (if any).
    fn client(&self) -> Option<(u64, PeerClient)> {
        let current = self.tls.as_ref().map(|t| t.current());
        let endpoint = peer_endpoint(&self.addr, current.as_ref().map(|(_, c)| c)).ok()?;
        let client = RaftTransportClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(seqsvr_proto::RAFT_MESSAGE_MAX_BYTES)
            .max_encoding_message_size(seqsvr_proto::RAFT_MESSAGE_MAX_BYTES);
        Some((current.map_or(0, |(g, _)| g), client))
    }

    async fn run(self, mut rx: mpsc::Receiver<Message>) {
        // The address was checked when the peer was added (`Transport::dial`).
        let Some((mut generation, mut client)) = self.client() else {
            tracing::error!(peer = %self.to, addr = %self.addr, "raft peer address unusable");
            return;
        };
        let mut reachable = true;
        while let Some(first) = rx.recv().await {
            // A rotated certificate: a new connection presents it (the old one is dropped).
            if self.tls.as_ref().is_some_and(|t| t.current().0 != generation) {
                if let Some((g, c)) = self.client() {
                    (generation, client) = (g, c);
                }
            }
            let mut batch = vec![first];
            while batch.len() < BATCH_MESSAGES_MAX {
                match rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
            let has_snapshot = batch.iter().any(|m| m.get_msg_type() == MessageType::MsgSnapshot);
            let request = RaftMessageBatch {
                set_id: self.set_id.0,
                from: self.from.0,
                messages: batch
                    .iter()
                    .map(|m| m.write_to_bytes().expect("a raft message encodes"))
                    .collect(),
                from_addr: self.from_addr.clone(),
                sender_vote_blocked: self.vote_blocked.load(Ordering::Relaxed),
                sender_commands_version: seqsvr_core::store::COMMANDS_VERSION,
                sender_layout: self.layout,
            };
            match client.send(request).await {
                Ok(_) => {
                    if !reachable {
                        tracing::info!(peer = %self.to, addr = %self.addr, "raft peer reachable again");
                        reachable = true;
                    }
                    if has_snapshot {
                        self.report(PeerReport::Snapshot { to: self.to, delivered: true });
                    }
                }
                Err(status) => {
                    if reachable {
                        tracing::warn!(peer = %self.to, addr = %self.addr, error = %status.message(),
                            "raft peer unreachable; dropping messages until it answers");
                        reachable = false;
                    }
                    self.report(PeerReport::Unreachable(self.to));
                    if has_snapshot {
                        self.report(PeerReport::Snapshot { to: self.to, delivered: false });
                    }
                }
            }
        }
    }

    fn report(&self, report: PeerReport) {
        (self.report)(report);
    }
}
