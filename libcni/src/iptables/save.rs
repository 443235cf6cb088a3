//! A table as `iptables-save` prints it.
//!
//! `iptables-save` and `iptables-restore` share one syntax: arguments
//! separated by blanks, and an argument with blanks or quotes written inside
//! double quotes with `\"` and `\\` escapes. A rule keeps the text it was
//! printed with, because restore input deletes a rule (`-D`) by naming it
//! exactly as it was saved.

use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaveParseError {
    #[error("unterminated quote in the rule {0:?}")]
    UnterminatedQuote(String),
    #[error("no {0} table in the output")]
    NoTable(String),
}

/// A rule as saved: its chain, its arguments after `-A <chain>`, and the
/// same arguments as printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedRule {
    pub chain: String,
    pub args: Vec<String>,
    pub text: String,
}

impl SavedRule {
    /// The target of `-j` or the chain of `-g`, if any.
    pub fn target(&self) -> Option<&str> {
        self.args.windows(2).find_map(|w| match w {
            [flag, target] if flag == "-j" || flag == "-g" => Some(target.as_str()),
            _ => None,
        })
    }

    /// The value following option `name` (for instance `--comment`).
    pub fn option(&self, name: &str) -> Option<&str> {
        option_value(&self.args, name)
    }
}

/// The chains and rules of one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedTable {
    pub chains: BTreeSet<String>,
    pub rules: Vec<SavedRule>,
}

impl SavedTable {
    /// Reads table `name` (`nat`, `filter`) out of `iptables-save` output;
    /// other tables in the text are skipped. Output without that table is
    /// an error: `iptables-save -t <name>` prints it even when it is empty.
    pub fn parse(text: &str, name: &str) -> Result<SavedTable, SaveParseError> {
        let mut table = SavedTable::default();
        let mut inside = false;
        let mut seen = false;
        for line in text.lines() {
            let line = line.trim_end();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(table_name) = line.strip_prefix('*') {
                inside = table_name == name;
                seen |= inside;
                continue;
            }
            if !inside {
                continue;
            }
            if line == "COMMIT" {
                inside = false;
            } else if let Some(declaration) = line.strip_prefix(':') {
                if let Some(chain) = declaration.split_whitespace().next() {
                    table.chains.insert(chain.to_string());
                }
            } else if let Some(rest) = line.strip_prefix("-A ") {
                let (chain, text) = rest.split_once(' ').unwrap_or((rest, ""));
                table.rules.push(SavedRule {
                    chain: chain.to_string(),
                    args: split_args(text)?,
                    text: text.to_string(),
                });
            }
        }
        if seen {
            Ok(table)
        } else {
            Err(SaveParseError::NoTable(name.to_string()))
        }
    }

    pub fn has_chain(&self, name: &str) -> bool {
        self.chains.contains(name)
    }

    pub fn rules_in<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a SavedRule> + 'a {
        self.rules.iter().filter(move |r| r.chain == chain)
    }

    /// Whether `chain` holds a rule with exactly these arguments.
    pub fn has_rule(&self, chain: &str, args: &[String]) -> bool {
        self.rules_in(chain).any(|r| r.args == args)
    }

    /// Every rule, in any chain, that jumps or goes to `target`.
    pub fn references_to<'a>(&'a self, target: &'a str) -> impl Iterator<Item = &'a SavedRule> {
        self.rules
            .iter()
            .filter(move |r| r.target() == Some(target))
    }
}

/// The value following option `name` in `args`.
pub fn option_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.windows(2).find_map(|w| match w {
        [option, value] if option == name => Some(value.as_str()),
        _ => None,
    })
}

