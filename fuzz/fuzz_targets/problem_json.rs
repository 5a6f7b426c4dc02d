//! Arbitrary bytes as a problem file: the JSON reader must return a typed error or a problem,
//! and a problem must be validated and answered as `semicrf_fuzz::check` demands.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = semicrf::interchange::parse_problem(text) {
        semicrf_fuzz::check(&p);
    }
});
