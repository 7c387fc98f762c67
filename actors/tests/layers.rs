//! The folders of `actors/src` import one way only (STYLE.md 16): each may
//! use the shared leaf modules and the folders below it in `LAYERS`, never
//! one above it, so no two folders import each other.

use std::collections::BTreeSet;
use std::path::Path;

/// Lowest first.
const LAYERS: &[&str] = &[
    "output",
    "store",
    "keeper",
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
