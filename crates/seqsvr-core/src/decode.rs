//! The pure id decoder: an id (or its text) of a configured scheme → its fields, its time, its
//! worker, as the `Decode` RPC, `seqctl id decode`, the HTTP API and the SDK show them. No I/O:
//! the SDK decodes without a server, and the AllocSvr answers `Decode` with the same fields.

use crate::config::IdsConfig;
use crate::idscheme::{self, DecodeError, Fields, Layout, LayoutError, Part, Scheme, TimeUnit};

/// An id's fields, as the `Decode` RPC's answer carries them, decoded without a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedId {
    pub scheme: Scheme,
    /// The id as a number.
    pub id: u128,
    /// The raw fields (0 for a part the scheme does not have: see [`DecodedId::has`]).
    pub fields: Fields,
    /// The timestamp in the layout's units since its epoch.
    pub time_units: u64,
    pub unit: TimeUnit,
    /// The Unix ms the timestamp's unit starts at, and the same in RFC 3339.
    pub unix_ms: u64,
    pub time_rfc3339: String,
    /// The worker id it carries (for uuidv7, the top bits of `rand_b`); None for rongcloud.
    pub worker: Option<u64>,
    /// The canonical text form.
    pub text: String,
    /// The bit fields, e.g. "sign 1 + time 41 + worker 10 + sequence 12".
    pub bits: String,
    /// The epoch, RFC 3339.
    pub epoch_rfc3339: String,
    /// [`Layout::describe_range`]: how long the time field lasts.
    pub range: String,
    parts: Vec<Part>,
}

impl DecodedId {
    /// Whether the scheme has `part` (a part it lacks reads 0 in `fields`).
    pub fn has(&self, part: Part) -> bool {
        self.parts.contains(&part)
    }

    /// The layout in one line, as the `Decode` RPC gives it: bits, unit and epoch, range.
    pub fn layout_text(&self) -> String {
        format!("{}; {} since {}; {}", self.bits, self.unit, self.epoch_rfc3339, self.range)
    }
}

/// A decoded id as JSON shows it: `seqctl id decode --json` prints it, the AllocSvr's HTTP API
/// (`GET /v1/ids/{scheme}/decode/{id}`) answers it; one object, the fields the scheme lacks
/// null, the id itself a string (it may not fit a JSON reader's doubles).
#[derive(Debug, serde::Serialize)]
pub struct DecodedView {
    /// The name in `[ids.schemes]`.
    pub scheme: String,
    pub kind: String,
    /// The id as a decimal number (a string: it may not fit a JSON reader's doubles).
    pub id: String,
    /// The canonical text form.
    pub text: String,
    /// RFC 3339, UTC, the start of the id's time unit.
    pub time: String,
    /// The raw time field: `unit`s since `epoch`.
    pub time_units: u64,
    pub unit: String,
    pub epoch: String,
    pub unix_ms: u64,
    pub worker: Option<u64>,
    pub business: Option<u64>,
    pub session_type: Option<u64>,
    pub session_hash: Option<u64>,
    pub sequence: u64,
    /// uuidv7's `rand_b` (its top 16 bits are the worker id).
    pub rand: Option<u64>,
    /// The bit fields, most significant first.
    pub layout: String,
    /// How long the layout's time field lasts (`Layout::describe_range`).
    pub range: String,
}

impl DecodedView {
    /// The view of `d`, an id of the scheme named `name` in `[ids.schemes]`.
    pub fn new(name: &str, d: &DecodedId) -> DecodedView {
        let field = |part: Part, value: u64| d.has(part).then_some(value);
        DecodedView {
            scheme: name.to_string(),
            kind: d.scheme.to_string(),
            id: d.id.to_string(),
            text: d.text.clone(),
            time: d.time_rfc3339.clone(),
            time_units: d.time_units,
            unit: d.unit.to_string(),
            epoch: d.epoch_rfc3339.clone(),
            unix_ms: d.unix_ms,
            worker: d.worker,
            business: field(Part::Business, d.fields.business),
            session_type: field(Part::SessionType, d.fields.session_type),
            session_hash: field(Part::SessionHash, d.fields.session_hash),
            sequence: d.fields.sequence,
            rand: field(Part::Rand, d.fields.rand),
            layout: d.bits.clone(),
            range: d.range.clone(),
        }
    }
}

