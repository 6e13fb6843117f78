//! `storesvr`: thin entry point; everything lives in the library.

use clap::Parser;
use seqsvr_storesvr::config::{Args, NodeConfig};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = Args::parse();
    init_tracing(&args.log_format);
    let teeth_ok = std::env::var("SEQSVR_TEETH_BUILD_OK").is_ok_and(|v| v == "1");
    if let Err(e) = seqsvr_core::teeth::check_allowed(teeth_ok) {
        tracing::error!("{e}");
        return ExitCode::from(2);
    }
    if !seqsvr_core::teeth::enabled().is_empty() {
        tracing::error!(teeth = ?seqsvr_core::teeth::enabled(), "UNSAFE TEETH BUILD: it breaks the promise on purpose");
    }
    let config = match NodeConfig::from_args(&args) {
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
    match runtime.block_on(seqsvr_storesvr::run(config, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
