//! MAC parsing and the iPXE value checks and renderer on arbitrary text: a MAC that
//! parses prints and parses back to itself, and a value `render` accepts lands in the
//! script verbatim with nothing iPXE would interpret.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardboot::ipxe::{is_safe_url, is_script_safe, render, CHAIN, EXIT, SANBOOT};
use shardboot::mac::MacAddr;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(mac) = text.parse::<MacAddr>() {
        assert_eq!(mac.to_string().parse::<MacAddr>(), Ok(mac));
        assert_eq!(mac.hyphenated().parse::<MacAddr>(), Ok(mac));
    }
    if let Some(mac) = MacAddr::from_chaddr(data) {
        assert_eq!(mac.0[..], data[..6]);
    }
    if is_safe_url(text) {
        assert!(is_script_safe(text));
    }
    for template in [CHAIN, EXIT, SANBOOT] {
        match render(template, &[("url", text), ("mac", text), ("owner", text)]) {
            Ok(script) => {
                assert!(is_script_safe(text));
                assert!(script.starts_with("#!ipxe"));
                assert!(!text.contains(['$', '&', '|', '#', ' ', '\n', '{', '}']));
            }
            Err(_) => assert!(!is_script_safe(text)),
        }
    }
});
