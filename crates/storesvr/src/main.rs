//! `storesvr`: thin entry point; everything lives in the library.

use clap::Parser;
use seqsvr_storesvr::config::{Args, NodeConfig};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = Args::parse();
    seqsvr_server::serve(
        &args.server.log_format,
        || NodeConfig::from_args(&args),
        seqsvr_storesvr::run,
    )
}
