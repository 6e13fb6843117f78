//! The id text forms of `seqsvr_core::idscheme` (`Layout::parse`: RongCloud's 19 characters,
//! the canonical UUID form, decimal for the 64-bit schemes) and the bit-level `Layout::decode`,
//! as a service decodes an id a caller hands it. The first byte picks the scheme. Never panics;
//! text that parses formats back to its canonical form (RongCloud upper case, UUID lower case,
//! plain decimal), which parses to the same id; an id that decodes re-encodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seqsvr_core::idscheme::{rfc3339_ms, unix_ms_of_date, LayoutSpec, Scheme};

/// 2023-11-14: every scheme's default layout loads then (UidGenerator's ran out in 2024).
const NOW_MS: u64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let scheme = Scheme::ALL[usize::from(which) % Scheme::ALL.len()];
    let layout = LayoutSpec::of(scheme).load(NOW_MS).expect("default layouts load");
    // Bits: the first 16 bytes as an id.
    let mut raw = [0u8; 16];
    let n = rest.len().min(16);
    raw[..n].copy_from_slice(&rest[..n]);
    let id = u128::from_le_bytes(raw);
    if let Ok(fields) = layout.decode(id) {
        assert_eq!(layout.encode(&fields), Ok(id));
        let text = layout.format(id).expect("a decodable id formats");
        assert_eq!(layout.parse(&text), Ok(id));
        let _ = rfc3339_ms(layout.unix_ms(fields.time));
    }
    // Text.
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let Ok(id) = layout.parse(text) else { return };
    let canonical = layout.format(id).expect("a parsed id formats");
    match scheme {
        Scheme::RongCloud => assert_eq!(canonical, text.to_ascii_uppercase()),
        Scheme::UuidV7 => assert_eq!(canonical, text.to_ascii_lowercase()),
        _ => assert_eq!(canonical, id.to_string()),
    }
    assert_eq!(layout.parse(&canonical), Ok(id));
    let _ = rfc3339_ms(id as u64);
    let (y, m, d) = (id as u64 % 10_000, (id >> 64) as u64 % 13, (id >> 72) as u64 % 32);
    if let Some(ms) = unix_ms_of_date(y, m, d) {
        assert!(rfc3339_ms(ms).starts_with(&format!("{y:04}-{m:02}-{d:02}T00:00:00.000Z")));
    }
});
