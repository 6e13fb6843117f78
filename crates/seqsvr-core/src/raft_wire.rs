//! A wire-format pre-check for Raft peer bytes: [`check_message`] walks the protobuf encoding of
//! an `eraftpb.Message` before `protobuf` 2.28 (raft 0.7's codec) parses it, and refuses what no
//! raft-rs encoder ever produces.
//!
//! Why: RUSTSEC-2024-0437 lists every `protobuf` below 3.7.2 as open to a stack overflow on
//! crafted input (unknown fields holding groups nested without limit). Whatever the parser of
//! the version in our tree does with such input, the bytes never reach it: a group wire type
//! anywhere in the parts the parser walks is refused here, by a walker that recurses only into
//! the fixed, finite set of nested messages the generated parser recurses into and never
//! deeper than [`MAX_DEPTH`]:
//!
//! ```text
//! Message ─ entries ─▶ Entry ─ data (EntryConfChange) ─▶ ConfChange
//!    │                   └──── data (EntryConfChangeV2) ─▶ ConfChangeV2 ─ changes ─▶ ConfChangeSingle
//!    └──── snapshot ─▶ Snapshot ─ metadata ─▶ SnapshotMetadata ─ conf_state ─▶ ConfState
//! ```
//!
//! (An `Entry`'s `data` is not parsed by raft-rs on receipt, but the StoreSvr parses the data of
//! conf-change entries as `ConfChange`/`ConfChangeV2` when it applies them, so it is checked too.)
//!
//! Refused: wire types 3 and 4 (groups: eraftpb has none) and 6, 7 (not wire types); a field
//! number 0 or a tag above `u32::MAX`; a varint longer than 10 bytes, or overflowing 64 bits;
//! input that ends inside a varint, a fixed-width value or a length-delimited field; a known
//! field with a wire type its type never has (a nested message not length-delimited); a packed
//! repeated field whose payload is not a whole number of varints. Unknown fields of the four
//! scalar wire types are allowed (a newer raft-rs may add fields), and their length-delimited
//! payloads are opaque: the parser keeps them as bytes and never parses them.
//!
//! The field numbers are those of raft-proto 0.7's `proto/eraftpb.proto`. Pure: no allocation
//! beyond a few slices per entry, no I/O; linear in the input.

use std::fmt;

/// The deepest nesting of the known messages (`Message` at depth 0 … `ConfState` and
/// `ConfChangeSingle` at depth 3). The walk follows the schema, so it cannot go deeper; the
/// limit is checked anyway, so a mistake in the schema tables fails closed.
pub const MAX_DEPTH: usize = 3;

/// The eraftpb messages the check knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    Message,
    Entry,
    Snapshot,
    SnapshotMetadata,
    ConfState,
    HardState,
    ConfChange,
    ConfChangeV2,
    ConfChangeSingle,
}

