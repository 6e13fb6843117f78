//! What every seqsvr server binary does around its own `run`: structured logs, a Tokio runtime,
//! SIGTERM/Ctrl-C as the shutdown signal, and refusing to start a teeth build by accident.
//! Binaries stay thin: parse flags, build a config, call [`serve`].
//!
//! [`args`]: the flags both server binaries share ([`args::ServerArgs`]).
//! [`clock`]: the clock leases are measured on (`CLOCK_BOOTTIME`, which counts suspends).
//! [`metrics`]: the Prometheus exporter (`--metrics-addr`).
//! [`grpc`]: reflection (v1 and v1alpha) and a health reporter every server shares.
//! Mutual TLS and the role check are `seqsvr-tls`'s.

pub mod args;
pub mod clock;
pub mod grpc;
pub mod metrics;

pub use clock::BootInstant;

use std::future::Future;
use std::process::ExitCode;

/// Structured logs to stderr: `text` or `json`, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour codes only for a person at a terminal, never into log files or a collector.
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Logging, the teeth guard, a runtime, then `run(config, shutdown)`. Exit codes: 0 clean
/// shutdown, 1 failure while running, 2 bad configuration or refused start.
pub fn serve<C, F, Fut>(
    log_format: &str,
    config: impl FnOnce() -> anyhow::Result<C>,
    run: F,
) -> ExitCode
where
    F: FnOnce(C, std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    init_tracing(log_format);
    match seqsvr_core::teeth::check_allowed() {
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
        Ok(Some(warning)) => tracing::error!("{warning}"),
        Ok(None) => {}
    }
    let config = match config() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config, Box::pin(shutdown_signal()))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
