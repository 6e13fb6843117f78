//! Rendering: every view is a `Serialize` value; `--json` prints it with serde, text prints its
//! rows as tables (tabled) whose columns are the rows' own fields. A table's header is the JSON
//! key in upper case, and a cell is the JSON value as text (`-` for null, lists joined by `,`),
//! so the two outputs cannot drift apart (see the tests).

use crate::error::{CtlError, Exit};
use serde::Serialize;
use std::fmt::Display;
use std::io::Write;
use tabled::settings::{Padding, Style};
use tabled::{Table, Tabled};

/// One row of a table and one object of `--json`, from one struct. Derive `Serialize` and
/// `Tabled` with `#[tabled(rename_all = "SCREAMING_SNAKE_CASE")]`; fields the table leaves out
/// (`#[tabled(skip)]`: nested lists, detail) are named in `JSON_ONLY`.
pub trait Row: Serialize + Tabled {
    /// Read by `assert_table_matches_json` only: documentation the tests hold to.
    #[cfg_attr(not(test), allow(dead_code))]
    const JSON_ONLY: &'static [&'static str] = &[];
}

/// What a command prints: its JSON is the serde form, its text is `text()`.
pub trait View: Serialize {
    fn text(&self) -> String;
}

impl<R: Row> View for Vec<R> {
    fn text(&self) -> String {
        table(self)
    }
}

/// The result of an action: one sentence for a person, its facts as the `--json` object.
#[derive(Debug, Serialize)]
pub struct Done<T: Serialize> {
    #[serde(skip)]
    pub sentence: String,
    #[serde(flatten)]
    pub facts: T,
}

impl<T: Serialize> View for Done<T> {
    fn text(&self) -> String {
        format!("{}\n", self.sentence)
    }
}

/// Rows as an aligned table without borders (like `kubectl get`): columns two spaces apart,
/// no trailing blanks. Only the header when there are no rows.
pub fn table<R: Row>(rows: &[R]) -> String {
    let mut table = Table::new(rows);
    table.with(Style::blank()).with(Padding::new(0, 1, 0, 0));
    let mut out = String::new();
    for line in table.to_string().lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A titled table: `TITLE` on its own line, then the table.
pub fn section<R: Row>(title: &str, rows: &[R]) -> String {
    format!("{title}\n{}", table(rows))
}

/// The view as `--json` (pretty, one document) or as text, with a final newline.
pub fn render<V: View + ?Sized>(json: bool, view: &V) -> Result<String, CtlError> {
    if json {
        let mut text = serde_json::to_string_pretty(view).map_err(|e| CtlError {
            exit: Exit::NoAnswer,
            what: format!("cannot encode the answer as JSON: {e}"),
            hint: None,
        })?;
        text.push('\n');
        Ok(text)
    } else {
        let mut text = view.text();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        Ok(text)
    }
}

/// Prints the view to stdout. A closed stdout (`seqctl status | head -1`) ends the process
/// through SIGPIPE (see `main`); other write errors are reported.
pub fn emit<V: View + ?Sized>(json: bool, view: &V) -> Result<(), CtlError> {
    let text = render(json, view)?;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|_| out.flush()).map_err(|e| CtlError {
        exit: Exit::NoAnswer,
        what: format!("cannot write to stdout: {e}"),
        hint: None,
    })
}

/// Cell text of an optional value: `-` when absent (JSON null).
pub fn opt<T: Display>(value: &Option<T>) -> String {
    value.as_ref().map_or_else(|| "-".to_string(), ToString::to_string)
}

