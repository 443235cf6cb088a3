//! The suite's report: one line per check, then a closing
//! `N passed, N failed` line.
//!
//! A check that fails but is on the known-issue list of the plugins under
//! test is shown as `known` with the listed reason and is not counted as
//! failed; one on the list that passes is shown as passing, with a note
//! that the listed issue did not show (so the list can be kept honest).

use std::fmt::Write as _;
use std::io::Write as _;

use super::known_issues::KnownIssue;

/// How one check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed; the note says what was seen, when that is informative
    /// (an error code, a version chosen).
    Pass(String),
    Fail(String),
    /// A failure of the plugins under test that the known-issue list
    /// names, with the listed reason.
    Known {
        reason: String,
        observed: String,
    },
    /// Not applicable to these plugins, with the reason.
    Skip(String),
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckLine {
    /// Stable identifier: `<subject>: <what is checked>`.
    pub id: String,
    pub outcome: Outcome,
}

impl CheckLine {
    /// One line, whatever the notes hold (plugin output is often
    /// indented JSON).
    pub fn render(&self) -> String {
        match &self.outcome {
            Outcome::Pass(note) if note.is_empty() => format!("ok    {}", self.id),
            Outcome::Pass(note) => format!("ok    {} [{}]", self.id, one_line(note)),
            Outcome::Fail(why) => format!("FAIL  {} -- {}", self.id, one_line(why)),
            Outcome::Known { reason, observed } => {
                format!(
                    "known {} -- known issue of these plugins: {reason} (seen: {})",
                    self.id,
                    shortened(&one_line(observed), 240)
                )
            }
            Outcome::Skip(why) => format!("skip  {} -- {}", self.id, one_line(why)),
        }
    }
}

/// At most `max` characters, marked when cut.
fn shortened(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}...")
}

/// Whitespace runs (newlines included) folded to one space, and what
/// differs from run to run (MAC addresses, random veth names, the suite's
/// namespace names) replaced by a placeholder, so that two runs print the
/// same report.
fn one_line(text: &str) -> String {
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    stable(&folded)
}

fn stable(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        if let Some(n) = mac_len(rest) {
            out.push_str("<mac>");
            i += n;
        } else if starts_with(rest, "veth")
            && rest.len() >= 12
            && rest[4..12].iter().all(char::is_ascii_hexdigit)
        {
            out.push_str("<veth>");
            i += 12;
        } else if starts_with(rest, "cnitest-") {
            let n = rest
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '-')
                .count();
            out.push_str("<netns>");
            i += n;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

fn starts_with(chars: &[char], prefix: &str) -> bool {
    prefix
        .chars()
        .enumerate()
        .all(|(k, p)| chars.get(k) == Some(&p))
}

/// The length of a MAC address (`xx:xx:xx:xx:xx:xx`) at the start.
fn mac_len(chars: &[char]) -> Option<usize> {
    if chars.len() < 17 {
        return None;
    }
    for (k, c) in chars[..17].iter().enumerate() {
        let ok = if k % 3 == 2 {
            *c == ':'
        } else {
            c.is_ascii_hexdigit()
        };
        if !ok {
            return None;
        }
    }
    Some(17)
}

/// Totals of a report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub passed: usize,
    pub failed: usize,
    pub known: usize,
    pub skipped: usize,
}

/// Collects check lines, printing each as it is recorded when `echo` is
/// set (a long run shows progress).
#[derive(Debug, Default)]
pub struct Report {
    lines: Vec<CheckLine>,
    known_issues: Vec<KnownIssue>,
    echo: bool,
}

impl Report {
    /// `known_issues` are the issues that apply to the plugins under test.
    pub fn new(known_issues: Vec<KnownIssue>, echo: bool) -> Report {
        Report {
            lines: Vec::new(),
            known_issues,
            echo,
        }
    }

    /// Records the result of a check: `Ok(note)` passes, `Err(why)` fails
    /// unless the check is a listed known issue.
    pub fn check(&mut self, id: impl Into<String>, result: Result<String, String>) {
        let id = id.into();
        let known = self.known_issues.iter().find(|k| k.check_id == id);
        let outcome = match (result, known) {
            (Ok(note), None) => Outcome::Pass(note),
            (Ok(note), Some(_)) => {
                let seen = "listed as a known issue, but it did not show";
                if note.is_empty() {
                    Outcome::Pass(seen.to_string())
                } else {
                    Outcome::Pass(format!("{note}; {seen}"))
                }
            }
            (Err(why), None) => Outcome::Fail(why),
            (Err(why), Some(k)) => Outcome::Known {
                reason: k.reason.to_string(),
                observed: why,
            },
        };
        self.push(CheckLine { id, outcome });
    }

