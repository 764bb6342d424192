//! The crate's floors (docs/DESIGN-NOTES.md, "The floors"): every top-level module of `src/`
//! names only modules on floors below its own, in code and in doc links alike, so no two
//! modules import each other, directly or through others.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules by floor, bottom first. Modules on one floor do not name each other.
const FLOORS: &[&[&str]] = &[
    &["format", "error_debug", "rng", "asymmetric_fence"],
    &["config", "gpu"],
    &["engine"],
    &["history"],
    &["memory"],
    &["pool"],
    &["kernels"],
    &["staging"],
    &["trace"],
    &["monitor", "plot", "bench"],
];

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a source text names through `crate::`, grouped imports included.
fn named_modules(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The group ends at its matching brace; each item starts after `{` or a comma
            // at depth 0, and nested groups belong to the item before them.
            let mut open = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => open += 1,
                        '}' => open -= 1,
                        _ => {}
                    }
                    open == 0
                })
                .map_or(group.len(), |(i, _)| i);
            let mut depth = 0;
            let mut start = 0;
            let inner = &group[..end];
            for (i, c) in inner.char_indices().chain([(inner.len(), ',')]) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(leading_ident(inner[start..i].trim()));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(leading_ident(rest));
        }
    }
    names.retain(|n| !n.is_empty() && n != "self");
    names
}

fn leading_ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

#[test]
fn every_module_names_only_modules_on_floors_below_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut unplaced = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let first = relative
            .components()
            .next()
            .expect("a component")
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        // The library root and the command (whose `cli` module reaches the library as
        // `wgpool::`) are above every floor.
        if matches!(first.as_str(), "lib" | "main" | "cli") {
            continue;
        }
        if floor_of(&first).is_none() {
            unplaced.push(first.clone());
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read a source file");
        for name in named_modules(&text) {
            if name != first {
                edges
                    .entry((first.clone(), name))
                    .or_default()
                    .push(relative.display().to_string());
            }
        }
    }
    unplaced.sort();
    unplaced.dedup();
    assert!(
        unplaced.is_empty(),
        "top-level modules with no floor in tests/floors.rs and docs/DESIGN-NOTES.md: {unplaced:?}"
    );
    let mut upward = Vec::new();
    for ((from, to), where_) in &edges {
        let Some(to_floor) = floor_of(to) else {
            // `crate::` followed by a name that is no module (a macro, a re-exported item)
            // would be a floor-less name; the crate has none today.
            upward.push(format!(
                "{from} names `crate::{to}`, which is no placed module ({where_:?})"
            ));
            continue;
        };
        let from_floor = floor_of(from).expect("placed above");
        if to_floor >= from_floor {
            upward.push(format!(
                "{from} (floor {from_floor}) names {to} (floor {to_floor}) in {where_:?}"
            ));
        }
    }
    assert!(
        upward.is_empty(),
        "imports that do not run down:\n{}",
        upward.join("\n")
    );
}

#[test]
fn grouped_and_plain_paths_are_both_read() {
    let text = "use crate::{engine::{A, B}, gpu, format::bytes};\n/// [`x`](crate::pool::Pool)";
    assert_eq!(named_modules(text), ["engine", "gpu", "format", "pool"]);
    assert_eq!(
        named_modules("use crate::{self as c, history};"),
        ["history"]
    );
}
