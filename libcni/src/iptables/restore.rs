//! Input for `iptables-restore --noflush`: one table's changes, applied by
//! the kernel as one transaction.
//!
//! Chain declarations come first, then the commands in the order they were
//! given: restore wants a chain declared before a rule names it.

use super::save::SavedRule;

/// A value restore input cannot carry: a newline would end the line and
/// start a command of the value's choosing, so control characters are
/// refused here, whatever the caller validated before.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("iptables-restore input cannot carry control characters: {value:?}")]
pub struct UnsafeArg {
    pub value: String,
}

/// A restore script for one table, built change by change.
///
/// A change naming a control character is not added; the script remembers
/// the first such value and refuses to [`render`](RestoreScript::render).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreScript {
    table: String,
    declarations: Vec<String>,
    commands: Vec<String>,
    refused: Option<UnsafeArg>,
}

impl RestoreScript {
    pub fn new(table: &str) -> RestoreScript {
        RestoreScript {
            table: table.to_string(),
            declarations: Vec::new(),
            commands: Vec::new(),
            refused: None,
        }
    }

    /// Adds `line` to `list` unless it holds a control character, which is
    /// remembered instead (the first one).
    fn push_checked(&mut self, line: Result<String, UnsafeArg>, declaration: bool) {
        match line.and_then(|line| check_line(&line).map(|()| line)) {
            Ok(line) if declaration => self.declarations.push(line),
            Ok(line) => self.commands.push(line),
            Err(e) => {
                self.refused.get_or_insert(e);
            }
        }
    }

    /// `:<chain> - [0:0]`: creates the chain, or empties it if it exists.
    pub fn declare_chain(&mut self, chain: &str) {
        self.push_checked(Ok(format!(":{chain} - [0:0]")), true);
    }

    /// `-A <chain> <args>`.
    pub fn append(&mut self, chain: &str, args: &[String]) {
        let line = checked_join(args).map(|args| format!("-A {chain} {args}"));
        self.push_checked(line, false);
    }

    /// `-I <chain> <position> <args>` (positions count from 1).
    pub fn insert(&mut self, chain: &str, position: u32, args: &[String]) {
        let line = checked_join(args).map(|args| format!("-I {chain} {position} {args}"));
        self.push_checked(line, false);
    }

    /// `-D <chain> <text>`: deletes `rule` by the text it was saved with.
    pub fn delete(&mut self, rule: &SavedRule) {
        self.push_checked(Ok(format!("-D {} {}", rule.chain, rule.text)), false);
    }

    /// `-F <chain>`.
    pub fn flush_chain(&mut self, chain: &str) {
        self.push_checked(Ok(format!("-F {chain}")), false);
    }

    /// `-X <chain>`: the chain must be empty and unreferenced by then.
    pub fn delete_chain(&mut self, chain: &str) {
        self.push_checked(Ok(format!("-X {chain}")), false);
    }

    /// Whether the script changes nothing.
    pub fn is_empty(&self) -> bool {
        self.declarations.is_empty() && self.commands.is_empty() && self.refused.is_none()
    }

    /// The script as `iptables-restore` reads it; an error if a change
    /// named a control character (nothing of the script is then applied).
    pub fn render(&self) -> Result<String, UnsafeArg> {
        if let Some(refused) = &self.refused {
            return Err(refused.clone());
        }
        let mut out = format!("*{}\n", self.table);
        for line in self.declarations.iter().chain(&self.commands) {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("COMMIT\n");
        Ok(out)
    }
}

/// Refuses a line carrying a control character (a chain name or saved
/// text that did not pass through [`quote_arg`]).
fn check_line(line: &str) -> Result<(), UnsafeArg> {
    if line.chars().any(char::is_control) {
        return Err(UnsafeArg {
            value: line.to_string(),
        });
    }
    Ok(())
}

/// One argument as restore input: bare when safe, else double-quoted with
/// `\"` and `\\` escapes (what [`super::save::split_args`] undoes). A
/// control character (newline, carriage return, NUL, ...) is an error:
/// quotes do not stop restore from reading a newline as the end of the
/// command.
pub fn quote_arg(arg: &str) -> Result<String, UnsafeArg> {
    if arg.chars().any(char::is_control) {
        return Err(UnsafeArg {
            value: arg.to_string(),
        });
    }
    Ok(quote_unchecked(arg))
}

/// [`quote_arg`] without the control-character check.
fn quote_unchecked(arg: &str) -> String {
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

/// Arguments joined as one restore line's tail, refusing control
/// characters.
pub fn checked_join(args: &[String]) -> Result<String, UnsafeArg> {
    Ok(args
        .iter()
        .map(|a| quote_arg(a))
        .collect::<Result<Vec<_>, _>>()?
        .join(" "))
}

/// Arguments joined as `iptables-save` prints them: the text a saved rule
/// is compared and deleted by. It is never written as is: a script
/// refuses a deletion whose text holds a control character.
pub fn join_args(args: &[String]) -> String {
    args.iter()
        .map(|a| quote_unchecked(a))
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
            let quoted = quote_arg(arg).unwrap();
            assert_eq!(
                split_args(&quoted).unwrap(),
                vec![arg.to_string()],
                "{quoted}"
            );
        }
        assert_eq!(quote_arg("-s").unwrap(), "-s");
        assert_eq!(quote_arg("!").unwrap(), "!");
    }

    #[test]
    fn control_characters_are_refused_and_poison_the_script() {
        for arg in ["a\nb", "x\r", "\0", "tab\there", "\u{1b}[2J"] {
            assert_eq!(
                quote_arg(arg),
                Err(UnsafeArg {
                    value: arg.to_string()
                }),
                "{arg:?}"
            );
        }
        let mut script = RestoreScript::new("nat");
        script.append("CNI-x", &args(&["-j", "ACCEPT"]));
        script.append(
            "CNI-x",
            &args(&["--comment", "x\n-A INPUT -j DROP", "-j", "ACCEPT"]),
        );
        script.flush_chain("CNI-y\n-F INPUT");
        assert!(!script.is_empty());
        let err = script.render().unwrap_err();
        assert_eq!(err.value, "x\n-A INPUT -j DROP", "the first refused value");
        assert_eq!(
            err.to_string(),
            "iptables-restore input cannot carry control characters: \"x\\n-A INPUT -j DROP\""
        );
        let mut script = RestoreScript::new("nat");
        script.delete(&SavedRule {
            chain: "POSTROUTING".into(),
            args: args(&["-j", "x\ny"]),
            text: join_args(&args(&["-j", "x\ny"])),
        });
        assert!(script.render().is_err());
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
            script.render().unwrap(),
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