    /// Records a passing check with no note.
    pub fn pass(&mut self, id: impl Into<String>) {
        self.check(id, Ok(String::new()));
    }

    /// Records a check that does not apply.
    pub fn skip(&mut self, id: impl Into<String>, why: impl Into<String>) {
        self.push(CheckLine {
            id: id.into(),
            outcome: Outcome::Skip(why.into()),
        });
    }

    fn push(&mut self, line: CheckLine) {
        if self.echo {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", line.render());
            let _ = out.flush();
        }
        self.lines.push(line);
    }

    pub fn lines(&self) -> &[CheckLine] {
        &self.lines
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for line in &self.lines {
            match line.outcome {
                Outcome::Pass(_) => t.passed += 1,
                Outcome::Fail(_) => t.failed += 1,
                Outcome::Known { .. } => t.known += 1,
                Outcome::Skip(_) => t.skipped += 1,
            }
        }
        t
    }

    /// The ids of the checks that failed (not counting known issues).
    pub fn failed_ids(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|l| matches!(l.outcome, Outcome::Fail(_)))
            .map(|l| l.id.as_str())
            .collect()
    }

    /// What follows the check lines: the known issues that showed, and the
    /// closing `N passed, N failed` line (`, N skipped` when some were).
    pub fn summary(&self) -> String {
        let t = self.totals();
        let mut out = String::new();
        if t.known > 0 {
            let _ = writeln!(
                out,
                "{} known issue(s) of these plugins showed, as listed (not counted as failed):",
                t.known
            );
            for line in &self.lines {
                if let Outcome::Known { reason, .. } = &line.outcome {
                    let _ = writeln!(out, "  - {}: {reason}", line.id);
                }
            }
        }
        if t.skipped > 0 {
            let _ = writeln!(
                out,
                "{} passed, {} failed, {} skipped",
                t.passed, t.failed, t.skipped
            );
        } else {
            let _ = writeln!(out, "{} passed, {} failed", t.passed, t.failed);
        }
        out
    }

    /// Every line and the summary, as printed.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in &self.lines {
            let _ = writeln!(out, "{}", line.render());
        }
        out.push_str(&self.summary());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(id: &'static str) -> KnownIssue {
        KnownIssue {
            check_id: id,
            reason: "listed reason",
        }
    }

    #[test]
    fn counts_known_issues_apart_from_failures() {
        let mut r = Report::new(vec![issue("p: known one"), issue("p: fixed one")], false);
        r.pass("p: a");
        r.check("p: b", Err("broken".into()));
        r.check("p: known one", Err("as listed".into()));
        r.check("p: fixed one", Ok(String::new()));
        r.skip("p: c", "no such plugin");
        let t = r.totals();
        assert_eq!(
            t,
            Totals {
                passed: 2,
                failed: 1,
                known: 1,
                skipped: 1
            }
        );
        assert_eq!(r.failed_ids(), vec!["p: b"]);
        let text = r.render();
        assert!(text.contains("FAIL  p: b -- broken"), "{text}");
        assert!(text.contains("known p: known one -- known issue"), "{text}");
        assert!(text.contains("ok    p: fixed one [listed as a known issue, but it did not show]"));
        assert!(text.ends_with("2 passed, 1 failed, 1 skipped\n"), "{text}");
    }

    #[test]
    fn per_run_values_are_hidden() {
        assert_eq!(
            stable("mac 0a:58:0a:63:00:05 on veth1a2b3c4d in /run/netns/cnitest-bad-h-123-4 at 10.99.0.2:8080"),
            "mac <mac> on <veth> in /run/netns/<netns> at 10.99.0.2:8080"
        );
    }

    #[test]
    fn each_check_is_one_line() {
        let mut r = Report::new(Vec::new(), false);
        r.check("p: a", Err("exit 1: {\n    \"code\": 7\n}".into()));
        assert_eq!(
            r.lines()[0].render(),
            "FAIL  p: a -- exit 1: { \"code\": 7 }"
        );
    }

    #[test]
    fn closing_line_has_no_skipped_part_when_none_were() {
        let mut r = Report::new(Vec::new(), false);
        r.pass("p: a");
        assert_eq!(r.summary(), "1 passed, 0 failed\n");
    }
}
