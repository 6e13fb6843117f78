//! t90: the lost-disk interleaving (`DESIGN.md` §8, `seqcheck lost-disk`): a lagging member and a
//! member whose data dir was wiped are a majority of three, yet they must not elect a leader that
//! lacks a committed max_seq. The wiped member restarts with `--initial-cluster-state existing`
//! and never votes: until the third member returns, reads fail; afterwards the raise reads back,
//! and the wiped member rejoins as a learner, catches up and is promoted.
//!
//! `scripts/test.sh` runs the same scenario against the `SEQSVR_TEETH=bootstrap-empty-voter` build
//! (`seqcheck lost-disk`, which must report the violation there).

use seqsvr_cluster_tests::lost_disk::{self, LostDiskConfig, RAISED};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_never_helps_elect_a_leader_that_lost_a_committed_max_seq() {
    let report = lost_disk::run(&LostDiskConfig::default()).await.expect("the scenario runs");
    assert!(report.violation.is_none(), "{}", report.violation.unwrap_or_default());
    assert!(
        !report.elected_without_a,
        "the lagging member {} and the wiped member {} elected a leader without {}: {:?}",
        report.b, report.c, report.a, report.notes
    );
    assert_eq!(
        report.c_vote_blocked,
        Some(true),
        "the wiped member {} must say it may not vote",
        report.c
    );
    assert!(report.acknowledged.values().all(|&v| v >= RAISED), "{:?}", report.acknowledged);
}
