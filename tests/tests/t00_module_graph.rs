//! No import circle inside `crates/allocsvr` or `crates/seqsvr-core` (issue 29): reads the paths
//! of every `.rs` file under their `src/`, builds the module graph and fails naming a cycle.
//!
//! The rule:
//! - a node is a module backed by a file (`a.rs` or `a/mod.rs` is `a`, `a/b.rs` is `a::b`);
//!   inline modules (`mod tests { … }`) belong to their file's node. `main.rs` is a crate of
//!   its own (it reaches the library by its crate name) and is left out;
//! - an edge is a path naming another module: `use crate::…`, `use super::…`, `use self::…`, a
//!   `use` of a child module by its name, or the same paths inline (`crate::x::f()`,
//!   `super::y::T`). It points at the innermost module file the path names (`crate::ids::Foo`
//!   is `ids`, `crate::ids::sessions::Bar` is `ids::sessions` when that file exists);
//! - a module and its own ancestors and descendants are one unit here: `super::` from a child to
//!   its parent, or the parent's `mod child;` and `pub use child::…`, are not edges. A child is a
//!   piece of its parent's job (its tests, a split-out part, the items the parent re-exports);
//!   a circle is between modules with jobs of their own.
//! - comments, doc comments and string literals are ignored.
//!
//! `SEQSVR_MODULE_GRAPH_ROOT` points the check at another checkout (to see it fail on an old
//! tree): the directory holding `crates/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`""` is the crate root) → the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn allocsvr_has_no_import_circle() {
    assert_no_circle("crates/allocsvr/src");
}

#[test]
fn seqsvr_core_has_no_import_circle() {
    assert_no_circle("crates/seqsvr-core/src");
}

fn assert_no_circle(src: &str) {
    let root = std::env::var_os("SEQSVR_MODULE_GRAPH_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let dir = root.join(src);
    let files = read_sources(&dir);
    assert!(files.len() > 3, "no sources found under {}", dir.display());
    let graph = module_graph(&files);
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle in {src}: {}", cycle.join(" → "));
    }
}

/// `(module path, source)` of every `.rs` file under `dir`, but `main.rs`.
fn read_sources(dir: &Path) -> Vec<(String, String)> {
    fn walk(dir: &Path, prefix: &[String], out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if path.is_dir() {
                let mut inner = prefix.to_vec();
                inner.push(name);
                walk(&path, &inner, out);
                continue;
            }
            let Some(stem) = name.strip_suffix(".rs") else { continue };
            let mut module = prefix.to_vec();
            match stem {
                "lib" | "mod" => {}
                "main" if prefix.is_empty() => continue,
                _ => module.push(stem.to_string()),
            }
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            out.push((module.join("::"), text));
        }
    }
    let mut out = Vec::new();
    walk(dir, &[], &mut out);
    out
}

/// The graph of `files` by the rule of the module doc.
fn module_graph(files: &[(String, String)]) -> Graph {
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut graph = Graph::new();
    for (module, text) in files {
        let node = graph.entry(module.clone()).or_default();
        for target in imports(module, &tokens(text), &modules) {
            if !related(module, &target) {
                node.insert(target);
            }
        }
    }
    graph
}

/// Whether `a` is `b`, or an ancestor or descendant of it.
fn related(a: &str, b: &str) -> bool {
    let within = |inner: &str, outer: &str| {
        outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}::"))
    };
    within(a, b) || within(b, a)
}

fn split(path: &str) -> Vec<String> {
    if path.is_empty() {
        Vec::new()
    } else {
        path.split("::").map(str::to_string).collect()
    }
}

