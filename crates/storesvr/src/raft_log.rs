//! raft-rs logs through `slog`; this drain forwards its records into `tracing` (target `raft`),
//! so one subscriber, one format and one `RUST_LOG` filter cover everything.

use std::fmt::Write as _;

struct TracingDrain;

struct KvText(String);

impl slog::Serializer for KvText {
    fn emit_arguments(&mut self, key: slog::Key, val: &std::fmt::Arguments) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record, values: &slog::OwnedKVList) -> Result<(), slog::Never> {
        use slog::KV as _;
        let mut kv = KvText(String::new());
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let msg = record.msg();
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{msg}{}", kv.0)
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Info if reports_a_state_change(&msg.to_string()) => {
                tracing::info!(target: "raft", "{msg}{}", kv.0)
            }
            slog::Level::Info => tracing::debug!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Debug | slog::Level::Trace => {
                tracing::debug!(target: "raft", "{msg}{}", kv.0)
            }
        }
        Ok(())
    }
}

/// Whether a raft-rs info line reports a change an operator needs (a role change, an election,
/// a snapshot restored); the rest of raft-rs's info chatter (`switched to configuration`, votes
/// cast and received, messages ignored) goes to debug.
fn reports_a_state_change(msg: &str) -> bool {
    const KEPT: [&str; 4] = ["became ", "starting a new election", "restored snapshot", "transfer"];
    KEPT.iter().any(|k| msg.contains(k))
}

/// A root `slog::Logger` for raft-rs that writes into `tracing`.
pub fn logger() -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!())
}

#[cfg(test)]
mod tests {
    use super::reports_a_state_change;

    #[test]
    fn role_changes_stay_at_info_and_chatter_goes_to_debug() {
        assert!(reports_a_state_change("became leader at term 3"));
        assert!(reports_a_state_change("became follower at term 4"));
        assert!(reports_a_state_change("starting a new election"));
        assert!(reports_a_state_change(
            "[commit: 10, term: 2] restored snapshot [index: 10, term: 2]"
        ));
        assert!(reports_a_state_change("[term 3] starts to transfer leadership to 2"));
        assert!(!reports_a_state_change("switched to configuration"));
        assert!(!reports_a_state_change("received votes response"));
        assert!(!reports_a_state_change(
            "[logterm: 2, index: 9, vote: 0] cast vote for 1 [logterm: 2, index: 9] at term 3"
        ));
    }
}