/// Decodes `text_or_id` in `layout` without a server: the id's text form ([`Layout::parse`]:
/// decimal for the 64-bit schemes, the 8-4-4-4-12 form for uuidv7, the 19-character form for
/// rongcloud), or, for the wider schemes, the id as a decimal number. Errors say why it is not
/// one of the layout's ids.
pub fn decode(layout: &Layout, text_or_id: &str) -> Result<DecodedId, DecodeError> {
    let text = text_or_id.trim();
    let id = match layout.parse(text) {
        Ok(id) => id,
        Err(error) => {
            let decimal = layout.scheme().id_bits() > 64
                && !text.is_empty()
                && text.bytes().all(|b| b.is_ascii_digit());
            match text.parse::<u128>() {
                Ok(id) if decimal => id,
                _ => return Err(error),
            }
        }
    };
    decode_id(layout, id)
}

/// Decodes the id `id` in `layout` (checking its width and constant bits).
pub fn decode_id(layout: &Layout, id: u128) -> Result<DecodedId, DecodeError> {
    let fields = layout.decode(id)?;
    let text = layout.format(id)?;
    let unix_ms = layout.unix_ms(fields.time);
    let bits: Vec<String> = layout.parts().iter().map(|(p, w)| format!("{p} {w}")).collect();
    Ok(DecodedId {
        scheme: layout.scheme(),
        id,
        fields,
        time_units: fields.time,
        unit: layout.unit(),
        unix_ms,
        time_rfc3339: idscheme::rfc3339_ms(unix_ms),
        worker: idscheme::worker_of(layout, &fields),
        text,
        bits: bits.join(" + "),
        epoch_rfc3339: idscheme::rfc3339_ms(layout.epoch_ms()),
        range: layout.describe_range(),
        parts: layout.parts().iter().map(|(p, _)| *p).collect(),
    })
}

/// Why a scheme name gives no layout ([`layout_of`]).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SchemeLookupError {
    #[error("no id scheme {name:?} in the cluster config ({})", configured_text(.configured))]
    NotConfigured { name: String, configured: Vec<String> },
    #[error("ids.schemes.{name}: {error}")]
    Invalid { name: String, error: LayoutError },
}

fn configured_text(names: &[String]) -> String {
    if names.is_empty() {
        "it has no [ids.schemes]".to_string()
    } else {
        format!("configured: {}", names.join(", "))
    }
}

