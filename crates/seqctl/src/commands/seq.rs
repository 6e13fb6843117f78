//! Sequence calls through the client SDK, as an application makes them: `next` and `get`.

use crate::commands::alloc::route_tables;
use crate::ctx::{Ctx, Deadline};
use crate::error::{CtlError, Exit};
use crate::render::{self, View};
use seqsvr_client::seq::{SeqClient, SeqClientOptions};
use seqsvr_core::config::ClusterConfig;
use serde::Serialize;

/// `UID SEQ` per line (a format scripts read; `--json`: `[{"uid": U, "seq": S}, ...]`).
#[derive(Debug, Serialize)]
pub struct SeqValue {
    pub uid: u64,
    pub seq: u64,
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct SeqValues(pub Vec<SeqValue>);

impl View for SeqValues {
    fn text(&self) -> String {
        self.0.iter().map(|v| format!("{} {}\n", v.uid, v.seq)).collect()
    }
}

/// The AllocSvrs to ask: the config's AllocSvr list of each set, plus (for a set that lists
/// none) the addresses in its route table as its store leader knows it. None known is an error
/// saying how to fix it.
pub(crate) async fn alloc_addresses(
    config: &ClusterConfig,
    deadline: Deadline,
) -> Result<Vec<String>, CtlError> {
    let mut addrs: Vec<String> =
        config.sets.iter().flat_map(|s| s.allocs.iter().cloned()).collect();
    if config.sets.iter().any(|s| s.allocs.is_empty()) {
        for table in route_tables(config, deadline).await {
            addrs.extend(table.entries.into_iter().map(|e| e.addr));
        }
    }
    addrs.sort();
    addrs.dedup();
    if addrs.is_empty() {
        return Err(CtlError {
            exit: Exit::NoAnswer,
            what: "no AllocSvr address known: the config lists no `allocs` and no set's store \
                   leader gave a route table"
                .into(),
            hint: Some(
                "list the AllocSvrs in each set's `allocs` in the cluster config, or start one \
                 (`seqctl status` shows the stores and AllocSvrs)"
                    .into(),
            ),
        });
    }
    Ok(addrs)
}

/// `next` (allocate) or `get` (read) each uid in turn, all within one --timeout-ms.
pub async fn seq_command(ctx: &Ctx, uids: &[u64], allocate: bool) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let deadline = ctx.deadline();
    let seeds = alloc_addresses(&config, deadline).await?;
    let target = format!("AllocSvrs {}", seeds.join(", "));
    // One uid at a time: nothing to coalesce, and a `Next` RPC per call leaves an admin's audit
    // line per allocation (on a stream it would be one line for the whole stream).
    let options = SeqClientOptions { coalesce: false, stream: false, ..Default::default() };
    let connected = SeqClient::connect_with(&seeds, deadline.left(), options).await;
    let client = connected.map_err(|status| {
        CtlError::grpc("fetch the route tables", &target, &status, ctx.timeout)
    })?;
    let mut values = Vec::with_capacity(uids.len());
    for &uid in uids {
        let result = if allocate {
            client.next(uid, deadline.left()).await
        } else {
            client.current(uid, deadline.left()).await
        };
        match result {
            Ok(seq) => values.push(SeqValue { uid, seq }),
            Err(status) => {
                // What was allocated before the failure is printed all the same.
                if !values.is_empty() {
                    render::emit(ctx.json, &SeqValues(values))?;
                }
                let action = if allocate { "allocate the next" } else { "read the current" };
                return Err(CtlError::grpc(
                    &format!("{action} sequence of uid {uid}"),
                    &target,
                    &status,
                    ctx.timeout,
                ));
            }
        }
    }
    render::emit(ctx.json, &SeqValues(values))?;
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_seq_lines_and_json() {
        let view = SeqValues(vec![SeqValue { uid: 42, seq: 7 }, SeqValue { uid: 42, seq: 8 }]);
        assert_eq!(view.text(), "42 7\n42 8\n");
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            serde_json::json!([{"uid": 42, "seq": 7}, {"uid": 42, "seq": 8}])
        );
    }
}
