//! Fuzz target: `termesh_transport::fuzz::peer_decoder` on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| termesh_transport::fuzz::peer_decoder(data));