/// Splits saved arguments, undoing the double-quote quoting.
pub fn split_args(text: &str) -> Result<Vec<String>, SaveParseError> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut has_current = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if has_current {
                    args.push(std::mem::take(&mut current));
                    has_current = false;
                }
            }
            '"' => {
                has_current = true;
                loop {
                    match chars.next() {
                        None => return Err(SaveParseError::UnterminatedQuote(text.to_string())),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(escaped) => current.push(escaped),
                            None => {
                                return Err(SaveParseError::UnterminatedQuote(text.to_string()))
                            }
                        },
                        Some(other) => current.push(other),
                    }
                }
            }
            other => {
                has_current = true;
                current.push(other);
            }
        }
    }
    if has_current {
        args.push(current);
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the Debian reference bridge and portmap left in a namespace,
    /// saved by iptables-nft 1.8.9.
    const SAVED: &str = r#"# Generated by iptables-save v1.8.9 (nf_tables) on Mon Nov 30 08:24:28 2026
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-682b5374add02da0403a30b6 - [0:0]
:CNI-DN-3a53437c165fe05c780a9 - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A POSTROUTING -s 10.88.0.2/32 -m comment --comment "name: \"mynet\" id: \"ctr-one\"" -j CNI-682b5374add02da0403a30b6
-A CNI-682b5374add02da0403a30b6 ! -d 224.0.0.0/4 -m comment --comment "name: \"mynet\" id: \"ctr-one\"" -j MASQUERADE
-A CNI-DN-3a53437c165fe05c780a9 -s 10.88.0.0/16 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"test\" id: \"ctr1\"" -m multiport --dports 8080 -g CNI-DN-3a53437c165fe05c780a9
COMMIT
# Completed on Mon Nov 30 08:24:28 2026
"#;

    #[test]
    fn parses_chains_rules_and_quoted_comments() {
        let t = SavedTable::parse(SAVED, "nat").unwrap();
        assert!(t.has_chain("CNI-HOSTPORT-DNAT"));
        assert!(t.has_chain("PREROUTING"));
        assert!(!t.has_chain("CNI-HOSTPORT-MASQ"));
        assert_eq!(t.rules.len(), 6);
        let entry = t.rules_in("CNI-HOSTPORT-DNAT").next().unwrap();
        assert_eq!(
            entry.option("--comment"),
            Some(r#"dnat name: "test" id: "ctr1""#)
        );
        // `-g` counts as a target, like `-j`.
        assert_eq!(entry.target(), Some("CNI-DN-3a53437c165fe05c780a9"));
        assert_eq!(t.references_to("CNI-DN-3a53437c165fe05c780a9").count(), 1);
        assert!(t.has_rule(
            "PREROUTING",
            &[
                "-m",
                "addrtype",
                "--dst-type",
                "LOCAL",
                "-j",
                "CNI-HOSTPORT-DNAT"
            ]
            .map(String::from)
        ));
        let masq = t.rules_in("CNI-682b5374add02da0403a30b6").next().unwrap();
        assert_eq!(masq.args[..3], ["!", "-d", "224.0.0.0/4"].map(String::from));
        assert_eq!(
            masq.option("--comment"),
            Some(r#"name: "mynet" id: "ctr-one""#)
        );
        // The text is the rule after its chain, as printed.
        let line = format!("-A {} {}", masq.chain, masq.text);
        assert!(SAVED.lines().any(|l| l == line), "{line}");
    }

    #[test]
    fn other_tables_are_skipped_and_a_missing_one_is_an_error() {
        let text = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j DROP\nCOMMIT\n*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";
        let t = SavedTable::parse(text, "nat").unwrap();
        assert_eq!(t.chains.len(), 1);
        assert!(t.rules.is_empty());
        let filter = SavedTable::parse(text, "filter").unwrap();
        assert_eq!(filter.rules.len(), 1);
        assert_eq!(
            SavedTable::parse("*filter\nCOMMIT\n", "nat"),
            Err(SaveParseError::NoTable("nat".into()))
        );
    }

    #[test]
    fn splits_like_iptables_restore() {
        assert_eq!(
            split_args(r#"-m comment --comment "a \"b\" \\c"  -j  X"#).unwrap(),
            ["-m", "comment", "--comment", r#"a "b" \c"#, "-j", "X"].map(String::from)
        );
        // An empty quoted argument is an argument.
        assert_eq!(split_args(r#""" x"#).unwrap(), ["", "x"].map(String::from));
        assert!(split_args(r#"-m comment --comment "open"#).is_err());
        assert!(split_args(r#""ends in a backslash\"#).is_err());
        let broken = "*nat\n-A X -m comment --comment \"open\nCOMMIT\n";
        assert!(matches!(
            SavedTable::parse(broken, "nat"),
            Err(SaveParseError::UnterminatedQuote(_))
        ));
    }
}
