//! CPU time of processes, from /proc: this client's and the servers' (`--server-pids`, and
//! `--server-trees` with every descendant, e.g. PostgreSQL's postmaster and its backends).
//!
//! Each process counts its user + system time plus that of its children it has waited for
//! (`cutime`, `cstime`): a backend that exits during the run leaves its time in its parent's
//! count, so a tree's total stays continuous across exits.

use anyhow::Context;
use std::collections::{BTreeMap, BTreeSet};

/// USER_HZ is 100 on Linux: /proc counts CPU time in ticks of 10 ms (runs of seconds make the
/// granularity negligible).
const TICK_US: u64 = 10_000;

/// CPU time (user + system, own and waited-for children's) a process (`"self"` or a PID) has
/// used so far, in µs.
pub fn cpu_us(pid: &str) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} is not running"))?;
    cpu_ticks(&stat).map(|t| t * TICK_US).with_context(|| format!("malformed /proc/{pid}/stat"))
}

/// CPU time every CPU of the machine spent busy so far (user, nice, system, irq, softirq and
/// steal of /proc/stat's `cpu` line; guest time is inside user), in µs.
pub fn machine_busy_us() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    busy_ticks(&stat).map(|t| t * TICK_US).context("no cpu line in /proc/stat")
}

/// The busy ticks of /proc/stat's first (`cpu`, all CPUs) line: fields 1, 2, 3, 6, 7 and 8.
pub fn busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> =
        line.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    [0, 1, 2, 5, 6, 7].iter().map(|&i| fields.get(i).copied()).sum()
}

/// The fields of a /proc/<pid>/stat line after the command name (field 2, in parentheses, may
/// hold spaces and parentheses: fields are counted after the last ')'). Index 0 is field 3.
fn fields_after_name(stat: &str) -> Option<Vec<&str>> {
    Some(stat.rsplit_once(')')?.1.split_whitespace().collect())
}

/// utime + stime + cutime + cstime (fields 14 to 17) of a /proc/<pid>/stat line.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let fields = fields_after_name(stat)?;
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    // Field 3 (state) is the first after the name: fields 14 to 17 are at 11 to 14.
    Some(tick(11)? + tick(12)? + tick(13)? + tick(14)?)
}

/// The parent PID (field 4) of a /proc/<pid>/stat line.
pub fn ppid_of(stat: &str) -> Option<u32> {
    fields_after_name(stat)?.get(1)?.parse().ok()
}

/// Every process of the trees rooted at `roots` (roots included), from (pid, ppid) pairs.
pub fn descendants(roots: &[u32], parents: &[(u32, u32)]) -> BTreeSet<u32> {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &(pid, ppid) in parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut found: BTreeSet<u32> = BTreeSet::new();
    let mut todo: Vec<u32> = roots.to_vec();
    while let Some(p) = todo.pop() {
        if found.insert(p) {
            todo.extend(children.get(&p).into_iter().flatten().copied());
        }
    }
    found
}

/// (pid, ppid) of every process now running (a process that exits while /proc is read is
/// skipped).
fn process_parents() -> anyhow::Result<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").context("listing /proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(ppid) =
            std::fs::read_to_string(entry.path().join("stat")).ok().as_deref().and_then(ppid_of)
        {
            out.push((pid, ppid));
        }
    }
    Ok(out)
}

/// The server processes whose CPU a run counts, fixed when the timed window starts.
pub struct ServerProcesses {
    /// Given one by one: each must still run at the end of the run.
    named: Vec<u32>,
    /// The trees' processes (roots first found, then descendants): one that exits during the
    /// run is counted by its parent's `cutime`.
    tree: Vec<u32>,
}

impl ServerProcesses {
    /// `named` as they are; `trees` with every descendant running now (call it after the
    /// client's connections are made: PostgreSQL starts a backend per connection).
    pub fn resolve(named: &[u32], trees: &[u32]) -> anyhow::Result<ServerProcesses> {
        for &root in trees {
            cpu_us(&root.to_string()).with_context(|| format!("--server-trees {root}"))?;
        }
        let tree: Vec<u32> = if trees.is_empty() {
            Vec::new()
        } else {
            let all = descendants(trees, &process_parents()?);
            all.into_iter().filter(|p| !named.contains(p)).collect()
        };
        Ok(ServerProcesses { named: named.to_vec(), tree })
    }

    /// How many processes are counted.
    pub fn len(&self) -> usize {
        self.named.len() + self.tree.len()
    }

    /// Their CPU time so far, in µs.
    pub fn cpu_us(&self) -> anyhow::Result<u64> {
        let named: u64 =
            self.named.iter().map(|p| cpu_us(&p.to_string())).sum::<anyhow::Result<u64>>()?;
        let tree: u64 = self.tree.iter().filter_map(|p| cpu_us(&p.to_string()).ok()).sum();
        Ok(named + tree)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_add_own_and_children_time_after_the_command_name() {
        let line = "4242 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 250 30 7 3 20 0 1 0";
        assert_eq!(cpu_ticks(line), Some(290));
        assert_eq!(ppid_of(line), Some(1));
        assert_eq!(cpu_ticks("4242 (short) S 1 2"), None);
        assert_eq!(ppid_of("4242 (x) S"), None);
        assert!(cpu_us("self").is_ok());
    }

    #[test]
    fn machine_busy_time_leaves_out_idle_and_iowait() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let stat = "cpu  100 5 30 9000 70 2 3 1 40 0\ncpu0 50 2 15 4500 35 1 1 0 20 0\n";
        assert_eq!(busy_ticks(stat), Some(141));
        assert_eq!(busy_ticks("intr 1 2 3\n"), None);
        assert_eq!(busy_ticks("cpu  1 2\n"), None, "too few fields");
        assert!(machine_busy_us().unwrap() > 0);
    }

    #[test]
    fn descendants_are_the_whole_tree_and_nothing_else() {
        // 10 ─┬─ 11 ── 13      20 ── 21 (another tree)
        //     └─ 12
        let parents = [(10, 1), (11, 10), (12, 10), (13, 11), (20, 1), (21, 20), (1, 0)];
        assert_eq!(descendants(&[10], &parents), BTreeSet::from([10, 11, 12, 13]));
        assert_eq!(descendants(&[11, 21], &parents), BTreeSet::from([11, 13, 21]));
        assert_eq!(descendants(&[99], &parents), BTreeSet::from([99]), "a leaf root");
        // A (corrupt) cycle does not loop forever.
        assert_eq!(descendants(&[5], &[(5, 6), (6, 5)]), BTreeSet::from([5, 6]));
    }

    #[test]
    fn this_process_is_found_in_its_parents_tree() {
        let me = std::process::id();
        let parent = ppid_of(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        let procs = ServerProcesses::resolve(&[], &[parent]).unwrap();
        assert!(procs.tree.contains(&me) && procs.tree.contains(&parent));
        assert!(procs.cpu_us().is_ok());
        assert!(ServerProcesses::resolve(&[], &[u32::MAX - 1]).is_err());
    }
}
