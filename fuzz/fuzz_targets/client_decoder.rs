//! Fuzz target: `termesh_transport::fuzz::client_decoder` on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| termesh_transport::fuzz::client_decoder(data));
