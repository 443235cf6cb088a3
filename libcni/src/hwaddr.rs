//! Link-layer addresses in the text forms Go's `net.ParseMAC` reads, for
//! plugins that take the reference plugins' configuration: 6 bytes
//! (Ethernet), 8 (EUI-64) or 20 (IP over InfiniBand), written as hex pairs
//! separated by `:` or `-` (`02:00:5e:10:00:01`), or as dot-separated
//! groups of four hex digits (`0200.5e10.0001`). Either case of hex digit.
//!
//! One difference: Go checks only the first `.` of the dotted form and
//! takes any character in the later separator places; here every
//! separator must be a `.`.

/// The address bytes of `text`, or `None` when it is not an address in one
/// of the forms above. Whether the length suits the link is the caller's
/// business (the kernel refuses a 20-byte address on an Ethernet link).
pub fn parse(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let (separator, group_digits) = match (bytes.get(2), bytes.get(4)) {
        (Some(b':'), _) => (':', 2),
        (Some(b'-'), _) => ('-', 2),
        (_, Some(b'.')) => ('.', 4),
        _ => return None,
    };
    let mut address = Vec::with_capacity(20);
    for group in text.split(separator) {
        // Hex digits only: `from_str_radix` alone would take a sign.
        if group.len() != group_digits || !group.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        for start in (0..group_digits).step_by(2) {
            address.push(u8::from_str_radix(group.get(start..start + 2)?, 16).ok()?);
        }
    }
    matches!(address.len(), 6 | 8 | 20).then_some(address)
}

/// A 6-byte (Ethernet) address in one of the forms above, or `None` for
/// anything else, a longer address included.
pub fn parse_ethernet(text: &str) -> Option<[u8; 6]> {
    parse(text)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_go_reads() {
        let six = Some(vec![0x02, 0x00, 0x5e, 0x10, 0x00, 0x01]);
        assert_eq!(parse("02:00:5e:10:00:01"), six);
        assert_eq!(parse("02-00-5E-10-00-01"), six);
        assert_eq!(parse("0200.5e10.0001"), six);
        let eight = Some(vec![0x02, 0x00, 0x5e, 0x10, 0x00, 0x00, 0x00, 0x01]);
        assert_eq!(parse("02:00:5e:10:00:00:00:01"), eight);
        assert_eq!(parse("0200.5e10.0000.0001"), eight);
        let infiniband = "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01";
        assert_eq!(
            parse(infiniband),
            Some(vec![
                0, 0, 0, 0, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0x5e, 0x10, 0, 0, 0, 1
            ])
        );
        assert_eq!(
            parse("0000.0000.fe80.0000.0000.0000.0200.5e10.0000.0001").map(|a| a.len()),
            Some(20)
        );
        assert_eq!(
            parse("AA:bb:CC:dd:EE:ff"),
            Some(vec![0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff])
        );
    }

    #[test]
    fn ethernet_is_six_bytes_in_any_form() {
        let six = Some([0x02, 0x00, 0x5e, 0x10, 0x00, 0x01]);
        assert_eq!(parse_ethernet("02:00:5e:10:00:01"), six);
        assert_eq!(parse_ethernet("02-00-5E-10-00-01"), six);
        assert_eq!(parse_ethernet("0200.5e10.0001"), six);
        assert_eq!(parse_ethernet("02:00:5e:10:00:00:00:01"), None);
        assert_eq!(parse_ethernet("0200.5e10.0000.0001"), None);
        assert_eq!(parse_ethernet("02:00:5e:10:00"), None);
    }

    #[test]
    fn what_go_refuses_is_refused() {
        for bad in [
            "",
            "02:00:5e:10:00",
            "02:00:5e:10:00:01:02",
            "02:00:5e:10:00:01:",
            "02:00-5e:10:00:01",
            "02:00:5e:10:00:0g",
            "02:00:5e:10:00:+1",
            "+2:00:5e:10:00:01",
            "020:0:5e:10:00:01",
            "0200.5e10.000",
            "2:00:5e:10:00:01:0",
            "02:00:5e:10:00:001",
            "0200.5e10.00001",
            "0200.5e10.001",
            "0200.5e10",
            "02005e100001",
            " 02:00:5e:10:00:01",
            "02:00:5e:10:00:01 ",
            "ö2:00:5e:10:00:01",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
