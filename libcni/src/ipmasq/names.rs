//! Names and comments of the masquerade rules. They are how a DEL finds
//! what an ADD made, also across implementations (a node moving from the Go
//! plugins to ours, or back), so every byte matches the reference.

use sha2::{Digest, Sha512};

/// iptables chains are `CNI-` plus hash, this long in all.
const IPTABLES_CHAIN_LEN: usize = 28;
const IPTABLES_CHAIN_PREFIX: &str = "CNI-";

/// Longest comment the nftables backend writes (`knftables.CommentLengthMax`).
pub const NFT_COMMENT_MAX: usize = 128;

/// Lower-case hex of SHA-512(input), cut to `len` characters (≤ 128).
fn sha512_hex(input: &str, len: usize) -> String {
    let digest = Sha512::digest(input.as_bytes());
    let mut hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    hex.truncate(len);
    hex
}

/// The per-container iptables chain: `CNI-` + SHA-512(network + id), 28
/// characters. Per network and container, not per interface (as in the
/// reference).
pub fn iptables_chain(network: &str, container_id: &str) -> String {
    let mut hash = sha512_hex(
        &format!("{network}{container_id}"),
        IPTABLES_CHAIN_LEN - IPTABLES_CHAIN_PREFIX.len(),
    );
    hash.insert_str(0, IPTABLES_CHAIN_PREFIX);
    hash
}

/// The comment on every iptables rule: `name: "<net>" id: "<id>"`, each
/// value quoted as Go's `%q` does.
pub fn iptables_comment(network: &str, container_id: &str) -> String {
    format!("name: {} id: {}", go_quote(network), go_quote(container_id))
}

/// The first 16 hex characters of SHA-512(network): every nftables rule of
/// the network starts its comment with it.
pub fn nft_network_hash(network: &str) -> String {
    sha512_hex(network, 16)
}

/// `<network hash>-<hash of "ifname:id">`: the start of the comment of
/// every nftables rule of one attachment.
pub fn nft_instance_hash(network: &str, ifname: &str, container_id: &str) -> String {
    format!(
        "{}-{}",
        nft_network_hash(network),
        sha512_hex(&format!("{ifname}:{container_id}"), 16)
    )
}

/// The full nftables rule comment: instance hash, then a readable
/// description without double quotes, cut to 128 bytes (bytes, as the
/// reference does, even inside a multi-byte character).
pub fn nft_rule_comment(network: &str, ifname: &str, container_id: &str) -> Vec<u8> {
    let strip = |s: &str| s.replace('"', "");
    let mut comment = format!(
        "{}, net: {}, if: {}, id: {}",
        nft_instance_hash(network, ifname, container_id),
        strip(network),
        strip(ifname),
        strip(container_id)
    )
    .into_bytes();
    comment.truncate(NFT_COMMENT_MAX);
    comment
}

/// A string quoted the way Go's `strconv.Quote` (`%q`) does: backslash
/// escapes for `"`, `\` and control characters, printable text as is.
///
/// Go's notion of "printable" for non-ASCII is Unicode's; this treats every
/// non-control non-ASCII character as printable, which differs only for
/// format characters and unassigned code points, never seen in network
/// names or container IDs.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nft_hashes_match_reference_vectors() {
        // plg:pkg/ip/ipmasq_nftables_linux_test.go
        assert_eq!(nft_network_hash("unit-test"), "6fd94d501e58f0aa");
        assert_eq!(nft_network_hash("alternate"), "82783ef24bdc7036");
        assert_eq!(
            nft_instance_hash("unit-test", "eth0", "one"),
            "6fd94d501e58f0aa-287fc69eff0574a2"
        );
        assert_eq!(
            nft_instance_hash("unit-test", "eth0", "two"),
            "6fd94d501e58f0aa-d750b2c8f0f25d5f"
        );
        assert_eq!(
            nft_instance_hash("unit-test", "eth0", "three"),
            "6fd94d501e58f0aa-a4d4adb82b669cfe"
        );
        assert_eq!(
            nft_instance_hash("unit-test", "eth0", "four"),
            "6fd94d501e58f0aa-e766de567ef6c543"
        );
        assert_eq!(
            nft_instance_hash("alternate", "net1", "three"),
            "82783ef24bdc7036-acb19d111858e348"
        );
    }

    #[test]
    fn nft_comment_matches_reference() {
        assert_eq!(
            nft_rule_comment("alternate", "net1", "three"),
            b"82783ef24bdc7036-acb19d111858e348, net: alternate, if: net1, id: three".to_vec()
        );
        // Quotes are dropped from the readable part.
        let c = nft_rule_comment("a\"b", "eth0", "x");
        assert!(String::from_utf8(c)
            .unwrap()
            .ends_with(", net: ab, if: eth0, id: x"));
    }

    #[test]
    fn nft_comment_is_cut_to_128_bytes() {
        let long_id = "c".repeat(200);
        let c = nft_rule_comment("net", "eth0", &long_id);
        assert_eq!(c.len(), NFT_COMMENT_MAX);
        assert!(c.starts_with(nft_instance_hash("net", "eth0", &long_id).as_bytes()));
        // A cut inside a multi-byte character is kept as bytes, no panic.
        let c = nft_rule_comment("net", "eth0", &"é".repeat(100));
        assert_eq!(c.len(), NFT_COMMENT_MAX);
    }

    #[test]
    fn iptables_chain_matches_reference_vectors() {
        // Measured from the Debian reference bridge (see plugins/bridge/tests/ipmasq_iptables.rs).
        assert_eq!(
            iptables_chain("mynet", "ctr-one"),
            "CNI-682b5374add02da0403a30b6"
        );
        for (net, id) in [("", ""), ("n", "x".repeat(300).as_str())] {
            let chain = iptables_chain(net, id);
            assert_eq!(chain.len(), 28);
            assert!(chain.starts_with("CNI-"));
        }
        // plg:pkg/utils/utils_test.go
        assert_eq!(
            iptables_chain("test", "1234"),
            "CNI-2bbe0c48b91a7d1b8a6753a8"
        );
        assert_eq!(
            iptables_chain("testalongnamethatdoesnotmakesense", "1234"),
            "CNI-374f33fe84ab0ed84dcdebe3"
        );
        assert_ne!(
            iptables_chain("testalongnamethatdoesnotmakesense", "1234"),
            iptables_chain("testalongnamethatdoesnotmakesense", "1235")
        );
    }

    #[test]
    fn iptables_comment_quotes_like_go() {
        assert_eq!(
            iptables_comment("mynet", "ctr-one"),
            r#"name: "mynet" id: "ctr-one""#
        );
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("tab\there\n"), r#""tab\there\n""#);
        assert_eq!(go_quote("\u{1}\u{7f}"), r#""\x01\x7f""#);
        assert_eq!(go_quote("\u{85}"), r#""\u0085""#);
        assert_eq!(go_quote("héllo"), "\"héllo\"");
    }
}
