//! Globally unique ids (issue 10), by the names of the cluster config's `[ids.schemes]`:
//! `id next` asks any AllocSvr's `IdService` (through the SDK's `IdClient`: round-robin, the
//! next AllocSvr on a transient failure); `id decode` reads an id's fields from the config's
//! layout alone, with no server and no certificate; `id layout` shows what each scheme's ids
//! are made of, how fast a worker issues them, how long they last and whether they are
//! JavaScript-safe, from the config alone too.

use crate::ctx::Ctx;
use crate::error::{CtlError, Exit};
use crate::render::{self, opt, Row, View};
use seqsvr_client::ids::{self as ids_sdk, DecodedView, IdClient, Ids, SchemeLookupError};
use seqsvr_client::ids::{Session, SessionId};
use seqsvr_core::config::{ClusterConfig, IdSchemeConfig};
use seqsvr_core::ids::SetId;
use seqsvr_core::idscheme::{self, Layout, Part, Scheme};
use serde::Serialize;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};
use tabled::Tabled;

/// `id next`: the ids, one per line in their text form (decimal; the 8-4-4-4-12 form for
/// uuidv7). `--json`: `{"scheme", "kind", "worker_id", "ids": [text, ...]}` (ids as strings:
/// 64-bit ids do not fit a JSON reader's doubles).
#[derive(Debug, Serialize)]
pub struct NewIds {
    /// The name in `[ids.schemes]`.
    pub scheme: String,
    /// Its layout (snowflake, uid-generator, weibo, uuidv7, js53).
    pub kind: String,
    pub worker_id: u64,
    pub ids: Vec<String>,
}

impl View for NewIds {
    fn text(&self) -> String {
        self.ids.iter().map(|id| format!("{id}\n")).collect()
    }
}

// `id decode --json` is `DecodedView` as the SDK serialises it (the AllocSvr's HTTP API
// answers the same object): its text form is this file's.

/// One line of `id decode`'s table.
#[derive(Debug, Serialize, Tabled)]
#[tabled(rename_all = "SCREAMING_SNAKE_CASE")]
struct FieldRow {
    field: &'static str,
    value: String,
}

impl Row for FieldRow {}

