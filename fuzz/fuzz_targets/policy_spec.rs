//! Arbitrary text through the policy-spec parsers: never panics, and whatever parses prints
//! back to a spec that parses to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmirq_policy::spec::{ModerationSpec, WaitSpec};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(m) = text.parse::<ModerationSpec>() {
        assert_eq!(m.to_string().parse::<ModerationSpec>(), Ok(m));
    }
    if let Ok(w) = text.parse::<WaitSpec>() {
        assert_eq!(w.to_string().parse::<WaitSpec>(), Ok(w));
    }
});
