//! Fuzz target: `termesh_config::fuzz::config_parser` on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| termesh_config::fuzz::config_parser(data));
