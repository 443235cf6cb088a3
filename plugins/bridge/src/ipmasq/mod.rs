//! Masquerade rules for container addresses (iptables and nftables).
