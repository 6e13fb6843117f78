//! The cluster tests: real processes on 127.0.0.1 started through the harness
//! (`seqsvr-check/src/cluster.rs`), each test with its own ports and data dirs. One test binary
//! (not one per file): it is linked once, and its tests run side by side
//! (`--test-threads`), most of their time being spent waiting on elections and leases.

mod t10_store_replication;
mod t20_store_failover;
mod t30_store_restart;
mod t31_http;
mod t40_store_no_quorum;
mod t50_store_snapshot;
mod t60_store_data_dir;
mod t70_alloc_serving;
mod t80_alloc_faults;
mod t85_observability;
mod t86_graceful_stop;
mod t90_lost_disk;
mod t91_membership;
mod t92_wiped_voter;
mod t93_store_restart_all;
mod t94_created_marker;
mod t95_teeth_control_persist;
mod t95_teeth_foreign_release;
mod t95_teeth_high_water;
mod t95_teeth_layout;
mod t95_teeth_no_quorum;
mod t95_teeth_readindex_grant;
mod t95_teeth_release_before_stop;
mod t95_teeth_worker_wait;
mod t96_tls;
mod t97_ids;
mod t98_forwarding;
mod t99_alloc_layout;