/// The file modules the paths of one file (`module`, as `tokens`) name.
fn imports(module: &str, tokens: &[String], modules: &BTreeSet<String>) -> BTreeSet<String> {
    let file_scope = split(module);
    // The scope at each token: the file's module plus the inline modules opened around it.
    let mut scope = file_scope.clone();
    let mut braces: Vec<bool> = Vec::new(); // per open `{`: whether it opened an inline module
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        match t {
            "mod" if tokens.get(i + 2).is_some_and(|b| b == "{") => {
                scope.push(tokens[i + 1].clone());
                braces.push(true);
                i += 3;
                continue;
            }
            "{" => braces.push(false),
            "}" => {
                if braces.pop() == Some(true) {
                    scope.pop();
                }
            }
            "use" => {
                let end = (i..tokens.len()).find(|&j| tokens[j] == ";").unwrap_or(tokens.len());
                for path in use_paths(&tokens[i + 1..end]) {
                    if let Some(target) = resolve(&path, &scope, modules) {
                        out.insert(target);
                    }
                }
                i = end;
                continue;
            }
            _ => {
                let starts_path = i == 0 || tokens[i - 1] != "::";
                if starts_path && tokens.get(i + 1).is_some_and(|c| c == "::") {
                    let mut path = vec![t.to_string()];
                    let mut j = i + 1;
                    while tokens.get(j).is_some_and(|c| c == "::")
                        && tokens.get(j + 1).is_some_and(|s| is_ident(s))
                    {
                        path.push(tokens[j + 1].clone());
                        j += 2;
                    }
                    if let Some(target) = resolve(&path, &scope, modules) {
                        out.insert(target);
                    }
                    i = j;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

/// The paths of one `use` tree (the tokens between `use` and `;`): `a::{b, c::d}` is `a::b` and
/// `a::c::d`.
fn use_paths(tree: &[String]) -> Vec<Vec<String>> {
    fn walk(tree: &[String], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
        let mut path = prefix.to_vec();
        while i < tree.len() {
            match tree[i].as_str() {
                "::" => i += 1,
                "{" => {
                    i += 1;
                    while i < tree.len() && tree[i] != "}" {
                        i = walk(tree, i, &path, out);
                        if tree.get(i).is_some_and(|t| t == ",") {
                            i += 1;
                        }
                    }
                    return i + 1;
                }
                "," | "}" => break,
                "as" => i += 2,
                s => {
                    path.push(s.to_string());
                    i += 1;
                }
            }
        }
        out.push(path);
        i
    }
    let mut out = Vec::new();
    walk(tree, 0, &[], &mut out);
    out
}

/// The innermost file module `path` (as written in `scope`) names, if it names one of this
/// crate's: starting at `crate`, `super`, `self` or a module of the scope by its name.
fn resolve(path: &[String], scope: &[String], modules: &BTreeSet<String>) -> Option<String> {
    let mut at: Vec<String> = scope.to_vec();
    let mut rest = path;
    match path.first().map(String::as_str)? {
        "crate" => {
            at.clear();
            rest = &path[1..];
        }
        "self" => rest = &path[1..],
        "super" => {
            while rest.first().is_some_and(|s| s == "super") {
                at.pop()?;
                rest = &rest[1..];
            }
        }
        first => {
            // A relative path: only a module declared in this scope (a child) is ours.
            let child = [at.as_slice(), &[first.to_string()]].concat().join("::");
            if !modules.contains(&child) {
                return None;
            }
        }
    }
    // The innermost prefix backed by a file (inline modules belong to their file's module).
    let mut best = at.join("::");
    if !modules.contains(&best) {
        best = innermost_file(&at, modules);
    }
    for segment in rest {
        at.push(segment.clone());
        let candidate = at.join("::");
        if modules.contains(&candidate) {
            best = candidate;
        } else {
            break;
        }
    }
    Some(best)
}

fn innermost_file(at: &[String], modules: &BTreeSet<String>) -> String {
    (0..=at.len())
        .rev()
        .map(|n| at[..n].join("::"))
        .find(|m| modules.contains(m))
        .unwrap_or_default()
}

fn is_ident(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// Identifiers, `::`, and single punctuation characters of `text`, without comments, string
/// and character literals.
fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('#') || next == Some('"')) && raw_string(&chars, i) {
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            j += 1; // the opening quote
            while j < chars.len() {
                if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            // `$crate` in a macro is the defining crate, as `crate` is.
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && next == Some(':') {
            out.push("::".to_string());
            i += 2;
        } else if c.is_whitespace() || c.is_ascii_digit() {
            i += 1;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// Whether `r` at `i` opens a raw string (`r"…"`, `r#"…"#`), not ends an identifier.
fn raw_string(chars: &[char], i: usize) -> bool {
    let after_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    let mut j = i + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    !after_ident && chars.get(j) == Some(&'"')
}

/// A cycle of `graph` (its modules in order, the first repeated at the end), if any.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_string(), Mark::Open);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match marks.get(next.as_str()) {
                Some(Mark::Open) => {
                    let from = stack.iter().position(|m| m == next).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle.into_iter().map(|m| name(&m)).collect());
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(cycle) = visit(next, graph, marks, stack) {
                        return Some(cycle);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    fn name(module: &str) -> String {
        if module.is_empty() {
            "crate".to_string()
        } else {
            module.to_string()
        }
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if !marks.contains_key(node.as_str()) {
            if let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

// The check of the check: small crates written here.

fn graph_of(files: &[(&str, &str)]) -> Graph {
    let files: Vec<(String, String)> =
        files.iter().map(|(m, t)| (m.to_string(), t.to_string())).collect();
    module_graph(&files)
}

#[test]
fn a_circle_through_use_lines_and_inline_paths_is_found() {
    let graph = graph_of(&[
        ("", "pub mod a; pub mod b; pub mod c;"),
        ("a", "use crate::b::{Thing, other::More};"),
        ("b", "fn f() { let _ = super::c::g(); }"),
        ("c", "use crate::{x, a as alias};"),
    ]);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(graph["b"], BTreeSet::from(["c".to_string()]));
    assert_eq!(graph["c"], BTreeSet::from(["a".to_string()]));
    let cycle = find_cycle(&graph).expect("a → b → c → a");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4, "{cycle:?}");
}

#[test]
fn parents_children_comments_and_strings_are_not_edges() {
    let graph = graph_of(&[
        ("", "pub mod a; pub mod b;"),
        ("a", "mod child; pub use child::Item; use crate::b::T;"),
        // A child's use of its parent, and of a sibling of its own.
        ("a::child", "use super::Parent; use super::sib::S;"),
        ("a::sib", "/* use crate::b; */ // crate::b::x\nconst S: &str = \"crate::b::y\";"),
        // An inline test module's `super` is its own file; a char literal is no lifetime.
        ("b", "fn f() { let _ = '\\''; } mod tests { use super::*; use crate::a::sib::S; }"),
    ]);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(graph["a::child"], BTreeSet::from(["a::sib".to_string()]));
    assert!(graph["a::sib"].is_empty(), "{:?}", graph["a::sib"]);
    assert_eq!(graph["b"], BTreeSet::from(["a::sib".to_string()]));
    assert_eq!(find_cycle(&graph), None);
    // The same inline test module, but reaching the module that imports it: a circle.
    let graph = graph_of(&[
        ("", "pub mod a; pub mod b;"),
        ("a", "use crate::b::T;"),
        ("b", "mod tests { use crate::a::U; }"),
    ]);
    assert!(find_cycle(&graph).is_some());
}
