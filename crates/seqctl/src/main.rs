//! `seqctl`: the seqsvr admin CLI. It finds the cluster from the cluster config file (like
//! `etcdctl --endpoints`): `--config FILE` or `SEQSVR_CONFIG`.
//!
//! Layout: `cli` (the command line, clap), `commands` (the logic, one module per area:
//! `store`, `alloc` (routes, leases, section moves), `seq`, `status` (and `watch`), `health`),
//! `render` (rows → tables and `--json` from the same structs), `ctx` (config, deadline),
//! `error` (exit codes, actionable errors).

mod cli;
mod commands;
mod ctx;
mod error;
mod render;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Like every Unix tool: a closed stdout (`seqctl status | head -1`) ends the process
    // quietly instead of panicking in `println!`.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return error::Exit::NoAnswer.into();
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("{e}");
            e.exit.into()
        }
    }
}
