//! Raft transport: one task and one bounded queue per peer, sending batches of raft-rs messages
//! over gRPC (`RaftTransport.Send`). Raft tolerates lost messages, so a full queue or a failed
//! send drops the batch and reports the peer unreachable; nothing ever blocks the Ready loop.

use crate::driver::Input;
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use seqsvr_core::ids::{NodeId, SetId};
use seqsvr_proto::v1::raft_transport_client::RaftTransportClient;
use seqsvr_proto::v1::RaftMessageBatch;
use std::collections::HashMap;
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

/// What a peer task tells the driver after a send.
#[derive(Debug)]
pub enum PeerReport {
    Unreachable(NodeId),
    Snapshot { to: NodeId, delivered: bool },
}

pub struct Transport {
    peers: HashMap<u64, mpsc::Sender<Message>>,
}

impl Transport {
    /// Spawns one sender task per peer on the current Tokio runtime.
    pub fn start(
        set_id: SetId,
        self_id: NodeId,
        peers: &[(NodeId, String)],
        driver: mpsc::Sender<Input>,
    ) -> Result<Transport, tonic::transport::Error> {
        let mut senders = HashMap::new();
        for (id, addr) in peers.iter().filter(|(id, _)| *id != self_id) {
            let endpoint = Endpoint::from_shared(format!("http://{addr}"))?
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(SEND_TIMEOUT)
                .tcp_nodelay(true);
            let (tx, rx) = mpsc::channel(PEER_QUEUE_MESSAGES_MAX);
            let peer =
                Peer { set_id, from: self_id, to: *id, addr: addr.clone(), driver: driver.clone() };
            tokio::spawn(peer.run(endpoint, rx));
            senders.insert(id.0, tx);
        }
        Ok(Transport { peers: senders })
    }

    /// Queues messages for their peers; never blocks.
    pub fn send(&self, messages: Vec<Message>) {
        for m in messages {
            let to = m.to;
            match self.peers.get(&to) {
                Some(tx) => {
                    if tx.try_send(m).is_err() {
                        tracing::debug!(to, "raft message dropped: peer queue full or closed");
                    }
                }
                None => tracing::warn!(to, "raft message for a member not in the config dropped"),
            }
        }
    }
}

struct Peer {
    set_id: SetId,
    from: NodeId,
    to: NodeId,
    addr: String,
    driver: mpsc::Sender<Input>,
}

impl Peer {
    async fn run(self, endpoint: Endpoint, mut rx: mpsc::Receiver<Message>) {
        let mut client = RaftTransportClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(seqsvr_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(seqsvr_proto::MAX_MESSAGE_BYTES);
        let mut reachable = true;
        while let Some(first) = rx.recv().await {
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
                messages: batch.iter().map(|m| m.write_to_bytes().unwrap_or_default()).collect(),
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
        let _ = self.driver.try_send(Input::Peer(report));
    }
}
