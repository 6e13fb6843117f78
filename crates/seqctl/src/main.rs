//! `seqctl`: the seqsvr admin CLI. It finds the cluster from the cluster config file (like
//! `etcdctl --endpoints`): `--config FILE` or `SEQSVR_CONFIG`.
//!
//! Layout: `cli` (the command line, clap), `commands` (the logic, one module per area:
//! `store`, `alloc` (routes, leases, section moves), `seq`, `id` (ids: next, decode), `status` (and `watch`), `health`),
//! `render` (rows → tables and `--json` from the same structs), `ctx` (config, deadline),
//! `error` (exit codes, actionable errors).

mod cli;
mod commands;
mod ctx;
mod error;
mod render;

use clap::Parser;
use std::process::ExitCode;

/// SIGPIPE: die of it, as the default disposition would, when stdout's reader is gone;
/// otherwise (a socket) ignore it, and the write fails with EPIPE.
extern "C" fn on_sigpipe(_: libc::c_int) {
    let mut stdout = libc::pollfd { fd: 1, events: libc::POLLOUT, revents: 0 };
    // SAFETY: poll, signal and raise are async-signal-safe; `stdout` lives on this frame. The
    // raised signal is blocked until this handler returns, then kills with the default action.
    unsafe {
        if libc::poll(&mut stdout, 1, 0) > 0 && stdout.revents & libc::POLLERR != 0 {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
    }
}

fn main() -> ExitCode {
    // Like every Unix tool: a closed stdout (`seqctl status | head -1`) ends the process
    // quietly instead of panicking in `println!`. But only a closed stdout: a server that
    // resets a connection (a refused TLS handshake) must give an error message, not kill us.
    // SAFETY: installing a handler before any thread starts; it only calls poll and _exit.
    unsafe {
        libc::signal(libc::SIGPIPE, on_sigpipe as extern "C" fn(libc::c_int) as libc::sighandler_t)
    };
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