impl View for DecodedView {
    fn text(&self) -> String {
        let row = |field, value: String| FieldRow { field, value };
        // The name, and its layout when the name is not the layout's own.
        let scheme = if self.scheme == self.kind {
            self.scheme.clone()
        } else {
            format!("{} ({})", self.scheme, self.kind)
        };
        let mut rows = vec![
            row("scheme", scheme),
            row("id", self.id.clone()),
            row("text", self.text.clone()),
            row("time", self.time.clone()),
            row("time_units", format!("{} ({} since {})", self.time_units, self.unit, self.epoch)),
            row("unix_ms", self.unix_ms.to_string()),
        ];
        for (field, value) in [
            ("worker", self.worker),
            ("business", self.business),
            ("session_type", self.session_type),
            ("session_hash", self.session_hash),
            ("sequence", Some(self.sequence)),
            ("rand", self.rand),
        ] {
            if let Some(value) = value {
                rows.push(row(field, value.to_string()));
            }
        }
        rows.push(row("layout", self.layout.clone()));
        rows.push(row("range", self.range.clone()));
        render::table(&rows)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The layout of the scheme `name` of the config at `path`, loaded at `now_ms` as the
/// AllocSvrs load it; an unknown name lists the configured ones.
fn scheme_layout(
    config: &ClusterConfig,
    path: &Path,
    name: &str,
    now_ms: u64,
) -> Result<Layout, CtlError> {
    let path = path.display();
    ids_sdk::layout_of(&config.ids, name, now_ms).map_err(|e| match e {
        SchemeLookupError::NotConfigured { configured, .. } if configured.is_empty() => {
            CtlError::usage(
                format!("no id scheme {name:?}: the cluster config {path} has no [ids.schemes]"),
                NO_SCHEMES_HINT,
            )
        }
        SchemeLookupError::NotConfigured { configured, .. } => CtlError::usage(
            format!("no id scheme {name:?} in the cluster config {path}"),
            format!("the configured schemes are: {}", configured.join(", ")),
        ),
        SchemeLookupError::Invalid { .. } => CtlError::usage(
            format!("the cluster config {path}: {e}"),
            "fix the scheme's layout in [ids.schemes] (the AllocSvrs refuse it too)",
        ),
    })
}

const NO_SCHEMES_HINT: &str = "add one, e.g. `[ids.schemes.orders]` with `scheme = \"snowflake\"` \
     (or `scheme = \"js53\"` for JavaScript-safe ids; see config/cluster.toml), and restart the \
     AllocSvrs with it";

/// The cluster config without setting up TLS: `id decode` dials nothing, so it must not need
/// the client certificate that [`Ctx::config`] asks for when the file has `[tls]`.
fn config_without_tls(ctx: &Ctx) -> Result<ClusterConfig, CtlError> {
    let path = ctx.config_path.display();
    let text = std::fs::read_to_string(&ctx.config_path).map_err(|e| {
        CtlError::usage(
            format!("cannot read the cluster config {path}: {e}"),
            "name it with --config FILE or SEQSVR_CONFIG (the local cluster's is \
             data/local/cluster.toml, written by `scripts/dev-cluster.sh up`)",
        )
    })?;
    ClusterConfig::from_toml_str(&text).map_err(|e| {
        CtlError::usage(
            format!("the cluster config {path} is not valid: {e}"),
            "compare it with config/cluster.toml",
        )
    })
}

/// Decodes `id` (its text form, or a decimal number) of the scheme `name` in `config`.
fn decode_view(
    config: &ClusterConfig,
    path: &Path,
    name: &str,
    id: &str,
    now_ms: u64,
) -> Result<DecodedView, CtlError> {
    let layout = scheme_layout(config, path, name, now_ms)?;
    let decoded = ids_sdk::decode(&layout, id).map_err(|e| {
        CtlError::usage(
            format!("{id:?} is not an id of scheme {name:?} ({}): {e}", layout.scheme()),
            "give its text form (decimal for snowflake, uid-generator, weibo and js53; the \
             8-4-4-4-12 hex form for uuidv7; XXXX-XXXX-XXXX-XXXX for rongcloud) or, for uuidv7 and \
             rongcloud, the id as a decimal number",
        )
    })?;
    Ok(DecodedView::new(name, &decoded))
}

/// `id decode SCHEME ID`: pure, from the cluster config's `[ids.schemes]`.
pub fn decode(ctx: &Ctx, scheme: &str, id: &str) -> Result<Exit, CtlError> {
    let config = config_without_tls(ctx)?;
    let view = decode_view(&config, &ctx.config_path, scheme, id, now_ms())?;
    render::emit(ctx.json, &view)?;
    Ok(Exit::Ok)
}

/// One scheme of `id layout`: what its ids are made of, how fast one worker issues them, how
/// long they last. `--json`: an array of these objects.
#[derive(Debug, Serialize, Tabled)]
#[tabled(rename_all = "SCREAMING_SNAKE_CASE")]
pub struct LayoutRow {
    /// The name in `[ids.schemes]`.
    pub scheme: String,
    /// Its layout (snowflake, uid-generator, weibo, rongcloud, uuidv7, js53).
    pub kind: String,
    /// The bit fields, most significant first.
    pub bits: String,
    /// The largest id of the layout's whole life (its last time unit, every other field at its
    /// largest), in its text form (a string: it may not fit a JSON reader's doubles).
    pub max_id: String,
    /// Every id of the layout's life is at most 2^53 - 1, exact as a JavaScript number.
    pub js_safe: bool,
    /// Worker ids in all, and each set's share (none for rongcloud: one issuer per section).
    #[tabled(display = "opt")]
    pub workers: Option<u64>,
    #[tabled(display = "opt")]
    pub workers_per_set: Option<u64>,
    /// Ids one worker id issues per second while the clock keeps up (rongcloud: one section,
    /// all its sessions); bursts borrow later time units up to `ids.max_ahead_ms`.
    pub ids_per_s_per_worker: u64,
    /// How long the time field lasts, to a tenth of a year: from `epoch` until `until`.
    #[tabled(display = "tenths")]
    pub years: f64,
    pub epoch: String,
    pub until: String,
}

impl Row for LayoutRow {}

/// A value already rounded to tenths, as JSON writes it (`34.0`, `69.7`).
fn tenths(value: &f64) -> String {
    format!("{value:.1}")
}

impl LayoutRow {
    fn new(name: &str, layout: &Layout, scheme: &IdSchemeConfig) -> LayoutRow {
        let max_id = layout.max_id();
        let bits: Vec<String> = layout.parts().iter().map(|(p, w)| format!("{p} {w}")).collect();
        let workers = Some(idscheme::worker_ids(layout)).filter(|&n| n > 0);
        let per_set = scheme.worker_pool(layout, SetId(0)).ok().map(|pool| pool.end - pool.start);
        LayoutRow {
            scheme: name.to_string(),
            kind: layout.scheme().to_string(),
            bits: bits.join(" + "),
            max_id: layout.format(max_id).unwrap_or_else(|_| max_id.to_string()),
            js_safe: layout.js_safe(),
            workers,
            workers_per_set: per_set.filter(|_| workers.is_some()),
            ids_per_s_per_worker: layout.ids_per_second(),
            years: (layout.lifetime_years() * 10.0).round() / 10.0,
            epoch: idscheme::rfc3339_ms(layout.epoch_ms()),
            until: idscheme::rfc3339_ms(layout.runs_out_at_ms()),
        }
    }
}

/// The rows of `id layout`: every scheme of `config` (or only `only`), loaded at `now_ms` as
/// the AllocSvrs load them, so a scheme they would refuse (widths, run out, two of one shape,
/// a set without worker ids) is an error here too.
fn layout_rows(
    config: &ClusterConfig,
    path: &Path,
    only: Option<&str>,
    now_ms: u64,
) -> Result<Vec<LayoutRow>, CtlError> {
    if let Some(name) = only {
        scheme_layout(config, path, name, now_ms)?;
    } else if config.ids.schemes.is_empty() {
        let path = path.display();
        let what = format!("the cluster config {path} has no [ids.schemes]");
        return Err(CtlError::usage(what, NO_SCHEMES_HINT));
    }
    let loaded = config.ids.load(now_ms, &config.sets).map_err(|e| {
        CtlError::usage(
            format!("the cluster config {}: {e}", path.display()),
            "fix the scheme's layout in [ids.schemes] (the AllocSvrs refuse it too)",
        )
    })?;
    Ok(loaded
        .iter()
        .filter(|(name, _)| only.is_none_or(|only| only == name.as_str()))
        .map(|(name, (layout, scheme))| LayoutRow::new(name, layout, scheme))
        .collect())
}

/// `id layout [SCHEME]`: pure, from the cluster config's `[ids.schemes]`.
pub fn layout(ctx: &Ctx, scheme: Option<&str>) -> Result<Exit, CtlError> {
    let config = config_without_tls(ctx)?;
    let rows = layout_rows(&config, &ctx.config_path, scheme, now_ms())?;
    render::emit(ctx.json, &rows)?;
    Ok(Exit::Ok)
}

/// The text forms of an answer's ids in `layout`.
fn new_ids_view(name: &str, layout: &Layout, ids: &Ids) -> Result<NewIds, CtlError> {
    let texts =
        ids.ids.iter().map(|id| id.text(layout)).collect::<Result<Vec<String>, _>>().map_err(
            |e| CtlError {
                exit: Exit::Refused,
                what: format!(
                    "the AllocSvr's ids of scheme {name:?} are not ids of this cluster config's \
                 layout ({}): {e}",
                    layout.scheme()
                ),
                hint: Some(
                    "the AllocSvrs run with another [ids.schemes] than this --config: use theirs"
                        .into(),
                ),
            },
        )?;
    Ok(NewIds {
        scheme: name.to_string(),
        kind: layout.scheme().to_string(),
        worker_id: ids.worker_id,
        ids: texts,
    })
}

/// `id next SCHEME [--count N] [--business B]`: new ids from any AllocSvr, one per line on
/// stdout, the worker id they carry on stderr (in the object with `--json`).
/// The session flags of `seqctl id next`: None when neither --session nor --session-hash was
/// given; a --session-type without either is a usage error.
pub fn session_arg(
    session_type: u32,
    session: Option<String>,
    session_hash: Option<u64>,
) -> Result<Option<Session>, CtlError> {
    match (session, session_hash) {
        (Some(text), _) => Ok(Some(Session { session_type, id: SessionId::Text(text) })),
        (None, Some(hash)) => Ok(Some(Session { session_type, id: SessionId::Hash(hash) })),
        (None, None) if session_type != 0 => Err(CtlError::usage(
            "--session-type without a session",
            "give --session ID or --session-hash H with it",
        )),
        (None, None) => Ok(None),
    }
}

pub async fn next(
    ctx: &Ctx,
    scheme: &str,
    count: u32,
    business: u64,
    session: Option<Session>,
) -> Result<Exit, CtlError> {
    let config = ctx.config()?;
    let layout = scheme_layout(&config, &ctx.config_path, scheme, now_ms())?;
    let max_count = config.ids.max_count;
    if count == 0 || count > max_count {
        return Err(CtlError::usage(
            format!("--count {count} must be within [1, {max_count}] (ids.max_count)"),
            "ask for fewer ids per call",
        ));
    }
    let business_max = layout.max_value(Part::Business);
    if business > business_max {
        let what = if business_max == 0 {
            format!("scheme {scheme:?} ({}) has no business number", layout.scheme())
        } else {
            format!("--business {business} does not fit: at most {business_max}")
        };
        return Err(CtlError::usage(what, "only weibo ids carry a business number (0 to 31)"));
    }
    let is_rongcloud = layout.scheme() == Scheme::RongCloud;
    match (&session, is_rongcloud) {
        (None, true) => {
            return Err(CtlError::usage(
                format!("scheme {scheme:?} is rongcloud: its ids belong to a session"),
                "give --session ID (or --session-hash H) and --session-type T",
            ))
        }
        (Some(_), false) => {
            return Err(CtlError::usage(
                format!("scheme {scheme:?} ({}) has no session fields", layout.scheme()),
                "only rongcloud ids carry a session: drop --session, --session-hash and \
                 --session-type",
            ))
        }
        (Some(s), true) => {
            s.key().map_err(|status| {
                CtlError::usage(
                    status.message().to_string(),
                    "--session-type is 0 to 15 and --session-hash below 4194304",
                )
            })?;
        }
        (None, false) => {}
    }
    let deadline = ctx.deadline();
    let addrs = super::seq::alloc_addresses(&config, deadline).await?;
    let target = format!("AllocSvrs {}", addrs.join(", "));
    let client = IdClient::new(&addrs)
        .map_err(|status| {
            CtlError::usage(status.message().to_string(), "fix the AllocSvr addresses")
        })?
        .with_ids_config(config.ids.clone());
    let left = deadline.left();
    let ids = match &session {
        Some(session) => client.next_session_ids(scheme, count, session, left).await,
        None => client.next_ids(scheme, count, business, left).await,
    };
    let ids = ids.map_err(|status| {
        CtlError::grpc(
            &format!("get {count} ids of scheme {scheme:?}"),
            &target,
            &status,
            ctx.timeout,
        )
    })?;
    let view = new_ids_view(scheme, &layout, &ids)?;
    if !ctx.json && !is_rongcloud {
        eprintln!("worker_id {}", view.worker_id);
    }
    render::emit(ctx.json, &view)?;
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command, IdCommand};
    use clap::Parser;
    use seqsvr_client::ids::IdList;

    const NOW_MS: u64 = 1_750_000_000_000; // 2025-06-15

    /// A one-set cluster with these `[ids.schemes]` (TOML tables) and `extra` TOML.
    fn config(schemes: &str, extra: &str) -> ClusterConfig {
        let text = format!(
            "[[sets]]\nid = 0\nuid_begin = 0\nuid_end = 100000\n\
             stores = [{{ id = 1, addr = \"127.0.0.1:7101\" }}]\n\
             allocs = [\"127.0.0.1:7201\"]\n{extra}\n{schemes}"
        );
        ClusterConfig::from_toml_str(&text).unwrap()
    }

    const SCHEMES: &str = "[ids.schemes.orders]\nscheme = \"snowflake\"\n\
                           [ids.schemes.events]\nscheme = \"uuidv7\"\n\
                           [ids.schemes.feed]\nscheme = \"weibo\"\n";

    fn path() -> &'static Path {
        Path::new("cluster.toml")
    }

