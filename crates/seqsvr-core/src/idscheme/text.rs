//! Text forms: RongCloud's 19-character ids (seed 000 §4–§5), canonical UUIDs (RFC 9562 §4),
//! and RFC 3339 UTC timestamps for decoded ids and error messages.

/// RongCloud's base-32 alphabet (seed 000 §4): the digits 2–9 and the letters A–Z without `I`
/// and `O` (8 + 24 = 32 characters; 0, 1, I and O are left out as easy to confuse), in index
/// order. The index order is also ASCII order (digits before letters, letters in order), so the
/// 19-character texts of two ids sort like the ids: every text has the same length and its
/// dashes in the same places.
///
/// Deviation: seed 000's sample ids ("BD8U-DG1U-5UI5-L789", "BD8U-FCOJ-LDC5-L789") contain `1`,
/// `I` and `O`, which its own description of the alphabet excludes; the table itself is an
/// image missing from the seed. We follow the description, so those samples do not parse.
pub const RONGCLOUD_ALPHABET: &[u8; 32] = b"23456789ABCDEFGHJKLMNPQRSTUVWXYZ";

/// The 80-bit id as 16 characters of 5 bits each, most significant first ("from left to right,
/// every 5 bits to an index into the table", seed 000 §5), in four groups of 4 joined by `-`.
/// Uses the low 80 bits of `id`.
pub(super) fn rongcloud_text(id: u128) -> String {
    let mut out = String::with_capacity(19);
    for i in 0..16 {
        if i > 0 && i % 4 == 0 {
            out.push('-');
        }
        let index = (id >> (75 - 5 * i)) & 0x1f;
        out.push(char::from(RONGCLOUD_ALPHABET[index as usize]));
    }
    out
}

pub(super) fn parse_rongcloud(text: &str) -> Result<u128, String> {
    let bytes = text.as_bytes();
    if bytes.len() != 19 {
        return Err(format!(
            "expected 19 characters (4 groups of 4 joined by '-'), got {}",
            text.chars().count()
        ));
    }
    let mut id: u128 = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if i % 5 == 4 {
            if b != b'-' {
                return Err(format!("expected '-' at position {}", i + 1));
            }
            continue;
        }
        let upper = b.to_ascii_uppercase();
        let index = RONGCLOUD_ALPHABET.iter().position(|&c| c == upper).ok_or_else(|| {
            format!(
                "{:?} at position {} is not one of {} (0, 1, I and O are left out)",
                char::from(b),
                i + 1,
                std::str::from_utf8(RONGCLOUD_ALPHABET).unwrap_or_default()
            )
        })?;
        id = (id << 5) | index as u128;
    }
    Ok(id)
}

/// The canonical form (RFC 9562 §4): 32 lowercase hex digits as 8-4-4-4-12.
pub(super) fn uuid_text(id: u128) -> String {
    let hex = format!("{id:032x}");
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// The 8-4-4-4-12 form, hex digits in either case (RFC 9562 §4: "case insensitive on input").
pub(super) fn parse_uuid(text: &str) -> Result<u128, String> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return Err(format!(
            "expected 36 characters (8-4-4-4-12 hex digits), got {}",
            text.chars().count()
        ));
    }
    let mut id: u128 = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if b != b'-' {
                return Err(format!("expected '-' at position {}", i + 1));
            }
            continue;
        }
        let digit = char::from(b).to_digit(16).ok_or_else(|| {
            format!("{:?} at position {} is not a hex digit", char::from(b), i + 1)
        })?;
        id = (id << 4) | u128::from(digit);
    }
    Ok(id)
}

const MS_PER_DAY: u64 = 86_400_000;

/// `unix_ms` as RFC 3339 UTC with milliseconds, e.g. `2024-11-20T21:24:16.000Z`. Years past
/// 9999 (a 48-bit UUIDv7 lasts to 10889) are written with more digits, beyond RFC 3339.
pub fn rfc3339_ms(unix_ms: u64) -> String {
    let (days, ms) = (unix_ms / MS_PER_DAY, unix_ms % MS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
}

/// Midnight UTC of a calendar date as ms since the Unix epoch (`None` for an invalid date or
/// one outside the years 1970..=9999), e.g. an epoch written as `2016-05-20`.
pub fn unix_ms_of_date(year: u64, month: u64, day: u64) -> Option<u64> {
    if !(1970..=9999).contains(&year) || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Days since 1970-01-01 (H. Hinnant's days_from_civil, for years >= 1970).
    let y = if month <= 2 { year - 1 } else { year };
    let (era, yoe) = (y / 400, y % 400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    // Reject dates such as Feb 30 by converting back.
    (civil_from_days(days) == (year, month, day)).then_some(days * MS_PER_DAY)
}

/// (year, month, day) of a day count since 1970-01-01 (H. Hinnant's civil_from_days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}
