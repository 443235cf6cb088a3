//! Input for `iptables-restore --noflush`: one table's changes, applied by
//! the kernel as one transaction.
//!
//! Chain declarations come first, then the commands in the order they were
//! given: restore wants a chain declared before a rule names it.

use super::save::SavedRule;

/// A restore script for one table, built change by change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreScript {
    table: String,
    declarations: Vec<String>,
    commands: Vec<String>,
}

impl RestoreScript {
    pub fn new(table: &str) -> RestoreScript {
        RestoreScript {
            table: table.to_string(),
            declarations: Vec::new(),
            commands: Vec::new(),
        }
    }

    /// `:<chain> - [0:0]`: creates the chain, or empties it if it exists.
    pub fn declare_chain(&mut self, chain: &str) {
        self.declarations.push(format!(":{chain} - [0:0]"));
    }

    /// `-A <chain> <args>`.
    pub fn append(&mut self, chain: &str, args: &[String]) {
        self.commands
            .push(format!("-A {chain} {}", join_args(args)));
    }

    /// `-I <chain> <position> <args>` (positions count from 1).
    pub fn insert(&mut self, chain: &str, position: u32, args: &[String]) {
        self.commands
            .push(format!("-I {chain} {position} {}", join_args(args)));
    }

    /// `-D <chain> <text>`: deletes `rule` by the text it was saved with.
    pub fn delete(&mut self, rule: &SavedRule) {
        self.commands
            .push(format!("-D {} {}", rule.chain, rule.text));
    }

    /// `-F <chain>`.
    pub fn flush_chain(&mut self, chain: &str) {
        self.commands.push(format!("-F {chain}"));
    }

    /// `-X <chain>`: the chain must be empty and unreferenced by then.
    pub fn delete_chain(&mut self, chain: &str) {
        self.commands.push(format!("-X {chain}"));
    }

    /// Whether the script changes nothing.
    pub fn is_empty(&self) -> bool {
        self.declarations.is_empty() && self.commands.is_empty()
    }

    /// The script as `iptables-restore` reads it.
    pub fn render(&self) -> String {
        let mut out = format!("*{}\n", self.table);
        for line in self.declarations.iter().chain(&self.commands) {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("COMMIT\n");
        out
    }
}

/// One argument as restore input: bare when safe, else double-quoted with
/// `\"` and `\\` escapes (what [`super::save::split_args`] undoes).
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
    use super::super::save::{split_args, SavedTable};
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
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
            "two  spaces",
        ] {
            let quoted = quote_arg(arg);
            assert_eq!(
                split_args(&quoted).unwrap(),
                vec![arg.to_string()],
                "{quoted}"
            );
        }
        assert_eq!(quote_arg("-s"), "-s");
        assert_eq!(quote_arg("!"), "!");
    }

    #[test]
    fn declarations_come_first_then_commands_in_order() {
        let saved = SavedTable::parse(
            "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -s 10.0.0.2/32 -m comment --comment \"a b\" -j CNI-x\nCOMMIT\n",
            "nat",
        )
        .unwrap();
        let mut script = RestoreScript::new("nat");
        assert!(script.is_empty());
        script.append(
            "CNI-x",
            &args(&[
                "!",
                "-d",
                "224.0.0.0/4",
                "-m",
                "comment",
                "--comment",
                "a b",
                "-j",
                "MASQUERADE",
            ]),
        );
        script.insert("POSTROUTING", 1, &args(&["-j", "CNI-y"]));
        script.declare_chain("CNI-x");
        script.delete(&saved.rules[0]);
        script.flush_chain("CNI-x");
        script.delete_chain("CNI-x");
        assert!(!script.is_empty());
        assert_eq!(
            script.render(),
            "*nat\n\
             :CNI-x - [0:0]\n\
             -A CNI-x ! -d 224.0.0.0/4 -m comment --comment \"a b\" -j MASQUERADE\n\
             -I POSTROUTING 1 -j CNI-y\n\
             -D POSTROUTING -s 10.0.0.2/32 -m comment --comment \"a b\" -j CNI-x\n\
             -F CNI-x\n\
             -X CNI-x\n\
             COMMIT\n"
        );
    }
}
