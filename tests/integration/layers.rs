//! The layers depend one way and no module reaches itself through others.
//!
//! Reads every file under `src/`, collects the `crate::` and `super::` paths
//! it names (imports and inline paths, test modules included) and checks
//! them against the layer order of `ARCHITECTURE.md`: text/atom/scope →
//! store → index → recall → memory → tools → surface. A module may name
//! modules of its own layer or below, never above, and the graph of modules
//! has no circle. The list of dependencies in `ARCHITECTURE.md` (between the
//! `deps:begin`/`deps:end` markers) must be the one computed here:
//! `HMG_BLESS=1 cargo test … layers` rewrites it after a deliberate change.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules and their layer.
const LAYERS: &[(&str, usize)] = &[
    ("atom", 0),
    ("extract", 0),
    ("fact", 0),
    ("fault", 0),
    ("limits", 0),
    ("recent", 0),
    ("scope", 0),
    ("text", 0),
    ("vocab", 0),
    ("store", 1),
    ("index", 2),
    ("recall", 3),
    ("memory", 4),
    ("tools", 5),
    ("surface", 6),
];

/// Folders whose sub-modules are nodes of their own (the others are one node).
const SPLIT: &[&str] = &["index", "surface", "tools"];

fn layer(node: &str) -> usize {
    let top = node.split("::").next().unwrap_or(node);
    LAYERS
        .iter()
        .find(|(name, _)| *name == top)
        .unwrap_or_else(|| panic!("module {top} has no layer: add it to LAYERS and ARCHITECTURE.md"))
        .1
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file (`src/surface/http/mod.rs` → `surface::http`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The node a module path belongs to: the sub-module of a split folder
/// when `path` names one of its files or folders, else the top module.
fn node(path: &[String]) -> Option<String> {
    let top = path.first()?;
    if SPLIT.contains(&top.as_str()) && path.len() >= 2 {
        let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(top);
        if folder.join(format!("{}.rs", path[1])).is_file() || folder.join(&path[1]).is_dir() {
            return Some(format!("{top}::{}", path[1]));
        }
    }
    Some(top.clone())
}

/// Names `lib.rs` re-exports at the crate root, with the module they come from.
fn root_exports(lib: &str) -> BTreeMap<String, String> {
    let mut exports = BTreeMap::new();
    let statement = regex::Regex::new(r"(?s)pub use ([a-z_:]+?)::(\{[^}]*\}|[A-Za-z_]+);").unwrap();
    for capture in statement.captures_iter(lib) {
        let from = capture[1].to_owned();
        for name in capture[2].trim_matches(['{', '}']).split(',').map(str::trim).filter(|n| !n.is_empty()) {
            exports.insert(name.to_owned(), from.clone());
        }
    }
    exports
}

/// Paths named by `crate::…` and `super::…` in `text`, as module paths.
fn named_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let path = regex::Regex::new(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)").unwrap();
    let group = regex::Regex::new(r"\b(crate|super)::((?:[A-Za-z_][A-Za-z0-9_]*::)*)\{([^;]*?)\};").unwrap();
    let base = |root: &str| -> Vec<String> {
        if root == "crate" {
            Vec::new()
        } else {
            // `super` of `a/b.rs` and of `a/b/mod.rs` is `a`.
            module[..module.len().saturating_sub(1)].to_vec()
        }
    };
    let mut out = Vec::new();
    // A file's inline test module (at its end) is left out: `super` means
    // something else there, and tests are not part of the layering.
    let text = text.find("#[cfg(test)]\nmod tests {").map_or(text, |end| &text[..end]);
    let code: String = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    for capture in path.captures_iter(&code) {
        let mut full = base(&capture[1]);
        full.extend(capture[2].split("::").filter(|s| !s.is_empty()).map(str::to_owned));
        out.push(full);
    }
    for capture in group.captures_iter(&code) {
        let mut prefix = base(&capture[1]);
        prefix.extend(capture[2].split("::").filter(|s| !s.is_empty()).map(str::to_owned));
        for item in capture[3].split(',') {
            let item = item.trim().trim_start_matches('{');
            let first = item.split("::").next().unwrap_or("").trim();
            if first.is_empty() || first == "self" {
                continue;
            }
            let mut full = prefix.clone();
            full.extend(item.split("::").map(|s| s.trim().trim_matches(['{', '}']).to_owned()).filter(|s| !s.is_empty()));
            out.push(full);
        }
    }
    out
}

/// Every node → the nodes it names.
fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let exports = root_exports(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let module = module_of(&src, &file);
        let Some(from) = node(&module) else { continue };
        if matches!(from.as_str(), "lib" | "main") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let entry = graph.entry(from.clone()).or_default();
        for mut path in named_paths(&text, &module) {
            if let Some(first) = path.first().cloned()
                && let Some(origin) = exports.get(&first)
            {
                let mut resolved: Vec<String> = origin.split("::").map(str::to_owned).collect();
                resolved.extend(path.drain(1..));
                path = resolved;
            }
            // An item, not a module (`super::NamedNodeRef` from an inline
            // module): the file's own node.
            if path.first().is_some_and(|p| p.starts_with(|c: char| c.is_uppercase())) {
                continue;
            }
            if let Some(to) = node(&path)
                && to != from
            {
                entry.insert(to);
            }
        }
    }
    graph
}

