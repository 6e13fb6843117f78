//! The commands' logic, one module per area; `run` dispatches a parsed command line.

pub mod alloc;
pub mod certs;
pub mod health;
pub mod id;
pub mod seq;
pub mod status;
pub mod store;

use crate::cli::{
    AllocCommand, CertsCommand, Cli, Command, IdCommand, SectionCommand, StoreCommand,
};
use crate::ctx::Ctx;
use crate::error::{CtlError, Exit};
use clap::CommandFactory;
use std::time::Duration;

/// Room past --timeout-ms for the last answer to be printed before the backstop fires.
const BACKSTOP_GRACE: Duration = Duration::from_millis(200);

pub async fn run(cli: Cli) -> Result<Exit, CtlError> {
    let ctx = Ctx::new(&cli.global);
    match cli.command {
        Command::Watch { interval_ms } | Command::Status { watch: true, interval_ms } => {
            status::watch(&ctx, Duration::from_millis(interval_ms)).await
        }
        Command::Certs(CertsCommand::Init {
            dir,
            sets,
            members,
            allocs,
            server_name,
            days,
            force,
        }) => certs::init(&certs::InitOptions {
            dir,
            sets,
            members,
            allocs,
            server_name,
            days,
            force,
        }),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "seqctl", &mut std::io::stdout());
            Ok(Exit::Ok)
        }
        command => {
            // Every call inside gets what is left of --timeout-ms; this backstop makes sure
            // nothing (a stuck connect, a slow local step) stretches the command past it.
            match tokio::time::timeout(ctx.timeout + BACKSTOP_GRACE, once(&ctx, command)).await {
                Ok(result) => result,
                Err(_) => Err(CtlError {
                    exit: Exit::NoAnswer,
                    what: format!(
                        "no complete answer within --timeout-ms {}",
                        ctx.timeout.as_millis()
                    ),
                    hint: Some(
                        "`seqctl status` shows which members answer; a slow cluster may need a \
                         larger --timeout-ms"
                            .into(),
                    ),
                }),
            }
        }
    }
}

/// A command that runs once, within --timeout-ms.
async fn once(ctx: &Ctx, command: Command) -> Result<Exit, CtlError> {
    match command {
        Command::Status { .. } => status::status(ctx).await,
        Command::Health { addr, service, server } => {
            health::health(ctx, &addr, &service, server).await
        }
        Command::Next { uids } => seq::seq_command(ctx, &uids, true).await,
        Command::Get { uids } => seq::seq_command(ctx, &uids, false).await,
        Command::Id(IdCommand::Next {
            scheme,
            count,
            business,
            session_type,
            session,
            session_hash,
        }) => {
            let session = id::session_arg(session_type, session, session_hash)?;
            id::next(ctx, &scheme, count, business, session).await
        }
        Command::Id(IdCommand::Decode { scheme, id }) => id::decode(ctx, &scheme, &id),
        Command::Id(IdCommand::Layout { scheme }) => id::layout(ctx, scheme.as_deref()),
        Command::Route => alloc::route(ctx).await,
        Command::Leases => alloc::leases(ctx).await,
        Command::Section(SectionCommand::Move { section, to, count }) => {
            alloc::section_move(ctx, section, to, count).await
        }
        Command::Alloc(AllocCommand::Drain { alloc_id, set, undo }) => {
            alloc::drain(ctx, alloc_id, set, undo).await
        }
        Command::Store(command) => match command {
            StoreCommand::Status => store::status(ctx).await,
            StoreCommand::Get { set, sections } => store::get(ctx, set, sections).await,
            StoreCommand::Advance { set, sections } => store::advance(ctx, set, sections).await,
            StoreCommand::TransferLeader { set, to } => store::transfer_leader(ctx, set, to).await,
            StoreCommand::AddLearner { set, id, addr } => {
                store::membership(ctx, set, store::MembershipChange::AddLearner { id, addr }).await
            }
            StoreCommand::Promote { set, id } => {
                store::membership(ctx, set, store::MembershipChange::Promote { id }).await
            }
            StoreCommand::Remove { set, id } => {
                store::membership(ctx, set, store::MembershipChange::Remove { id }).await
            }
            StoreCommand::SetLease { set, lease_ms, margin_ms } => {
                store::set_lease(ctx, set, lease_ms, margin_ms).await
            }
        },
        Command::Watch { .. } | Command::Completions { .. } | Command::Certs(_) => {
            unreachable!("handled by run")
        }
    }
}
