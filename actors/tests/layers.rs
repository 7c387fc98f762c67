//! The folders of `actors/src` import one way only (STYLE.md 16): each may
//! use the shared leaf modules and the folders below it in `LAYERS`, never
//! one above it, so no two folders import each other. And in every crate
//! of the workspace, inside every folder, its files and subfolders import
//! each other one way only: no circle of any length.

use std::collections::BTreeSet;
use std::path::Path;

/// Lowest first.
const LAYERS: &[&str] = &[
    "output",
    "store",
    "keeper",
    "notify",
    "session",
    "liveness",
    "directory",
    "cluster",
    "front",
];
/// Modules at the crate's root that import nothing of the crate.
const LEAVES: &[&str] = &["clock", "error", "metrics", "os", "private_fs"];

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path.display().to_string(), text));
        }
    }
}

/// The crate modules `text` names as `crate::NAME`.
fn imports(text: &str) -> BTreeSet<String> {
    text.match_indices("crate::")
        .map(|(i, m)| {
            text[i + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn folders_import_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    for (rank, layer) in LAYERS.iter().enumerate() {
        let mut files = Vec::new();
        sources(&src.join(layer), &mut files);
        assert!(!files.is_empty(), "no folder {layer}");
        for (path, text) in files {
            for name in imports(&text) {
                let below = LAYERS[..rank].contains(&name.as_str());
                if name != *layer && !below && !LEAVES.contains(&name.as_str()) {
                    violations.push(format!("{path} imports crate::{name}"));
                }
            }
        }
    }
    for leaf in LEAVES {
        let text = std::fs::read_to_string(src.join(format!("{leaf}.rs"))).unwrap();
        for name in imports(&text) {
            violations.push(format!("{leaf}.rs (a leaf) imports crate::{name}"));
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// A file's module path under its crate's `src`: `a/b.rs` and `a/b/mod.rs`
/// are `[a, b]`; `lib.rs` and `main.rs` the root.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The module paths `text` (of module `me`) names: `crate::a::b`,
/// `super::a`, `self::a`, and each name of a `{...}` group after them.
fn named_paths(text: &str, me: &[String]) -> Vec<Vec<String>> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (start, base) in [
        ("crate::", Vec::new()),
        ("super::", me[..me.len().saturating_sub(1)].to_vec()),
        ("self::", me.to_vec()),
    ] {
        for (i, m) in text.match_indices(start) {
            // `super::super::` and the like: only the first step is taken.
            if i > 0 && text[..i].ends_with("::") {
                continue;
            }
            let rest = &text[i + m.len()..];
            let mut path = base.clone();
            let mut rest = rest;
            loop {
                if let Some(group) = rest.strip_prefix('{') {
                    let end = group.find('}').unwrap_or(group.len());
                    for item in group[..end].split(',') {
                        let mut p = path.clone();
                        p.push(ident(item.trim()));
                        out.push(p);
                    }
                    break;
                }
                let name = ident(rest);
                if name.is_empty() {
                    out.push(path);
                    break;
                }
                path.push(name.clone());
                rest = &rest[name.len()..];
                match rest.strip_prefix("::") {
                    Some(r) => rest = r,
                    None => {
                        out.push(path);
                        break;
                    }
                }
            }
        }
    }
    out
}

/// Within every folder of every crate, its files and subfolders import
/// each other one way only: no two (or more) of them in a circle.
#[test]
fn no_import_circles_between_siblings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut circles = Vec::new();
    for krate in ["config", "transport", "actors", "node"] {
        let src = root.join(krate).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let is_module = |m: &[String]| {
            let p = src.join(m.join("/"));
            p.with_extension("rs").is_file() || p.join("mod.rs").is_file()
        };
        // Edges between siblings: (folder, from child, to child).
        let mut edges: BTreeSet<(Vec<String>, String, String)> = BTreeSet::new();
        for (path, text) in &files {
            let me = module_of(Path::new(path).strip_prefix(&src).unwrap());
            // Without an inline test module (tests may import anything).
            let code = text
                .split("#[cfg(test)]\nmod tests {")
                .next()
                .unwrap_or(text);
            for target in named_paths(code, &me) {
                // The longest prefix of `target` that is a module.
                let mut target = target;
                while !target.is_empty() && !is_module(&target) {
                    target.pop();
                }
                // Their nearest common folder, and the children of it
                // each lies in.
                let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
                if common < me.len() && common < target.len() {
                    edges.insert((
                        me[..common].to_vec(),
                        me[common].clone(),
                        target[common].clone(),
                    ));
                }
            }
        }
        let folders: BTreeSet<Vec<String>> = edges.iter().map(|e| e.0.clone()).collect();
        for folder in folders {
            let next = |from: &str| -> Vec<String> {
                edges
                    .iter()
                    .filter(|e| e.0 == folder && e.1 == from)
                    .map(|e| e.2.clone())
                    .collect()
            };
            let nodes: BTreeSet<String> = edges
                .iter()
                .filter(|e| e.0 == folder)
                .flat_map(|e| [e.1.clone(), e.2.clone()])
                .collect();
            for start in &nodes {
                // A path from `start` back to it, shortest first.
                let mut queue = std::collections::VecDeque::from([vec![start.clone()]]);
                let mut seen = BTreeSet::new();
                while let Some(path) = queue.pop_front() {
                    for n in next(path.last().unwrap()) {
                        if n == *start {
                            let mut cycle = path.clone();
                            cycle.push(n);
                            let first = cycle.iter().take(cycle.len() - 1).min().unwrap();
                            if first == start {
                                circles.push(format!(
                                    "{krate}/src/{}: {}",
                                    folder.join("/"),
                                    cycle.join(" -> ")
                                ));
                            }
                            queue.clear();
                            break;
                        }
                        if seen.insert(n.clone()) {
                            let mut p = path.clone();
                            p.push(n);
                            queue.push_back(p);
                        }
                    }
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}
