//! A history of client operations and the checker of invariant I1 over it.
//!
//! Each operation is recorded with its invocation and completion time on one monotonic clock
//! and one of three outcomes: `ok(values)`, `fail(code)` (definitely not applied) or `unknown`
//! (timeout, lost connection: it may or may not have taken effect). The checker verifies, per
//! uid, over `ok` operations only:
//! - every value is distinct;
//! - whenever operation A completed before operation B was invoked, `value(A) < value(B)`.
//!
//! `unknown` and `fail` operations constrain nothing: an unknown `next` may have consumed a
//! value (a gap), which is allowed. A fourth outcome, `malformed` (an answer that breaks the
//! API: values for other uids, another number of values than uids, not numbers), is a
//! violation of its own: such an answer is never taken as values, nor let pass as unknown.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Outcome {
    /// One value per uid of the operation, in order.
    Ok { values: Vec<u64> },
    /// Definitely not applied (INVALID_ARGUMENT, NOT_OWNER, UNAVAILABLE before sending...).
    Fail { code: String },
    /// May or may not have been applied.
    Unknown { reason: String },
    /// An answer that breaks the API's promise (another number of values than uids, a value for
    /// another uid, not a number): a violation, whatever it allocated.
    Malformed { reason: String },
}

/// One client operation: `next` of one uid, or a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    pub client: u32,
    pub set: u64,
    pub uids: Vec<u64>,
    /// Nanoseconds since the run started, on one monotonic clock.
    pub invoke_ns: u64,
    pub complete_ns: u64,
    pub outcome: Outcome,
}

/// One broken promise: `earlier` completed before `later` was invoked (or both returned the
/// same value), yet `later`'s value is not greater.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub uid: u64,
    pub kind: &'static str,
    pub earlier: Operation,
    pub earlier_value: u64,
    pub later: Operation,
    pub later_value: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub n_ok: u64,
    pub n_fail: u64,
    pub n_unknown: u64,
    /// Malformed answers (each one is also a violation).
    pub n_malformed: u64,
    /// Values handed out (a batch counts each uid).
    pub n_values: u64,
    pub ops_per_s: f64,
    pub duration_s: f64,
    /// Per set: the longest stretch with no successful operation, in milliseconds.
    pub longest_gap_ms: BTreeMap<u64, u64>,
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }
}

/// One `ok` value of one uid, pointing back at its operation.
#[derive(Clone, Copy)]
struct Point {
    op: usize,
    value: u64,
    invoke_ns: u64,
    complete_ns: u64,
}

pub fn check(ops: &[Operation]) -> Report {
    let mut report = Report::default();
    let mut points: HashMap<u64, Vec<Point>> = HashMap::new();
    let mut ok_times: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let (mut first, mut last) = (u64::MAX, 0u64);
    for (i, op) in ops.iter().enumerate() {
        first = first.min(op.invoke_ns);
        last = last.max(op.complete_ns);
        match &op.outcome {
            Outcome::Ok { values } => {
                report.n_ok += 1;
                report.n_values += values.len() as u64;
                ok_times.entry(op.set).or_default().push(op.complete_ns);
                for (&uid, &value) in op.uids.iter().zip(values) {
                    points.entry(uid).or_default().push(Point {
                        op: i,
                        value,
                        invoke_ns: op.invoke_ns,
                        complete_ns: op.complete_ns,
                    });
                }
            }
            Outcome::Fail { .. } => report.n_fail += 1,
            Outcome::Unknown { .. } => report.n_unknown += 1,
            Outcome::Malformed { .. } => {
                report.n_malformed += 1;
                report.violations.push(Violation {
                    uid: op.uids.first().copied().unwrap_or(0),
                    kind: "malformed reply",
                    earlier: op.clone(),
                    earlier_value: 0,
                    later: op.clone(),
                    later_value: 0,
                });
            }
        }
    }
    if first < last {
        report.duration_s = (last - first) as f64 / 1e9;
        report.ops_per_s = report.n_ok as f64 / report.duration_s;
    }
    for (set, mut times) in ok_times {
        times.sort_unstable();
        let mut gap = times.first().map_or(0, |&t| t.saturating_sub(first));
        for w in times.windows(2) {
            gap = gap.max(w[1] - w[0]);
        }
        gap = gap.max(last.saturating_sub(*times.last().unwrap_or(&last)));
        report.longest_gap_ms.insert(set, gap / 1_000_000);
    }

    let mut uids: Vec<u64> = points.keys().copied().collect();
    uids.sort_unstable();
    for uid in uids {
        let list = &points[&uid];
        // Distinct values.
        let mut by_value: HashMap<u64, usize> = HashMap::new();
        for (k, p) in list.iter().enumerate() {
            if let Some(&j) = by_value.get(&p.value) {
                let a = &list[j];
                report.violations.push(Violation {
                    uid,
                    kind: "duplicate",
                    earlier: ops[a.op].clone(),
                    earlier_value: a.value,
                    later: ops[p.op].clone(),
                    later_value: p.value,
                });
            } else {
                by_value.insert(p.value, k);
            }
        }
        // Real-time order: sweep operations by invocation, keeping the largest value among
        // those that completed strictly before.
        let mut by_invoke: Vec<&Point> = list.iter().collect();
        by_invoke.sort_by_key(|p| p.invoke_ns);
        let mut by_complete: Vec<&Point> = list.iter().collect();
        by_complete.sort_by_key(|p| p.complete_ns);
        let mut j = 0;
        let mut max_done: Option<&Point> = None;
        for b in by_invoke {
            while j < by_complete.len() && by_complete[j].complete_ns < b.invoke_ns {
                if max_done.is_none_or(|m| by_complete[j].value > m.value) {
                    max_done = Some(by_complete[j]);
                }
                j += 1;
            }
            if let Some(a) = max_done {
                if a.value >= b.value {
                    report.violations.push(Violation {
                        uid,
                        kind: "real-time order",
                        earlier: ops[a.op].clone(),
                        earlier_value: a.value,
                        later: ops[b.op].clone(),
                        later_value: b.value,
                    });
                }
            }
        }
    }
    report
}

