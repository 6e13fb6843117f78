//! `allocsvr`: thin entry point; everything lives in the library.

use clap::Parser;
use seqsvr_allocsvr::config::{AllocConfig, Args};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = Args::parse();
    seqsvr_server::serve(
        &args.server.log_format,
        || AllocConfig::from_args(&args),
        seqsvr_allocsvr::run,
    )
}