    #[test]
    fn the_id_commands_parse() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("seqctl").chain(args.iter().copied()))
        };
        let cli = parse(&["id", "next", "orders", "--count", "3", "--business", "2"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Id(IdCommand::Next { scheme, count: 3, business: 2, .. }) if scheme == "orders"
        ));
        let cli =
            parse(&["id", "next", "msgs", "--session-type", "2", "--session", "g-1"]).unwrap();
        let Command::Id(IdCommand::Next { session_type, session, session_hash, .. }) = cli.command
        else {
            panic!("not id next")
        };
        assert_eq!(
            session_arg(session_type, session, session_hash).unwrap(),
            Some(Session { session_type: 2, id: SessionId::Text("g-1".into()) })
        );
        assert!(parse(&["id", "next", "m", "--session", "a", "--session-hash", "1"]).is_err());
        assert!(session_arg(3, None, None).is_err(), "a type without a session");
        assert_eq!(session_arg(0, None, None).unwrap(), None);
        let cli = parse(&["id", "next", "orders"]).unwrap();
        assert!(matches!(cli.command, Command::Id(IdCommand::Next { count: 1, business: 0, .. })));
        let cli =
            parse(&["--json", "id", "decode", "events", "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"])
                .unwrap();
        assert!(cli.global.json);
        assert!(matches!(
            cli.command,
            Command::Id(IdCommand::Decode { scheme, id })
                if scheme == "events" && id.starts_with("017f")
        ));
        assert!(parse(&["id", "next", "orders", "--count", "0"]).is_err(), "count 0");
        assert!(parse(&["id", "decode", "orders"]).is_err(), "the id is required");
        let cli = parse(&["id", "layout"]).unwrap();
        assert!(matches!(cli.command, Command::Id(IdCommand::Layout { scheme: None })));
        let cli = parse(&["id", "layout", "web"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Id(IdCommand::Layout { scheme: Some(s) }) if s == "web"
        ));
    }

    const JS53: &str = "[ids.schemes.web]\nscheme = \"js53\"\n";

    /// `id layout` beside the 63-bit ones: js53's largest id is 2^53 - 1 (JavaScript-safe),
    /// 128 000 ids/s per worker, 32 worker ids (4 per set), 69.7 years; snowflake's largest is
    /// 2^63 - 1 (not JavaScript-safe), 4 096 000 ids/s per worker. Table and JSON agree.
    #[test]
    fn layout_shows_rates_lives_and_javascript_safety() {
        let with_js53 = config(&format!("{SCHEMES}{JS53}"), "");
        let rows = layout_rows(&with_js53, path(), None, NOW_MS).unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r.scheme.as_str()).collect();
        assert_eq!(names, ["events", "feed", "orders", "web"]);
        let json = serde_json::to_value(&rows).unwrap();
        assert_eq!(
            json[3],
            serde_json::json!({
                "scheme": "web",
                "kind": "js53",
                "bits": "time 41 + worker 5 + sequence 7",
                "max_id": "9007199254740991",
                "js_safe": true,
                "workers": 32,
                "workers_per_set": 4,
                "ids_per_s_per_worker": 128_000,
                "years": 69.7,
                "epoch": "2025-01-01T00:00:00.000Z",
                "until": "2094-09-07T15:47:35.552Z",
            })
        );
        let orders = &json[2];
        assert_eq!(orders["bits"], "sign 1 + time 41 + worker 10 + sequence 12");
        assert_eq!(orders["max_id"], "9223372036854775807");
        assert_eq!(
            (&orders["js_safe"], &orders["ids_per_s_per_worker"]),
            (&false.into(), &4_096_000.into())
        );
        assert_eq!(json[0]["max_id"], "ffffffff-ffff-7fff-bfff-ffffffffffff");
        assert!(rows.iter().filter(|r| r.scheme != "web").all(|r| !r.js_safe));
        crate::render::assert_table_matches_json(&rows);

        let only = layout_rows(&with_js53, path(), Some("web"), NOW_MS).unwrap();
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].scheme, "web");
        let err = layout_rows(&with_js53, path(), Some("webb"), NOW_MS).unwrap_err();
        assert!(err.what.contains("no id scheme \"webb\""), "{err}");
        let err = layout_rows(&config("", ""), path(), None, NOW_MS).unwrap_err();
        assert!(err.what.contains("has no [ids.schemes]"), "{err}");
    }

    /// A js53 scheme whose widths could pass 2^53 - 1 is refused as the AllocSvrs refuse it,
    /// naming the widths and their sum.
    #[test]
    fn layout_refuses_js53_widths_above_53_bits() {
        let wide = "[ids.schemes.web]\nscheme = \"js53\"\nworker_bits = 6\n";
        let config = config(&format!("{SCHEMES}{wide}"), "");
        let err = layout_rows(&config, path(), None, NOW_MS).unwrap_err();
        assert!(
            err.what.contains("ids.schemes.web: js53: the widths (time 41 + worker 6 + sequence 7) sum to 54 bits"),
            "{err}"
        );
        assert_eq!(err.exit, Exit::NoAnswer);
    }

    /// A snowflake id built by hand (time 1, worker 2, sequence 3 = 1 << 22 | 2 << 12 | 3):
    /// the table shows its fields, and no business or session fields; JSON has them as null.
    #[test]
    fn decode_shows_the_fields_of_the_scheme() {
        let view = decode_view(&config(SCHEMES, ""), path(), "orders", "4202499", NOW_MS).unwrap();
        let text = view.text();
        let field = |name: &str| -> Option<String> {
            text.lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .map(|l| l[name.len()..].trim().to_string())
        };
        assert_eq!(field("scheme").as_deref(), Some("orders (snowflake)"));
        assert_eq!(field("time").as_deref(), Some("2010-11-04T01:42:54.658Z"));
        assert_eq!(field("time_units").as_deref(), Some("1 (ms since 2010-11-04T01:42:54.657Z)"));
        assert_eq!(field("unix_ms").as_deref(), Some("1288834974658"));
        assert_eq!(field("worker").as_deref(), Some("2"));
        assert_eq!(field("sequence").as_deref(), Some("3"));
        assert_eq!(field("text").as_deref(), Some("4202499"));
        assert_eq!(field("layout").as_deref(), Some("sign 1 + time 41 + worker 10 + sequence 12"));
        assert!(field("range").is_some_and(|r| r.starts_with("lasts 69.7 years")), "{text}");
        for absent in ["business", "session_type", "session_hash", "rand"] {
            assert_eq!(field(absent), None, "{absent} in\n{text}");
        }
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["worker"], 2);
        assert_eq!(json["business"], serde_json::Value::Null);
        assert_eq!(json["id"], "4202499");
    }

    /// uuidv7 takes its text form (any case) or the id as a decimal number; weibo shows its
    /// business number.
    #[test]
    fn decode_takes_text_or_decimal() {
        let config = config(SCHEMES, "");
        let upper = "017F22E2-79B0-7CC3-98C4-DC0C0C07398F";
        let by_text = decode_view(&config, path(), "events", upper, NOW_MS).unwrap();
        assert_eq!(by_text.text, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
        assert_eq!(by_text.worker, Some(0x6313));
        assert_eq!(by_text.rand, Some(0x18C4_DC0C_0C07_398F));
        let by_number = decode_view(&config, path(), "events", &by_text.id, NOW_MS).unwrap();
        assert_eq!(by_number.text, by_text.text);
        // weibo: 1 sign + 41 time + 5 server + 5 business + 12 sequence.
        let weibo = (7u64 << 22) | (3 << 17) | (17 << 12) | 9;
        let view = decode_view(&config, path(), "feed", &weibo.to_string(), NOW_MS).unwrap();
        assert_eq!((view.worker, view.business, view.sequence), (Some(3), Some(17), 9));
        assert_eq!(view.time_units, 7);
    }

    #[test]
    fn an_unknown_scheme_lists_the_configured_ones() {
        let err = decode_view(&config(SCHEMES, ""), path(), "order", "1", NOW_MS).unwrap_err();
        assert!(err.what.contains("no id scheme \"order\""), "{err}");
        assert_eq!(err.hint.as_deref(), Some("the configured schemes are: events, feed, orders"));
        assert_eq!(err.exit, Exit::NoAnswer);
        let err = decode_view(&config("", ""), path(), "orders", "1", NOW_MS).unwrap_err();
        assert!(err.what.contains("has no [ids.schemes]"), "{err}");
        let err = decode_view(&config(SCHEMES, ""), path(), "orders", "x1", NOW_MS).unwrap_err();
        assert!(err.what.contains("is not an id of scheme \"orders\" (snowflake)"), "{err}");
    }

    /// `id decode` reads a config with `[tls]` without a client certificate (it dials
    /// nothing), where the commands that dial need one.
    #[test]
    fn decode_needs_no_certificate() {
        let tls = "[tls]\nserver_name = \"seqsvr\"\nclient_ca = \"c.pem\"\nstore_ca = \"s.pem\"\n\
                   peer_ca = \"p.pem\"\n";
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cluster.toml");
        let text = format!(
            "[[sets]]\nid = 0\nuid_begin = 0\nuid_end = 100000\n\
             stores = [{{ id = 1, addr = \"127.0.0.1:7101\" }}]\n{tls}\n{SCHEMES}"
        );
        std::fs::write(&file, text).unwrap();
        let ctx = Ctx {
            config_path: file,
            timeout: std::time::Duration::from_secs(1),
            json: false,
            tls_cert: None,
            tls_key: None,
        };
        assert!(ctx.config().is_err(), "dialling commands need --tls-cert");
        let config = config_without_tls(&ctx).unwrap();
        assert!(decode_view(&config, &ctx.config_path, "orders", "4202499", NOW_MS).is_ok());
    }

    /// `id next` prints the text forms: decimal, or the 8-4-4-4-12 form for uuidv7.
    #[test]
    fn new_ids_are_printed_in_their_text_form() {
        let config = config(SCHEMES, "");
        let snowflake = scheme_layout(&config, path(), "orders", NOW_MS).unwrap();
        let ids = Ids { ids: IdList::U64(vec![4202499, 4202500]), worker_id: 2 };
        let view = new_ids_view("orders", &snowflake, &ids).unwrap();
        assert_eq!(view.text(), "4202499\n4202500\n");
        let uuid = scheme_layout(&config, path(), "events", NOW_MS).unwrap();
        let ids = Ids {
            ids: IdList::U128(vec![0x017f_22e2_79b0_7cc3_98c4_dc0c_0c07_398f]),
            worker_id: 0x6313,
        };
        let view = new_ids_view("events", &uuid, &ids).unwrap();
        assert_eq!(view.text(), "017f22e2-79b0-7cc3-98c4-dc0c0c07398f\n");
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            serde_json::json!({
                "scheme": "events",
                "kind": "uuidv7",
                "worker_id": 0x6313,
                "ids": ["017f22e2-79b0-7cc3-98c4-dc0c0c07398f"],
            })
        );
        // A 64-bit id answered for a uuidv7 scheme: the configs differ.
        let wrong = Ids { ids: IdList::U64(vec![1]), worker_id: 0 };
        let err = new_ids_view("events", &uuid, &wrong).unwrap_err();
        assert!(err.what.contains("not ids of this cluster config's layout"), "{err}");
    }
}