fn rendered(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    let mut out = String::new();
    for (from, to) in graph {
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        out.push_str(&format!("- `{from}` → {}\n", if to.is_empty() { "—".to_owned() } else { to.join(", ") }));
    }
    out
}

/// Every circle in `graph` (depth-first search with colours), as paths.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    fn visit<'a>(
        node: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
        found: &mut Vec<String>,
    ) {
        state.insert(node, 1);
        stack.push(node);
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let start = stack.iter().position(|n| *n == next).unwrap_or(0);
                    found.push(format!("{} → {next}", stack[start..].join(" → ")));
                }
                Some(_) => {}
                None => visit(next, graph, state, stack, found),
            }
        }
        stack.pop();
        state.insert(node, 2);
    }
    let mut state = BTreeMap::new();
    let mut found = Vec::new();
    for node in graph.keys() {
        if !state.contains_key(node.as_str()) {
            visit(node, graph, &mut state, &mut Vec::new(), &mut found);
        }
    }
    found
}

#[test]
fn layers_depend_one_way_without_circles() {
    let graph = dependencies();
    assert!(graph.len() >= 20, "the scan sees the modules: {graph:?}");
    let mut upward = Vec::new();
    for (from, to) in &graph {
        for to in to {
            if layer(to) > layer(from) {
                upward.push(format!("{from} (layer {}) → {to} (layer {})", layer(from), layer(to)));
            }
        }
    }
    assert!(upward.is_empty(), "dependencies against the layer order:\n{}", upward.join("\n"));
    let circles = circles(&graph);
    assert!(circles.is_empty(), "module circles:\n{}", circles.join("\n"));
}

#[test]
fn the_architecture_document_lists_the_dependencies() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let document = std::fs::read_to_string(&path).unwrap();
    let (begin, end) = ("<!-- deps:begin -->\n", "<!-- deps:end -->");
    let start = document.find(begin).expect("ARCHITECTURE.md has a deps:begin marker") + begin.len();
    let stop = document.find(end).expect("ARCHITECTURE.md has a deps:end marker");
    let expected = rendered(&dependencies());
    if std::env::var_os("HMG_BLESS").is_some() {
        std::fs::write(&path, format!("{}{expected}{}", &document[..start], &document[stop..])).unwrap();
        return;
    }
    assert_eq!(&document[start..stop], expected, "ARCHITECTURE.md's module dependencies are stale; run with HMG_BLESS=1 to rewrite them");
}

#[test]
fn the_checker_sees_upward_paths_and_circles() {
    // A file naming a module above it is seen as that dependency.
    let module = vec!["store".to_owned(), "codec".to_owned()];
    let paths = named_paths("use crate::memory::Memory;\nuse super::{Store, audit::chain};", &module);
    assert!(paths.contains(&vec!["memory".to_owned(), "Memory".to_owned()]), "{paths:?}");
    assert!(paths.contains(&vec!["store".to_owned(), "audit".to_owned(), "chain".to_owned()]), "{paths:?}");
    let to = node(&paths[0]).unwrap();
    assert!(layer(&to) > layer("store"), "memory sits above store");
    // A circle through three modules is reported with its path.
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c"), ("c", "a")].into_iter().map(|(from, to)| (from.to_owned(), BTreeSet::from([to.to_owned()]))).collect();
    assert_eq!(circles(&graph), ["a → b → c → a"]);
}
