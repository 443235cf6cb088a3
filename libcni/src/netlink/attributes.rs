//! Reading netlink attributes from kernel replies without trusting them.
//!
//! Replies are read attribute by attribute, picking out only the types a
//! caller knows: an attribute nobody here understands (a newer kernel's, or
//! another program's expression in a listed rule) is passed over, and a
//! truncated one ends the walk instead of failing it or panicking.

use netlink_packet_core::{NlasIterator, NLA_F_NESTED, NLA_F_NET_BYTEORDER};

const NLA_HEADER_LEN: usize = 4;

/// The attribute type without the nested and byte-order flags.
const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);

/// The attributes of `bytes` as `(type without flags, value)`, up to the
/// first malformed one.
pub fn attributes(bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    NlasIterator::new(bytes)
        .map_while(Result::ok)
        .filter_map(|nla| {
            let kind = nla.kind() & NLA_TYPE_MASK;
            let length = usize::from(nla.length());
            // The buffer runs to the end of `bytes`; the value is the part the
            // attribute's length covers.
            let value = nla.into_inner().get(NLA_HEADER_LEN..length)?;
            Some((kind, value))
        })
}

/// The value of the first attribute of type `kind`.
pub fn find(bytes: &[u8], kind: u16) -> Option<&[u8]> {
    attributes(bytes).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

/// A NUL-terminated (or unterminated) string attribute, lossily decoded.
pub fn string(value: &[u8]) -> String {
    str_lossy(value).into_owned()
}

/// [`string`] without the copy when the bytes are valid UTF-8.
pub fn str_lossy(value: &[u8]) -> std::borrow::Cow<'_, str> {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(value.get(..end).unwrap_or_default())
}

/// A big-endian `u32` attribute (nf_tables' integers); `None` for any
/// other length.
pub fn be_u32(value: &[u8]) -> Option<u32> {
    <[u8; 4]>::try_from(value).ok().map(u32::from_be_bytes)
}

/// A big-endian `u64` attribute (rule and chain handles).
pub fn be_u64(value: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(value).ok().map(u64::from_be_bytes)
}

/// One attribute as the kernel lays it out (length, type, value, padding),
/// for tests that play the kernel.
#[cfg(test)]
pub(crate) fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut out = ((4 + value.len()) as u16).to_ne_bytes().to_vec();
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_known_and_unknown_attributes_and_stops_at_garbage() {
        let mut bytes = [
            nla(1, b"hostports\0"),
            nla(4 | NLA_F_NESTED, &nla(1, &3u32.to_be_bytes())),
            nla(0x1234, b"whatever"),
        ]
        .concat();
        let kinds: Vec<u16> = attributes(&bytes).map(|(k, _)| k).collect();
        assert_eq!(kinds, [1, 4, 0x1234]);
        assert_eq!(find(&bytes, 1).map(string).as_deref(), Some("hostports"));
        let hook = find(&bytes, 4).unwrap();
        assert_eq!(find(hook, 1).and_then(be_u32), Some(3));
        // A truncated last attribute ends the walk; nothing panics.
        bytes.extend_from_slice(&[40, 0, 9, 0, 1]);
        assert_eq!(attributes(&bytes).count(), 3);
        assert_eq!(attributes(&[2, 0]).count(), 0);
        assert_eq!(attributes(&[2, 0, 1, 0]).count(), 0);
        assert_eq!(be_u32(&[1, 2]), None);
        assert_eq!(be_u64(&7u64.to_be_bytes()), Some(7));
        assert_eq!(string(b"no-nul"), "no-nul");
    }
}