/// Writes operations as JSON lines.
pub fn write_jsonl(ops: &[Operation], mut out: impl Write) -> std::io::Result<()> {
    for op in ops {
        serde_json::to_writer(&mut out, op)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads operations from JSON lines; names the first bad line.
pub fn read_jsonl(input: impl BufRead) -> Result<Vec<Operation>, String> {
    let mut ops = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        ops.push(serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", n + 1))?);
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(uid: u64, invoke_ms: u64, complete_ms: u64, value: u64) -> Operation {
        Operation {
            client: 0,
            set: 0,
            uids: vec![uid],
            invoke_ns: invoke_ms * 1_000_000,
            complete_ns: complete_ms * 1_000_000,
            outcome: Outcome::Ok { values: vec![value] },
        }
    }

    fn unknown(uid: u64, invoke_ms: u64, complete_ms: u64) -> Operation {
        Operation {
            outcome: Outcome::Unknown { reason: "timeout".into() },
            ..ok(uid, invoke_ms, complete_ms, 0)
        }
    }

    #[test]
    fn valid_histories_pass() {
        // Sequential increase with gaps, and overlapping calls in any order.
        let ops = vec![ok(1, 0, 10, 5), ok(1, 20, 30, 9), ok(1, 25, 40, 12), ok(1, 26, 41, 10)];
        let r = check(&ops);
        assert!(r.is_valid(), "{:?}", r.violations);
        assert_eq!((r.n_ok, r.n_values), (4, 4));
        assert_eq!(r.longest_gap_ms[&0], 20);
    }

    #[test]
    fn duplicates_are_caught_even_when_concurrent() {
        let r = check(&[ok(1, 0, 10, 5), ok(1, 5, 8, 5)]);
        assert_eq!(r.violations.len(), 1);
        assert_eq!(r.violations[0].kind, "duplicate");
    }

    #[test]
    fn out_of_real_time_order_is_caught_with_both_operations() {
        let r = check(&[ok(1, 0, 10, 5), ok(1, 20, 30, 4), ok(2, 20, 30, 1)]);
        assert_eq!(r.violations.len(), 1);
        let v = &r.violations[0];
        assert_eq!((v.kind, v.uid, v.earlier_value, v.later_value), ("real-time order", 1, 5, 4));
        assert_eq!(v.earlier.invoke_ns, 0);
        assert_eq!(v.later.invoke_ns, 20_000_000);
    }

    #[test]
    fn unknown_and_failed_operations_constrain_nothing() {
        let failed =
            Operation { outcome: Outcome::Fail { code: "Unavailable".into() }, ..ok(1, 12, 13, 0) };
        let ops = vec![ok(1, 0, 10, 5), unknown(1, 11, 50), failed, ok(1, 60, 70, 7)];
        let r = check(&ops);
        assert!(r.is_valid());
        assert_eq!((r.n_ok, r.n_fail, r.n_unknown), (2, 1, 1));
    }

    #[test]
    fn batches_count_each_uid_and_repeats_must_differ() {
        let batch = Operation {
            uids: vec![1, 1, 2],
            outcome: Outcome::Ok { values: vec![6, 7, 3] },
            ..ok(0, 20, 30, 0)
        };
        assert!(check(&[ok(1, 0, 10, 5), batch.clone()]).is_valid());
        let bad = Operation { outcome: Outcome::Ok { values: vec![6, 6, 3] }, ..batch };
        assert_eq!(check(&[bad]).violations[0].kind, "duplicate");
    }

    #[test]
    fn a_malformed_answer_is_a_violation_and_constrains_nothing_else() {
        let malformed = Operation {
            uids: vec![3, 4],
            outcome: Outcome::Malformed { reason: "1 value for 2 uids".into() },
            ..ok(3, 12, 13, 0)
        };
        let r = check(&[ok(1, 0, 10, 5), malformed.clone(), ok(1, 20, 30, 6)]);
        assert_eq!((r.n_ok, r.n_malformed, r.violations.len()), (2, 1, 1));
        let v = &r.violations[0];
        assert_eq!((v.kind, v.uid), ("malformed reply", 3));
        assert_eq!(v.later, malformed);
        let mut buf = Vec::new();
        write_jsonl(std::slice::from_ref(&malformed), &mut buf).unwrap();
        assert_eq!(read_jsonl(buf.as_slice()).unwrap(), [malformed]);
    }

    #[test]
    fn jsonl_round_trip() {
        let ops = vec![ok(1, 0, 10, 5), unknown(2, 1, 2)];
        let mut buf = Vec::new();
        write_jsonl(&ops, &mut buf).unwrap();
        assert_eq!(read_jsonl(buf.as_slice()).unwrap(), ops);
        assert!(read_jsonl(&b"{\"nope\": 1}\n"[..]).unwrap_err().starts_with("line 1"));
    }
}
