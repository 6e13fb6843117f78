//! Newtypes for ids that are all `u64` on the wire and must never be mixed up.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type!(
    /// A section: `uid / section_size`. All uids of a section share one persisted `max_seq`.
    SectionId
);
id_type!(
    /// A StoreSvr member's Raft id, unique within its set (never 0: raft-rs reserves 0).
    NodeId
);
id_type!(
    /// A set: an independent Raft group plus its AllocSvrs, owning one contiguous uid range.
    SetId
);
id_type!(
    /// An AllocSvr *registration*: handed out by the store, never reused. A restarted process
    /// registers anew and gets a new id, so an old incarnation can never share its sections.
    AllocId
);
id_type!(
    /// The fencing token of a run of sections: bumped every time the run changes hands, never
    /// decreasing (I4). An advance carries the epoch its sender owns the section at.
    LeaseEpoch
);
id_type!(
    /// The version of a set's route table: bumped whenever the assignment or an address
    /// changes. Clients send theirs; a newer one rides on replies.
    RouteVersion
);
id_type!(
    /// A sequence value: a section's persisted `max_seq` (the bound no served value passes), or
    /// a value handed to a client. Inside the AllocSvr's table `cur_seq`s stay bare `u64`s (the
    /// hot path stores millions of them); at every interface between tiers they are `Seq`.
    Seq
);

/// Counters start at 0 (no epoch handed out, no route table, nothing allocated).
macro_rules! zero_default {
    ($($name:ident),*) => {$(
        impl Default for $name {
            fn default() -> $name {
                $name(0)
            }
        }
    )*};
}
zero_default!(LeaseEpoch, RouteVersion, Seq);