impl Schema {
    pub fn name(self) -> &'static str {
        match self {
            Schema::Message => "Message",
            Schema::Entry => "Entry",
            Schema::Snapshot => "Snapshot",
            Schema::SnapshotMetadata => "SnapshotMetadata",
            Schema::ConfState => "ConfState",
            Schema::HardState => "HardState",
            Schema::ConfChange => "ConfChange",
            Schema::ConfChangeV2 => "ConfChangeV2",
            Schema::ConfChangeSingle => "ConfChangeSingle",
        }
    }

    /// The kind of field `number`; `None` for a field the schema does not have.
    fn field(self, number: u32) -> Option<Field> {
        use Field::*;
        Some(match (self, number) {
            // msg_type, to, from, term, log_term, index, commit, reject, reject_hint,
            // request_snapshot, deprecated_priority, commit_term, priority.
            (Schema::Message, 1..=6 | 8 | 10 | 11 | 13..=16) => Varint,
            (Schema::Message, 7) => Nested(Schema::Entry),
            (Schema::Message, 9) => Nested(Schema::Snapshot),
            (Schema::Message, 12) => Bytes,
            // entry_type: remembered, it says how `data` is parsed on apply.
            (Schema::Entry, 1) => EntryType,
            // term, index, sync_log.
            (Schema::Entry, 2 | 3 | 5) => Varint,
            (Schema::Entry, 4) => EntryData,
            (Schema::Entry, 6) => Bytes,
            (Schema::Snapshot, 1) => Bytes,
            (Schema::Snapshot, 2) => Nested(Schema::SnapshotMetadata),
            (Schema::SnapshotMetadata, 1) => Nested(Schema::ConfState),
            (Schema::SnapshotMetadata, 2 | 3) => Varint,
            // voters, learners, voters_outgoing, learners_next (repeated uint64).
            (Schema::ConfState, 1..=4) => RepeatedVarint,
            (Schema::ConfState, 5) => Varint,
            (Schema::HardState, 1..=3) => Varint,
            // id, change_type, node_id.
            (Schema::ConfChange, 1..=3) => Varint,
            (Schema::ConfChange, 4) => Bytes,
            (Schema::ConfChangeV2, 1) => Varint,
            (Schema::ConfChangeV2, 2) => Nested(Schema::ConfChangeSingle),
            (Schema::ConfChangeV2, 3) => Bytes,
            (Schema::ConfChangeSingle, 1 | 2) => Varint,
            _ => return None,
        })
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    /// A scalar of wire type 0 (integers, bools, enums).
    Varint,
    /// `repeated uint64`: packed (one length-delimited run of varints) or one varint per value.
    RepeatedVarint,
    /// Opaque bytes (wire type 2).
    Bytes,
    /// A nested message (wire type 2), walked with its own schema.
    Nested(Schema),
    /// `Entry.entry_type`.
    EntryType,
    /// `Entry.data`: a `ConfChange`/`ConfChangeV2` in conf-change entries, else opaque.
    EntryData,
}

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const FIXED32: u8 = 5;

/// `EntryType` values whose data the StoreSvr parses as protobuf.
const ENTRY_CONF_CHANGE: i32 = 1;
const ENTRY_CONF_CHANGE_V2: i32 = 2;

/// Why bytes are not a well-formed eraftpb message. `at` is a byte offset in the checked input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error(
        "{message}: field {field} has group wire type {wire_type} at byte {at}; eraftpb has no \
         groups (refused: RUSTSEC-2024-0437)"
    )]
    Group { message: Schema, field: u32, wire_type: u8, at: usize },
    #[error("{message}: field {field} has wire type {wire_type} at byte {at}, which is not a protobuf wire type")]
    InvalidWireType { message: Schema, field: u32, wire_type: u8, at: usize },
    #[error("{message}: field {field} has wire type {wire_type} at byte {at}; its type needs {expected}")]
    WrongWireType { message: Schema, field: u32, wire_type: u8, expected: &'static str, at: usize },
    #[error("{message}: tag {tag} at byte {at} has no valid field number")]
    BadTag { message: Schema, tag: u64, at: usize },
    #[error("{message}: the input ends inside a {what} at byte {at}")]
    Truncated { message: Schema, what: &'static str, at: usize },
    #[error("{message}: varint at byte {at} is longer than 10 bytes or overflows 64 bits")]
    OverlongVarint { message: Schema, at: usize },
    #[error("{message}: field {field} at byte {at} claims {len} bytes, only {left} are left")]
    LengthPastEnd { message: Schema, field: u32, len: u64, left: usize, at: usize },
    #[error("{message} nested {depth} deep at byte {at}: deeper than any eraftpb message (max {MAX_DEPTH})")]
    TooDeep { message: Schema, depth: usize, at: usize },
}

/// Checks the bytes of one `eraftpb.Message` (a Raft transport message from a peer).
pub fn check_message(bytes: &[u8]) -> Result<(), WireError> {
    check(Schema::Message, bytes)
}

/// Checks the bytes of one encoded message of the given schema (e.g. an `Entry` read back from
/// disk).
pub fn check(schema: Schema, bytes: &[u8]) -> Result<(), WireError> {
    walk(schema, bytes, 0, 0)
}

/// Reads wire-format primitives from `buf`, which starts at offset `base` of the whole input.
struct Reader<'a> {
    message: Schema,
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    fn at(&self) -> usize {
        self.base + self.pos
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let start = self.at();
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(WireError::Truncated {
                    message: self.message,
                    what: "varint",
                    at: start,
                });
            };
            self.pos += 1;
            // The 10th byte holds bit 63 only: anything more overflows 64 bits.
            if i == 9 && b > 1 {
                return Err(WireError::OverlongVarint { message: self.message, at: start });
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(WireError::OverlongVarint { message: self.message, at: start })
    }

    fn skip(&mut self, n: usize, what: &'static str) -> Result<(), WireError> {
        if self.buf.len() - self.pos < n {
            return Err(WireError::Truncated { message: self.message, what, at: self.at() });
        }
        self.pos += n;
        Ok(())
    }

    /// A length-delimited payload: its bytes and their offset in the whole input.
    fn payload(&mut self, field: u32) -> Result<(&'a [u8], usize), WireError> {
        let at = self.at();
        let len = self.varint()?;
        let left = self.buf.len() - self.pos;
        match usize::try_from(len) {
            Ok(n) if n <= left => {
                let start = self.pos;
                self.pos += n;
                Ok((&self.buf[start..self.pos], self.base + start))
            }
            _ => Err(WireError::LengthPastEnd { message: self.message, field, len, left, at }),
        }
    }
}