/// Cell text of a list: its items joined by `,`; `-` when empty.
pub fn list<T: Display>(values: &[T]) -> String {
    if values.is_empty() {
        return "-".to_string();
    }
    values.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

/// Cell text of an optional list.
pub fn opt_list<T: Display>(values: &Option<Vec<T>>) -> String {
    values.as_deref().map_or_else(|| "-".to_string(), list)
}

/// The table text the rules above give a JSON value (what the tests compare cells with).
#[cfg(test)]
pub fn cell_of_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "-".to_string(),
        Value::Array(items) => items.iter().map(cell_of_json).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Checks that `rows` rendered as a table and as JSON carry the same columns and values: the
/// JSON keys are exactly the table's headers (lower case) plus `R::JSON_ONLY`, and each cell of
/// the rendered table (cut at the header's column starts) is the JSON value as text.
#[cfg(test)]
pub fn assert_table_matches_json<R: Row>(rows: &[R]) {
    use std::collections::BTreeSet;
    assert!(!rows.is_empty(), "compare at least one row");
    let text = table(rows);
    let lines: Vec<Vec<char>> = text.lines().map(|l| l.chars().collect()).collect();
    assert_eq!(lines.len(), rows.len() + 1, "one header line and one line per row:\n{text}");
    let header: String = lines[0].iter().collect();
    let headers: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(headers, R::headers().iter().map(|h| h.as_ref()).collect::<Vec<_>>());
    // Column starts in the header line; every row line is aligned to them.
    let mut starts = Vec::new();
    let mut from = 0;
    for h in &headers {
        let at = header[from..].find(h).expect("header in its line") + from;
        starts.push(header[..at].chars().count());
        from = at + h.len();
    }
    let json = serde_json::to_value(rows).expect("rows encode");
    let objects = json.as_array().expect("rows are a JSON array");
    for (line, object) in lines[1..].iter().zip(objects) {
        let object = object.as_object().expect("a row is a JSON object");
        let keys: BTreeSet<String> = object.keys().cloned().collect();
        let expected: BTreeSet<String> = headers
            .iter()
            .map(|h| h.to_lowercase())
            .chain(R::JSON_ONLY.iter().map(|k| k.to_string()))
            .collect();
        assert_eq!(keys, expected, "JSON keys vs table columns + JSON_ONLY");
        for (i, h) in headers.iter().enumerate() {
            let end = starts.get(i + 1).copied().unwrap_or(line.len()).min(line.len());
            let cell: String = line[starts[i].min(end)..end].iter().collect();
            let value = &object[&h.to_lowercase()];
            assert_eq!(cell.trim(), cell_of_json(value), "column {h}: table vs JSON {value}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Tabled)]
    #[tabled(rename_all = "SCREAMING_SNAKE_CASE")]
    struct Sample {
        set: u64,
        addr: String,
        #[tabled(display = "opt")]
        leader_id: Option<u64>,
        #[tabled(display = "list")]
        voters: Vec<u64>,
        #[tabled(skip)]
        detail: Vec<u64>,
    }

    impl Row for Sample {
        const JSON_ONLY: &'static [&'static str] = &["detail"];
    }

    fn sample() -> Vec<Sample> {
        vec![
            Sample {
                set: 0,
                addr: "127.0.0.1:7101".into(),
                leader_id: Some(1),
                voters: vec![1, 2, 3],
                detail: vec![9],
            },
            Sample { set: 10, addr: "a b".into(), leader_id: None, voters: vec![], detail: vec![] },
        ]
    }

    #[test]
    fn a_table_has_no_borders_no_leading_or_trailing_blanks() {
        let text = table(&sample());
        assert_eq!(
            text,
            "SET  ADDR            LEADER_ID  VOTERS\n\
             0    127.0.0.1:7101  1          1,2,3\n\
             10   a b             -          -\n"
        );
    }

    #[test]
    fn the_checker_accepts_matching_rows() {
        assert_table_matches_json(&sample());
    }

    #[test]
    #[should_panic(expected = "JSON keys vs table columns")]
    fn the_checker_catches_a_json_only_field_not_declared() {
        #[derive(Serialize, Tabled)]
        struct Hidden {
            a: u64,
            #[tabled(skip)]
            b: u64,
        }
        impl Row for Hidden {}
        assert_table_matches_json(&[Hidden { a: 1, b: 2 }]);
    }

    #[test]
    fn json_and_text_of_one_view() {
        let rows = sample();
        let json: serde_json::Value = serde_json::from_str(&render(true, &rows).unwrap()).unwrap();
        assert_eq!(json[0]["voters"], serde_json::json!([1, 2, 3]));
        assert_eq!(json[1]["leader_id"], serde_json::Value::Null);
        assert!(render(false, &rows).unwrap().starts_with("SET  ADDR"));
    }
}