/// The layout of the scheme named `name` in the cluster config's `[ids]`, loaded (and checked)
/// at `now_ms` (ms since the Unix epoch), as the AllocSvrs load it.
pub fn layout_of(ids: &IdsConfig, name: &str, now_ms: u64) -> Result<Layout, SchemeLookupError> {
    let scheme = ids.schemes.get(name).ok_or_else(|| SchemeLookupError::NotConfigured {
        name: name.to_string(),
        configured: ids.schemes.keys().cloned().collect(),
    })?;
    scheme
        .layout_spec()
        .load(now_ms)
        .map_err(|error| SchemeLookupError::Invalid { name: name.to_string(), error })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IdSchemeConfig;
    use crate::idscheme::LayoutSpec;

    const NOW_MS: u64 = 1_750_000_000_000; // 2025-06-15

    fn layout(scheme: Scheme) -> Layout {
        let mut spec = LayoutSpec::of(scheme);
        if scheme == Scheme::UidGenerator {
            spec.epoch_ms = idscheme::unix_ms_of_date(2024, 1, 1);
        }
        spec.load(NOW_MS).unwrap()
    }

    /// A snowflake id built by hand: time 1, worker 2, sequence 3 = 1 << 22 | 2 << 12 | 3.
    #[test]
    fn decode_reads_a_hand_built_snowflake_id() {
        let d = decode(&layout(Scheme::Snowflake), "4202499").unwrap();
        assert_eq!((d.time_units, d.worker, d.fields.sequence), (1, Some(2), 3));
        assert_eq!(d.unix_ms, 1_288_834_974_658);
        assert_eq!(d.time_rfc3339, "2010-11-04T01:42:54.658Z");
        assert_eq!(d.text, "4202499");
        assert_eq!(d.bits, "sign 1 + time 41 + worker 10 + sequence 12");
        assert!(d.has(Part::Worker) && !d.has(Part::Business));
        assert!(
            d.layout_text().starts_with(
                "sign 1 + time 41 + worker 10 + sequence 12; ms since 2010-11-04T01:42:54.657Z; \
                 lasts 69.7 years"
            ),
            "{}",
            d.layout_text()
        );
    }

    /// RFC 9562 Appendix A.6's UUIDv7, in upper case: 2022-02-22T19:22:22Z, rand_a 0xCC3, and
    /// the worker id in the top 16 of rand_b's 62 bits (0x18C4DC0C0C07398F >> 46 = 0x6313).
    #[test]
    fn decode_reads_the_rfc_9562_uuidv7_example() {
        let uuid = layout(Scheme::UuidV7);
        let d = decode(&uuid, "017F22E2-79B0-7CC3-98C4-DC0C0C07398F").unwrap();
        assert_eq!(d.unix_ms, 0x017F_22E2_79B0);
        assert_eq!(d.time_rfc3339, "2022-02-22T19:22:22.000Z");
        assert_eq!(d.fields.sequence, 0xCC3);
        assert_eq!(d.fields.rand, 0x18C4_DC0C_0C07_398F);
        assert_eq!(d.worker, Some(0x6313));
        assert_eq!(d.text, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
        // The same id as a decimal number.
        let by_number = decode(&uuid, &d.id.to_string()).unwrap();
        assert_eq!(by_number, d);
    }

    /// Fields → id → text → decode gives the fields back, for every scheme.
    #[test]
    fn decode_round_trips_every_scheme() {
        let cases = [
            (
                Scheme::Snowflake,
                Fields { time: 5_000, worker: 1023, sequence: 4095, ..Fields::default() },
            ),
            (
                Scheme::UidGenerator,
                Fields { time: 77, worker: 4_000_000, sequence: 8191, ..Fields::default() },
            ),
            (
                Scheme::Weibo,
                Fields { time: 123, worker: 31, business: 17, sequence: 9, ..Fields::default() },
            ),
            (
                Scheme::RongCloud,
                Fields {
                    time: NOW_MS,
                    sequence: 12,
                    session_type: 3,
                    session_hash: 0x3f_ffff,
                    ..Fields::default()
                },
            ),
            (
                Scheme::UuidV7,
                Fields { time: NOW_MS, sequence: 1, rand: (5 << 46) | 99, ..Fields::default() },
            ),
            // The last ms of its life: the largest id, 2^53 - 1.
            (
                Scheme::Js53,
                Fields { time: (1 << 41) - 1, worker: 31, sequence: 127, ..Fields::default() },
            ),
        ];
        for (scheme, fields) in cases {
            let layout = layout(scheme);
            let id = layout.encode(&fields).unwrap();
            let text = layout.format(id).unwrap();
            let d = decode(&layout, &text).unwrap();
            assert_eq!((d.id, d.fields, d.text.as_str()), (id, fields, text.as_str()), "{scheme}");
            assert_eq!(d.unix_ms, layout.unix_ms(fields.time), "{scheme}");
            assert_eq!(d.range, layout.describe_range(), "{scheme}");
            let worker = match scheme {
                Scheme::RongCloud => None,
                Scheme::UuidV7 => Some(5),
                _ => Some(fields.worker),
            };
            assert_eq!(d.worker, worker, "{scheme}");
        }
    }

    #[test]
    fn decode_refuses_what_is_not_an_id() {
        let snowflake = layout(Scheme::Snowflake);
        for text in ["", "abc", "-1", "9223372036854775808", "1.5"] {
            assert!(decode(&snowflake, text).is_err(), "{text:?}");
        }
        // 2^53: above every js53 id (JavaScript's Number.MAX_SAFE_INTEGER is 2^53 - 1).
        let js53 = layout(Scheme::Js53);
        let err = decode(&js53, "9007199254740992").unwrap_err();
        assert!(err.to_string().contains("more than 53 bits"), "{err}");
        assert_eq!(decode(&js53, "9007199254740991").unwrap().id, (1 << 53) - 1);
        let uuid = layout(Scheme::UuidV7);
        // Version 4, and a decimal number whose version bits are not 7.
        assert!(decode(&uuid, "017f22e2-79b0-4cc3-98c4-dc0c0c07398f").is_err());
        assert!(decode(&uuid, "12345").is_err());
        assert!(decode(&uuid, "017f22e2-79b0-7cc3-98c4").is_err());
    }

    #[test]
    fn layout_of_names_the_configured_schemes() {
        let mut ids = IdsConfig::default();
        let err = layout_of(&ids, "orders", NOW_MS).unwrap_err();
        assert!(err.to_string().contains("no [ids.schemes]"), "{err}");
        let config = IdSchemeConfig::of;
        ids.schemes.insert("orders".into(), config(Scheme::Snowflake));
        ids.schemes.insert("events".into(), config(Scheme::UuidV7));
        ids.schemes.insert("old".into(), config(Scheme::UidGenerator));
        assert_eq!(layout_of(&ids, "orders", NOW_MS).unwrap().scheme(), Scheme::Snowflake);
        let err = layout_of(&ids, "order", NOW_MS).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no id scheme \"order\" in the cluster config (configured: events, old, orders)"
        );
        let err = layout_of(&ids, "old", NOW_MS).unwrap_err();
        assert!(matches!(err, SchemeLookupError::Invalid { .. }), "ran out in 2024: {err}");
    }
}
