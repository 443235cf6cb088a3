//! The `nat` table as `iptables-save` prints it, and the quoting of
//! `iptables-restore` input.
//!
//! Both programs share one syntax: arguments separated by spaces, and an
//! argument with spaces or quotes written inside double quotes with `\"`
//! and `\\` escapes. Rules are kept with their text as printed, because a
//! rule is deleted by restore input naming it exactly as it was saved.

use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaveParseError {
    #[error("unterminated quote in iptables-save line {0:?}")]
    UnterminatedQuote(String),
    #[error("iptables-save printed no nat table")]
    NoNatTable,
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
    /// The chain the rule jumps or goes to, if any.
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

/// The chains and rules of one `nat` table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatTable {
    pub chains: BTreeSet<String>,
    pub rules: Vec<SavedRule>,
}

impl NatTable {
    /// Parses `iptables-save -t nat` output.
    pub fn parse(text: &str) -> Result<NatTable, SaveParseError> {
        let mut table = NatTable::default();
        let mut in_nat = false;
        let mut seen_nat = false;
        for line in text.lines() {
            let line = line.trim_end();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(name) = line.strip_prefix('*') {
                in_nat = name == "nat";
                seen_nat |= in_nat;
                continue;
            }
            if !in_nat {
                continue;
            }
            if line == "COMMIT" {
                in_nat = false;
            } else if let Some(declaration) = line.strip_prefix(':') {
                if let Some(name) = declaration.split_whitespace().next() {
                    table.chains.insert(name.to_string());
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
        if seen_nat {
            Ok(table)
        } else {
            Err(SaveParseError::NoNatTable)
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

/// One argument as restore input: bare when safe, else double-quoted.
pub fn quote_arg(arg: &str) -> String {
    let needs_quotes = arg.is_empty()
        || arg
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | '#'));
    if !needs_quotes {
        return arg.to_string();
    }
    let mut quoted = String::with_capacity(arg.len() + 2);
    quoted.push('"');
    for c in arg.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

/// Arguments joined as one restore line's tail.
pub fn join_args(args: &[String]) -> String {
    args.iter()
        .map(|a| quote_arg(a))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVED: &str = r#"# Generated by iptables-save v1.8.9 (nf_tables) on Mon Nov 30 08:24:28 2026
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-DN-3a53437c165fe05c780a9 - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A CNI-DN-3a53437c165fe05c780a9 -s 10.88.0.0/16 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"test\" id: \"ctr1\"" -m multiport --dports 8080 -j CNI-DN-3a53437c165fe05c780a9
COMMIT
# Completed on Mon Nov 30 08:24:28 2026
"#;

    #[test]
    fn parses_chains_rules_and_quoted_comments() {
        let t = NatTable::parse(SAVED).unwrap();
        assert!(t.has_chain("CNI-HOSTPORT-DNAT"));
        assert!(t.has_chain("PREROUTING"));
        assert!(!t.has_chain("CNI-HOSTPORT-MASQ"));
        assert_eq!(t.rules.len(), 4);
        let entry = t.rules_in("CNI-HOSTPORT-DNAT").next().unwrap();
        assert_eq!(
            entry.option("--comment"),
            Some(r#"dnat name: "test" id: "ctr1""#)
        );
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
    }

    #[test]
    fn other_tables_are_ignored_and_missing_nat_is_an_error() {
        let text = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j DROP\nCOMMIT\n*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";
        let t = NatTable::parse(text).unwrap();
        assert_eq!(t.chains.len(), 1);
        assert!(t.rules.is_empty());
        assert_eq!(
            NatTable::parse("*filter\nCOMMIT\n"),
            Err(SaveParseError::NoNatTable)
        );
    }

    #[test]
    fn quoting_round_trips() {
        for arg in [
            "plain",
            "with space",
            r#"dnat name: "n" id: "c""#,
            r"back\slash",
            "",
            "# hash",
        ] {
            let quoted = quote_arg(arg);
            assert_eq!(
                split_args(&quoted).unwrap(),
                vec![arg.to_string()],
                "{quoted}"
            );
        }
        assert_eq!(quote_arg("-s"), "-s");
        assert!(split_args(r#"-m comment --comment "open"#).is_err());
    }
}
