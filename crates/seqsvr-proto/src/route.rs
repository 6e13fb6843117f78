//! The one section → owner lookup on a [`RouteTable`]: which entry names the AllocSvr that owns
//! a section (or a uid's section). The SDK, the AllocSvr and seqbench all ask through here.

use crate::v1::{RouteEntry, RouteTable};

impl RouteTable {
    /// The section `uid` falls in under this table's `section_size` (a size of 0 counts as 1).
    /// Whether `uid` is in the table's set at all (`[uid_begin, uid_end)`) is not checked.
    pub fn section_of(&self, uid: u64) -> u64 {
        uid / self.section_size.max(1)
    }

    /// The index in `entries` of the entry whose `[section_begin, section_end)` holds
    /// `section`; none for a section in a gap. Entries come sorted by section (a binary search);
    /// a table that is not falls back to a scan.
    pub fn owner_index_of_section(&self, section: u64) -> Option<usize> {
        let i = self.entries.partition_point(|e| e.section_end <= section);
        let hit = |e: &RouteEntry| e.section_begin <= section && section < e.section_end;
        match self.entries.get(i) {
            Some(e) if hit(e) => Some(i),
            _ => self.entries.iter().position(hit),
        }
    }

    /// The entry naming the owner of `section` (see [`RouteTable::owner_index_of_section`]).
    pub fn owner_of_section(&self, section: u64) -> Option<&RouteEntry> {
        self.owner_index_of_section(section).map(|i| &self.entries[i])
    }

    /// The entry naming the owner of `uid`'s section. Like [`RouteTable::section_of`], it does
    /// not check that `uid` is in the table's set.
    pub fn owner_of_uid(&self, uid: u64) -> Option<&RouteEntry> {
        self.owner_of_section(self.section_of(uid))
    }

    /// The address this table names for `uid`'s section: none when `uid` is outside the
    /// table's set (`[uid_begin, uid_end)`), its section in a gap, or the entry has no address.
    pub fn owner_addr_of_uid(&self, uid: u64) -> Option<&str> {
        if uid < self.uid_begin || uid >= self.uid_end {
            return None;
        }
        self.owner_of_uid(uid).map(|e| e.addr.as_str()).filter(|a| !a.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(section_begin: u64, section_end: u64, alloc_id: u64, addr: &str) -> RouteEntry {
        RouteEntry { section_begin, section_end, alloc_id, addr: addr.into() }
    }

    /// The owner of a uid's section: the entry whose `[begin, end)` holds it, found in a table
    /// sorted by section or not; none for a section in a gap or past the last entry.
    #[test]
    fn the_owner_entry_covers_the_section() {
        let sorted = RouteTable {
            section_size: 10,
            uid_begin: 0,
            uid_end: 100,
            entries: vec![entry(0, 2, 1, "a"), entry(3, 5, 2, "b")],
            ..Default::default()
        };
        let mut unsorted = sorted.clone();
        unsorted.entries.reverse();
        for t in [&sorted, &unsorted] {
            let owners: Vec<Option<&str>> = [5, 15, 25, 35, 45, 55]
                .map(|uid| t.owner_of_uid(uid).map(|e| e.addr.as_str()))
                .into();
            assert_eq!(owners, [Some("a"), Some("a"), None, Some("b"), Some("b"), None]);
            assert_eq!(t.owner_of_section(4).map(|e| e.alloc_id), Some(2));
            let i = t.owner_index_of_section(1).expect("section 1 is owned");
            assert_eq!(t.entries[i].addr, "a");
        }
    }

    /// A section size of 0 (a table not filled in) counts as 1, not a division by zero.
    #[test]
    fn a_zero_section_size_counts_as_one() {
        let t = RouteTable { entries: vec![entry(0, 8, 1, "a")], ..Default::default() };
        assert_eq!(t.section_of(7), 7);
        assert_eq!(t.owner_of_uid(7).map(|e| e.alloc_id), Some(1));
        assert!(t.owner_of_uid(8).is_none());
    }
}
