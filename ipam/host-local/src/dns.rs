//! The `resolvConf` option: DNS settings for the result, read from a file
//! in resolv.conf syntax.

use std::io;
use std::path::Path;

use libcni::config_file::{self, Symlinks};
use libcni::types::Dns;

/// Reads `path`; a file that cannot be read fails the ADD (the result would
/// otherwise silently lack the DNS settings the configuration asks for).
/// Bounded ([`config_file::RESOLV_CONF_CAP`]) and regular files only: the
/// path may come from a namespace user. Symbolic links are followed, as
/// /etc/resolv.conf is often one.
pub fn read_resolv_conf(path: &Path) -> io::Result<Dns> {
    let bytes = config_file::read_bounded(path, config_file::RESOLV_CONF_CAP, Symlinks::Follow)?;
    Ok(parse_resolv_conf(&String::from_utf8_lossy(&bytes)))
}

/// `nameserver` and `search`/`options` accumulate, `domain` keeps the last
/// one; blank lines, comments (`#`, `;`) and keywords without a value are
/// skipped, as the reference does.
pub fn parse_resolv_conf(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(keyword), Some(first)) = (fields.next(), fields.next()) else {
            continue;
        };
        let all_values = || std::iter::once(first).chain(fields).map(str::to_string);
        match keyword {
            "nameserver" => dns.nameservers.push(first.to_string()),
            "domain" => dns.domain = first.to_string(),
            "search" => dns.search.extend(all_values()),
            "options" => dns.options.extend(all_values()),
            _ => {}
        }
    }
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_file() {
        let dns = parse_resolv_conf("\n\t\tnameserver 192.0.2.0\n\t\tnameserver 192.0.2.1\n\t\t");
        assert_eq!(dns.nameservers, ["192.0.2.0", "192.0.2.1"]);
        assert!(dns.domain.is_empty() && dns.search.is_empty() && dns.options.is_empty());
    }

    #[test]
    fn comments_are_ignored() {
        let dns = parse_resolv_conf("\nnameserver 192.0.2.0\n;nameserver 192.0.2.1\n");
        assert_eq!(dns.nameservers, ["192.0.2.0"]);
    }

    #[test]
    fn all_fields() {
        let dns = parse_resolv_conf(
            "\nnameserver 192.0.2.0\nnameserver 192.0.2.2\ndomain example.com\n;nameserver comment\n\
             #nameserver comment\nsearch example.net example.org\nsearch example.gov\n\
             options one two three\noptions four\n",
        );
        assert_eq!(dns.nameservers, ["192.0.2.0", "192.0.2.2"]);
        assert_eq!(dns.domain, "example.com");
        assert_eq!(dns.search, ["example.net", "example.org", "example.gov"]);
        assert_eq!(dns.options, ["one", "two", "three", "four"]);
    }

    #[test]
    fn keywords_without_values_and_unknown_keywords_are_skipped() {
        let dns = parse_resolv_conf("nameserver\nsortlist 10.0.0.0\ndomain a\ndomain b extra\n");
        assert!(dns.nameservers.is_empty());
        assert_eq!(dns.domain, "b");
    }

    #[test]
    fn unreadable_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_resolv_conf(&dir.path().join("missing")).is_err());
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, "nameserver 192.0.2.3").unwrap();
        assert_eq!(read_resolv_conf(&path).unwrap().nameservers, ["192.0.2.3"]);
    }

    /// `"resolvConf": "/dev/zero"` would read until the node ran out of
    /// memory; a FIFO would block the ADD.
    #[test]
    fn devices_fifos_and_huge_files_are_refused() {
        let e = read_resolv_conf(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            e.to_string(),
            "/dev/zero is a character device, not a regular file"
        );
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(
            read_resolv_conf(&fifo).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'#'; 64 * 1024 + 1]).unwrap();
        assert_eq!(
            read_resolv_conf(&big).unwrap_err().to_string(),
            format!("{} is larger than 65536 bytes", big.display())
        );
    }
}
