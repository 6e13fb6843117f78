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
            slog::Level::Info => tracing::info!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Debug | slog::Level::Trace => {
                tracing::debug!(target: "raft", "{msg}{}", kv.0)
            }
        }
        Ok(())
    }
}

/// A root `slog::Logger` for raft-rs that writes into `tracing`.
pub fn logger() -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!())
}
