//! Fuzz entry points shared by the cargo-fuzz targets (`fuzz/`, nightly)
//! and the long property tests that run the same inputs on stable: the
//! config parser here, the client and peer decoders in
//! `termesh_transport::fuzz`. `mutate` turns a valid seed into the kind
//! of damaged input a fuzzer makes.

/// The config parser on arbitrary bytes: an error or a config, never a
/// panic.
pub fn config_parser(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::Config::parse(text, "fuzz");
    }
}

/// Cases a stable run of the fuzz entry points tries:
/// `TERMESH_FUZZ_CASES` (CI runs millions), else a quick 512.
pub fn cases() -> u32 {
    std::env::var("TERMESH_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

/// Applies edits to `seed`: each `(op, at, byte)` flips bits, overwrites,
/// inserts, deletes, duplicates a run, or truncates, at `at` (modulo the
/// length).
pub fn mutate(seed: &[u8], edits: &[(u8, usize, u8)]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for &(op, at, byte) in edits {
        let len = out.len();
        let i = if len == 0 { 0 } else { at % len };
        match op % 6 {
            0 if len > 0 => out[i] ^= byte | 1,
            1 if len > 0 => out[i] = byte,
            2 => out.insert(i, byte),
            3 if len > 0 => {
                out.remove(i);
            }
            4 if len > 0 => {
                let end = (i + 1 + byte as usize % 16).min(len);
                let run = out[i..end].to_vec();
                out.splice(i..i, run);
            }
            5 => out.truncate(i),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seeds() -> Vec<Vec<u8>> {
        let example = include_str!("../../deploy/termesh.example.toml");
        let cluster = "[node]\nname = \"a\"\n[cluster]\nid = \"c1\"\nca = \"ca.pem\"\ncert = \"a.pem\"\nkey = \"a.key\"\n[[cluster.nodes]]\nname = \"a\"\nquic = \"127.0.0.1:7500\"\nhttp = \"127.0.0.1:7420\"\n";
        let tokens = "[[auth.tokens]]\nname = \"x\"\nhash = \"sha256:00\"\nrole = \"viewer\"\n[store]\noutput_bytes = \"1GiB\"\nevent_age = \"7d\"\n";
        vec![example.into(), cluster.into(), tokens.into(), Vec::new()]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]
        #[test]
        fn the_config_parser_takes_damaged_files(
            seed in prop::sample::select(seeds()),
            edits in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 0..12),
        ) {
            config_parser(&mutate(&seed, &edits));
        }
    }

    #[test]
    fn mutations_stay_in_bounds() {
        assert_eq!(mutate(b"abc", &[(5, 1, 0)]), b"a");
        assert_eq!(mutate(b"", &[(0, 9, 1), (3, 2, 0), (2, 7, b'x')]), b"x");
        assert_eq!(mutate(b"ab", &[(4, 0, 1)]), b"abab");
    }
}
