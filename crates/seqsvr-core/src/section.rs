//! Sections: the unit of persistence. `section = uid / section_size`; every uid of a section
//! shares one `max_seq`, so 2^32 uids need only ~43k persisted values.

use crate::ids::SectionId;
use serde::{Deserialize, Serialize};

/// The highest `max_seq` a section may ever reach (2^63). The store refuses raises beyond it
/// with `INVALID_ARGUMENT`; an AllocSvr whose section reached it answers `RESOURCE_EXHAUSTED`
/// for that section. Keeping 2^63 of headroom below `u64::MAX` means no arithmetic on a
/// sequence (`+ step`, step growth, `+ count`) can overflow.
pub const MAX_SEQ_CEILING: u64 = 1 << 63;

/// A half-open range of sections `[begin, end)`, e.g. the sections one set owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionRange {
    begin: SectionId,
    end: SectionId,
}

impl SectionRange {
    /// `None` when `begin > end`: an inverted range is a bug in the caller.
    pub fn new(begin: SectionId, end: SectionId) -> Option<SectionRange> {
        (begin <= end).then_some(SectionRange { begin, end })
    }

    pub fn begin(&self) -> SectionId {
        self.begin
    }

    pub fn end(&self) -> SectionId {
        self.end
    }

    pub fn contains(&self, section: SectionId) -> bool {
        self.begin <= section && section < self.end
    }

    pub fn len(&self) -> u64 {
        self.end.0 - self.begin.0
    }

    pub fn is_empty(&self) -> bool {
        self.begin == self.end
    }
}

/// The section a uid belongs to. `section_size` is validated non-zero by the config.
pub fn section_of(uid: u64, section_size: u64) -> SectionId {
    SectionId(uid / section_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_contains_is_half_open() {
        let r = SectionRange::new(SectionId(3), SectionId(5)).unwrap();
        assert!(!r.contains(SectionId(2)));
        assert!(r.contains(SectionId(3)));
        assert!(r.contains(SectionId(4)));
        assert!(!r.contains(SectionId(5)));
        assert_eq!(r.len(), 2);
        assert!(SectionRange::new(SectionId(5), SectionId(3)).is_none());
    }

    #[test]
    fn section_of_divides() {
        assert_eq!(section_of(0, 100_000), SectionId(0));
        assert_eq!(section_of(99_999, 100_000), SectionId(0));
        assert_eq!(section_of(100_000, 100_000), SectionId(1));
        assert_eq!(section_of(u64::MAX, 1), SectionId(u64::MAX));
    }
}
