//! The `seqsvr.v1` wire API, generated from `proto/` by tonic/prost.
//!
//! Wire types stay at the edge: servers and clients convert them to `seqsvr-core` types by hand,
//! so the `.proto` files and the state machine can change independently.

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("seqsvr.v1");

    /// Encoded `FileDescriptorSet` of the API, for gRPC server reflection (grpcurl).
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("seqsvr_v1_descriptor");
}

/// gRPC metadata key a non-leader StoreSvr sets on its UNAVAILABLE answer: the leader's member id.
pub const LEADER_ID_METADATA: &str = "seqsvr-leader-id";
/// gRPC metadata key a non-leader StoreSvr sets on its UNAVAILABLE answer: the leader's address.
pub const LEADER_ADDR_METADATA: &str = "seqsvr-leader-addr";

/// Largest gRPC message we send or accept: Raft snapshots carry a whole set's state machine.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
