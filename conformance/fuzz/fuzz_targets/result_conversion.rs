//! Result decoding and conversion between every pair of spec versions.
//!
//! Input: the first byte picks the default version (what a result without
//! `cniVersion` is read as), the rest is the result JSON. Nothing may
//! panic, and whatever a conversion produces must decode again as its own
//! version: a runtime or the next plugin of a chain reads what we print.

#![no_main]

use libcni::types::{v100, AnyResult};
use libcni::version::SpecVersion;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((selector, json)) = data.split_first() else {
        return;
    };
    let default = SpecVersion::ALL[usize::from(*selector) % SpecVersion::ALL.len()];
    let Ok(result) = AnyResult::from_slice(json, default) else {
        return;
    };
    let _ = v100::Result::try_from(result.clone());
    for to in SpecVersion::ALL {
        let Ok(converted) = result.clone().convert_to(to) else {
            continue;
        };
        assert_eq!(converted.version(), to);
        let printed = converted.to_pretty_json();
        let reread = AnyResult::from_slice(&printed, to).unwrap_or_else(|e| {
            panic!(
                "{} -> {to}: printed result does not decode ({e}): {}",
                result.version(),
                String::from_utf8_lossy(&printed)
            )
        });
        assert_eq!(reread.version(), to);
        // Converting onwards from what we printed must not panic either.
        for onward in SpecVersion::ALL {
            let _ = reread.clone().convert_to(onward);
        }
    }
});