fn walk(schema: Schema, buf: &[u8], base: usize, depth: usize) -> Result<(), WireError> {
    if depth > MAX_DEPTH {
        return Err(WireError::TooDeep { message: schema, depth, at: base });
    }
    let mut r = Reader { message: schema, buf, pos: 0, base };
    // An Entry's types and data, judged once the whole entry is read (fields come in any order).
    let mut conf_change = false;
    let mut conf_change_v2 = false;
    let mut data: Vec<(&[u8], usize)> = Vec::new();
    while !r.done() {
        let at = r.at();
        let tag = r.varint()?;
        let (number, wire_type) = match u32::try_from(tag) {
            Ok(t) if t >> 3 != 0 => (t >> 3, (t & 7) as u8),
            _ => return Err(WireError::BadTag { message: schema, tag, at }),
        };
        let wrong = |expected| WireError::WrongWireType {
            message: schema,
            field: number,
            wire_type,
            expected,
            at,
        };
        match wire_type {
            START_GROUP | END_GROUP => {
                return Err(WireError::Group { message: schema, field: number, wire_type, at })
            }
            VARINT | FIXED64 | LEN | FIXED32 => {}
            _ => {
                return Err(WireError::InvalidWireType {
                    message: schema,
                    field: number,
                    wire_type,
                    at,
                })
            }
        }
        match schema.field(number) {
            Some(Field::Varint) => {
                if wire_type != VARINT {
                    return Err(wrong("wire type 0 (varint)"));
                }
                r.varint()?;
            }
            Some(Field::EntryType) => {
                if wire_type != VARINT {
                    return Err(wrong("wire type 0 (varint)"));
                }
                // protobuf 2.28 reads an enum as the low 32 bits of the varint.
                match r.varint()? as i32 {
                    ENTRY_CONF_CHANGE => conf_change = true,
                    ENTRY_CONF_CHANGE_V2 => conf_change_v2 = true,
                    _ => {}
                }
            }
            Some(Field::RepeatedVarint) => match wire_type {
                VARINT => {
                    r.varint()?;
                }
                LEN => {
                    let (packed, start) = r.payload(number)?;
                    let mut values = Reader { message: schema, buf: packed, pos: 0, base: start };
                    while !values.done() {
                        values.varint()?;
                    }
                }
                _ => return Err(wrong("wire type 0 or 2 (varint or packed)")),
            },
            Some(Field::Bytes) => {
                if wire_type != LEN {
                    return Err(wrong("wire type 2 (length-delimited)"));
                }
                r.payload(number)?;
            }
            Some(Field::EntryData) => {
                if wire_type != LEN {
                    return Err(wrong("wire type 2 (length-delimited)"));
                }
                data.push(r.payload(number)?);
            }
            Some(Field::Nested(inner)) => {
                if wire_type != LEN {
                    return Err(wrong("wire type 2 (a nested message)"));
                }
                let (bytes, start) = r.payload(number)?;
                walk(inner, bytes, start, depth + 1)?;
            }
            // An unknown field: skipped as the parser skips it, payloads unparsed.
            None => match wire_type {
                VARINT => {
                    r.varint()?;
                }
                FIXED64 => r.skip(8, "fixed64")?,
                FIXED32 => r.skip(4, "fixed32")?,
                _ => {
                    r.payload(number)?;
                }
            },
        }
    }
    // Any data of a conf-change entry is parsed on apply: check it as every type it may have.
    for (bytes, start) in data {
        if conf_change {
            walk(Schema::ConfChange, bytes, start, depth + 1)?;
        }
        if conf_change_v2 {
            walk(Schema::ConfChangeV2, bytes, start, depth + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // A minimal encoder, enough to build the messages raft-rs sends.
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn tag(field: u32, wire_type: u8, out: &mut Vec<u8>) {
        varint(u64::from(field) << 3 | u64::from(wire_type), out);
    }

    fn uint(field: u32, v: u64, out: &mut Vec<u8>) {
        tag(field, VARINT, out);
        varint(v, out);
    }

    fn bytes(field: u32, payload: &[u8], out: &mut Vec<u8>) {
        tag(field, LEN, out);
        varint(payload.len() as u64, out);
        out.extend_from_slice(payload);
    }

    fn entry(entry_type: u64, term: u64, index: u64, data: &[u8]) -> Vec<u8> {
        let mut e = Vec::new();
        uint(1, entry_type, &mut e);
        uint(2, term, &mut e);
        uint(3, index, &mut e);
        bytes(4, data, &mut e);
        e
    }

    fn conf_state(voters: &[u64], packed: bool) -> Vec<u8> {
        let mut c = Vec::new();
        if packed {
            let mut run = Vec::new();
            voters.iter().for_each(|&v| varint(v, &mut run));
            bytes(1, &run, &mut c);
        } else {
            voters.iter().for_each(|&v| uint(1, v, &mut c));
        }
        uint(2, 9, &mut c);
        uint(5, 1, &mut c);
        c
    }

    /// A MsgAppend with a normal and a conf-change entry, and a MsgSnapshot-style snapshot.
    fn append() -> Vec<u8> {
        let mut conf_change = Vec::new();
        uint(1, 7, &mut conf_change);
        uint(2, 0, &mut conf_change);
        uint(3, 4, &mut conf_change);
        bytes(4, b"store4:7101", &mut conf_change);
        let mut m = Vec::new();
        uint(1, 3, &mut m);
        uint(2, 2, &mut m);
        uint(3, 1, &mut m);
        uint(4, 5, &mut m);
        bytes(7, &entry(0, 5, 11, br#"{"Settle":{"lease_epoch":3}}"#), &mut m);
        bytes(7, &entry(1, 5, 12, &conf_change), &mut m);
        uint(8, 10, &mut m);
        uint(16, u64::MAX, &mut m); // priority: -1 as int64
        m
    }

    fn snapshot_message(packed: bool) -> Vec<u8> {
        let mut meta = Vec::new();
        bytes(1, &conf_state(&[1, 2, 3], packed), &mut meta);
        uint(2, 100, &mut meta);
        uint(3, 4, &mut meta);
        let mut snap = Vec::new();
        bytes(1, b"SEQSNAP\x00\x00\x00\x02{}{}", &mut snap);
        bytes(2, &meta, &mut snap);
        let mut m = Vec::new();
        uint(1, 7, &mut m);
        bytes(9, &snap, &mut m);
        m
    }

    /// `n` start-group tags of field 100, then as many end-group tags: the input of
    /// RUSTSEC-2024-0437 (a parser that recurses into unknown groups uses stack per level).
    fn nested_groups(n: usize) -> Vec<u8> {
        let mut m = Vec::new();
        uint(1, 8, &mut m); // a MsgHeartbeat …
        for _ in 0..n {
            tag(100, START_GROUP, &mut m);
        }
        for _ in 0..n {
            tag(100, END_GROUP, &mut m);
        }
        m
    }

    #[test]
    fn accepts_what_raft_sends() {
        assert_eq!(check_message(&[]), Ok(()), "an empty message is all defaults");
        assert_eq!(check_message(&append()), Ok(()));
        assert_eq!(check_message(&snapshot_message(true)), Ok(()));
        assert_eq!(check_message(&snapshot_message(false)), Ok(()));
        let mut hard_state = Vec::new();
        uint(1, 5, &mut hard_state);
        uint(2, 1, &mut hard_state);
        uint(3, 10, &mut hard_state);
        assert_eq!(check(Schema::HardState, &hard_state), Ok(()));
        assert_eq!(check(Schema::Entry, &entry(0, 1, 1, b"")), Ok(()));
        // An empty ConfChangeV2 (leave joint) and one with two changes.
        assert_eq!(check(Schema::Entry, &entry(2, 1, 2, b"")), Ok(()));
        let mut single = Vec::new();
        uint(1, 2, &mut single);
        uint(2, 5, &mut single);
        let mut v2 = Vec::new();
        uint(1, 1, &mut v2);
        bytes(2, &single, &mut v2);
        bytes(2, &single, &mut v2);
        assert_eq!(check(Schema::Entry, &entry(2, 1, 2, &v2)), Ok(()));
    }

    #[test]
    fn unknown_scalar_fields_are_allowed_and_their_payloads_unparsed() {
        let mut m = append();
        uint(99, 1, &mut m);
        tag(98, FIXED64, &mut m);
        m.extend_from_slice(&[0; 8]);
        tag(97, FIXED32, &mut m);
        m.extend_from_slice(&[0; 4]);
        // Group tags inside an unknown field's bytes are never parsed by anyone.
        let mut opaque = Vec::new();
        tag(1, START_GROUP, &mut opaque);
        bytes(96, &opaque, &mut m);
        assert_eq!(check_message(&m), Ok(()));
    }

    #[test]
    fn refuses_deeply_nested_groups_at_the_first_tag() {
        let m = nested_groups(1_000_000);
        assert_eq!(
            check_message(&m),
            Err(WireError::Group { message: Schema::Message, field: 100, wire_type: 3, at: 2 })
        );
        let err = check_message(&m).unwrap_err().to_string();
        assert!(err.contains("RUSTSEC-2024-0437"), "{err}");
    }

    #[test]
    fn refuses_groups_in_every_nested_message() {
        let mut group = Vec::new();
        tag(50, START_GROUP, &mut group);
        tag(50, END_GROUP, &mut group);
        // In an Entry.
        let mut e = entry(0, 1, 1, b"x");
        e.extend_from_slice(&group);
        let mut m = Vec::new();
        bytes(7, &e, &mut m);
        assert!(matches!(
            check_message(&m),
            Err(WireError::Group { message: Schema::Entry, field: 50, .. })
        ));
        // In a ConfState inside SnapshotMetadata inside Snapshot.
        let mut cs = conf_state(&[1], true);
        cs.extend_from_slice(&group);
        let mut meta = Vec::new();
        bytes(1, &cs, &mut meta);
        let mut snap = Vec::new();
        bytes(2, &meta, &mut snap);
        let mut m = Vec::new();
        bytes(9, &snap, &mut m);
        assert!(matches!(
            check_message(&m),
            Err(WireError::Group { message: Schema::ConfState, .. })
        ));
        // In the data of a conf-change entry (parsed as ConfChange on apply) …
        let mut m = Vec::new();
        bytes(7, &entry(1, 1, 1, &group), &mut m);
        assert!(matches!(
            check_message(&m),
            Err(WireError::Group { message: Schema::ConfChange, .. })
        ));
        // … and of a ConfChangeV2 entry, also when the type comes after the data.
        let mut e = Vec::new();
        bytes(4, &group, &mut e);
        uint(1, 2, &mut e);
        let mut m = Vec::new();
        bytes(7, &e, &mut m);
        assert!(matches!(
            check_message(&m),
            Err(WireError::Group { message: Schema::ConfChangeV2, .. })
        ));
        // An enum read as the low 32 bits: 2^32 + 1 is EntryConfChange to protobuf 2.28.
        let mut m = Vec::new();
        bytes(7, &entry((1 << 32) + 1, 1, 1, &group), &mut m);
        assert!(matches!(check_message(&m), Err(WireError::Group { .. })));
        // The data of a normal entry is our JSON command, never parsed as protobuf.
        let mut m = Vec::new();
        bytes(7, &entry(0, 1, 1, &group), &mut m);
        assert_eq!(check_message(&m), Ok(()));
        // An end-group tag alone is refused too.
        let mut m = Vec::new();
        tag(3, END_GROUP, &mut m);
        assert!(matches!(check_message(&m), Err(WireError::Group { wire_type: 4, .. })));
    }

    #[test]
    fn refuses_malformed_wire_data() {
        // Input ending inside a varint.
        assert!(matches!(
            check_message(&[0x08, 0x80]),
            Err(WireError::Truncated { what: "varint", at: 1, .. })
        ));
        // An 11-byte varint, and a 10-byte one past 64 bits.
        let mut m = vec![0x10];
        m.extend_from_slice(&[0xff; 10]);
        m.push(0x01);
        assert!(matches!(check_message(&m), Err(WireError::OverlongVarint { at: 1, .. })));
        let mut m = vec![0x10];
        m.extend_from_slice(&[0xff; 9]);
        m.push(0x02);
        assert!(matches!(check_message(&m), Err(WireError::OverlongVarint { .. })));
        // u64::MAX itself is fine.
        let mut m = Vec::new();
        uint(2, u64::MAX, &mut m);
        assert_eq!(check_message(&m), Ok(()));
        // A length past the end, and one past usize.
        let mut m = Vec::new();
        tag(12, LEN, &mut m);
        varint(5, &mut m);
        m.extend_from_slice(b"abc");
        assert!(matches!(
            check_message(&m),
            Err(WireError::LengthPastEnd { field: 12, len: 5, left: 3, .. })
        ));
        let mut m = Vec::new();
        tag(12, LEN, &mut m);
        varint(u64::MAX, &mut m);
        assert!(matches!(check_message(&m), Err(WireError::LengthPastEnd { .. })));
        // Field number 0, and a tag wider than 32 bits.
        assert!(matches!(check_message(&[0x00, 0x01]), Err(WireError::BadTag { tag: 0, .. })));
        let mut m = Vec::new();
        varint(1 << 35, &mut m);
        assert!(matches!(check_message(&m), Err(WireError::BadTag { .. })));
        // Wire types 6 and 7.
        for wt in [6, 7] {
            let mut m = Vec::new();
            tag(2, wt, &mut m);
            assert!(matches!(check_message(&m), Err(WireError::InvalidWireType { .. })));
        }
        // Truncated fixed-width unknown fields.
        let mut m = Vec::new();
        tag(90, FIXED64, &mut m);
        m.extend_from_slice(&[0; 7]);
        assert!(matches!(check_message(&m), Err(WireError::Truncated { what: "fixed64", .. })));
        let mut m = Vec::new();
        tag(90, FIXED32, &mut m);
        assert!(matches!(check_message(&m), Err(WireError::Truncated { what: "fixed32", .. })));
        // A nested message that is not length-delimited; a varint field that is.
        let mut m = Vec::new();
        uint(9, 1, &mut m);
        assert!(matches!(
            check_message(&m),
            Err(WireError::WrongWireType { message: Schema::Message, field: 9, .. })
        ));
        let mut m = Vec::new();
        bytes(2, b"x", &mut m);
        assert!(matches!(check_message(&m), Err(WireError::WrongWireType { field: 2, .. })));
        // A packed run that ends inside a varint.
        let mut cs = Vec::new();
        bytes(1, &[0x01, 0x80], &mut cs);
        assert!(matches!(
            check(Schema::ConfState, &cs),
            Err(WireError::Truncated { message: Schema::ConfState, at: 3, .. })
        ));
    }

    #[test]
    fn offsets_are_absolute_in_nested_messages() {
        let mut e = entry(0, 1, 1, b"");
        let bad_at_in_entry = e.len();
        tag(9, 6, &mut e);
        let mut m = Vec::new();
        uint(2, 1, &mut m);
        let entry_start = m.len() + 2; // tag and one-byte length
        bytes(7, &e, &mut m);
        assert_eq!(
            check_message(&m),
            Err(WireError::InvalidWireType {
                message: Schema::Entry,
                field: 9,
                wire_type: 6,
                at: entry_start + bad_at_in_entry,
            })
        );
    }

    #[test]
    fn the_schema_is_no_deeper_than_max_depth() {
        fn depth(s: Schema) -> usize {
            let mut inner: Vec<Schema> = (1..=32)
                .filter_map(|n| match s.field(n) {
                    Some(Field::Nested(i)) => Some(i),
                    _ => None,
                })
                .collect();
            if (1..=32).any(|n| s.field(n) == Some(Field::EntryData)) {
                inner.extend([Schema::ConfChange, Schema::ConfChangeV2]);
            }
            inner.into_iter().map(|i| 1 + depth(i)).max().unwrap_or(0)
        }
        assert_eq!(depth(Schema::Message), MAX_DEPTH);
        assert!(matches!(
            walk(Schema::ConfState, &[], 0, MAX_DEPTH + 1),
            Err(WireError::TooDeep { depth: 4, .. })
        ));
    }

    /// Any message built from the schema's own fields, in any order, with unknown scalars.
    fn any_message() -> BoxedStrategy<Vec<u8>> {
        let scalar = (prop_oneof![1u32..=6, Just(8), 10u32..=11, 13u32..=16], any::<u64>())
            .prop_map(|(f, v)| {
                let mut out = Vec::new();
                uint(f, v, &mut out);
                out
            });
        let unknown = (17u32..1000, any::<u64>(), prop::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(f, v, b)| {
                let mut out = Vec::new();
                match v % 4 {
                    0 => uint(f, v, &mut out),
                    1 => bytes(f, &b, &mut out),
                    2 => {
                        tag(f, FIXED64, &mut out);
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                    _ => {
                        tag(f, FIXED32, &mut out);
                        out.extend_from_slice(&v.to_le_bytes()[..4]);
                    }
                }
                out
            });
        let entry = (0u64..3, any::<u64>(), prop::collection::vec(any::<u8>(), 0..16)).prop_map(
            |(t, i, d)| {
                let mut out = Vec::new();
                // Conf-change entries carry a well-formed change.
                let data = if t == 0 {
                    d
                } else {
                    let mut c = Vec::new();
                    uint(1, i, &mut c);
                    c
                };
                bytes(7, &entry(t, i, i, &data), &mut out);
                out
            },
        );
        let snapshot = (prop::collection::vec(any::<u64>(), 0..5), any::<bool>()).prop_map(
            |(voters, packed)| {
                let mut meta = Vec::new();
                bytes(1, &conf_state(&voters, packed), &mut meta);
                let mut snap = Vec::new();
                bytes(2, &meta, &mut snap);
                let mut out = Vec::new();
                bytes(9, &snap, &mut out);
                out
            },
        );
        prop::collection::vec(prop_oneof![scalar, unknown, entry, snapshot], 0..12)
            .prop_map(|parts| parts.concat())
            .boxed()
    }

    proptest! {
        #[test]
        fn well_formed_messages_pass(m in any_message()) {
            prop_assert_eq!(check_message(&m), Ok(()));
        }

        #[test]
        fn any_bytes_are_judged_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = check_message(&bytes);
            let _ = check(Schema::Entry, &bytes);
        }

        #[test]
        fn cutting_a_message_inside_a_field_is_refused(m in any_message(), cut in any::<usize>()) {
            // Cut at a random point; either it is a field boundary (still well formed) or the
            // check names a truncation, never anything else.
            prop_assume!(!m.is_empty());
            let cut = cut % m.len();
            match check_message(&m[..cut]) {
                Ok(()) => {}
                Err(WireError::Truncated { .. } | WireError::LengthPastEnd { .. }) => {}
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
    }
}
