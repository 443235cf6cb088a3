//! An SVG chart of ADD latency against the number of pods already attached,
//! one line per side, from the growth figures of the chain benchmark.
//!
//! Two panels: the upper one draws every series on one linear axis (how far
//! apart the sides are), the lower one the first series (ours) alone on an
//! axis fitted to it, since on the shared axis a line several times lower
//! than the other is flat at the bottom and its own growth cannot be seen.
//! Ticks are round numbers (1, 2, 2.5 or 5 times a power of ten), and the
//! title is wrapped to the chart's width rather than cut off.

use std::fmt::Write as _;

const WIDTH: f64 = 760.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TITLE_LINE: f64 = 18.0;
const PANEL_HEIGHT: f64 = 210.0;
const PANEL_GAP: f64 = 62.0;
/// Characters of 12-px sans-serif text that fit in the chart's width, for
/// wrapping the title lines (a conservative 6.5 px per character).
const CHARS_PER_LINE: usize = ((WIDTH - 20.0) / 6.5) as usize;

/// One line of the chart: its legend label, colour and the ADD time in ms
/// of pod i (non-finite values are left out).
pub struct Series<'a> {
    pub label: &'a str,
    pub colour: &'a str,
    pub values: &'a [f64],
}

/// The chart: `title` in bold, `subtitle` (how and where it was measured)
/// under it, both wrapped; the upper panel has every series, the lower
/// panel the first series alone on its own scale.
pub fn svg(title: &str, subtitle: &str, series: &[Series]) -> String {
    let mut title_lines = wrap(title, CHARS_PER_LINE * 12 / 14);
    let subtitle_lines = wrap(subtitle, CHARS_PER_LINE);
    if title_lines.is_empty() {
        title_lines.push(String::new());
    }
    let header = 14.0 + TITLE_LINE * (title_lines.len() + subtitle_lines.len()) as f64;
    let top_panel = header + 16.0;
    let bottom_panel = top_panel + PANEL_HEIGHT + PANEL_GAP;
    let height = bottom_panel + PANEL_HEIGHT + 48.0;
    let max_n = series
        .iter()
        .map(|s| s.values.len())
        .max()
        .unwrap_or(0)
        .max(1);

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let mut line_y = 8.0;
    for line in &title_lines {
        line_y += TITLE_LINE;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{line_y}" text-anchor="middle" font-size="14" font-weight="bold">{}</text>"#,
            WIDTH / 2.0,
            escape(line)
        );
    }
    for line in &subtitle_lines {
        line_y += TITLE_LINE;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{line_y}" text-anchor="middle">{}</text>"#,
            WIDTH / 2.0,
            escape(line)
        );
    }

    let all: Vec<&Series> = series.iter().collect();
    panel(
        &mut out,
        top_panel,
        max_n,
        &all,
        "all sides, one scale from 0",
        true,
    );
    if let Some(first) = series.first() {
        let caption = format!("{} alone, on its own scale", first.label);
        panel(&mut out, bottom_panel, max_n, &[first], &caption, false);
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">pods already attached</text>"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        height - 10.0
    );
    out.push_str("</svg>\n");
    out
}

/// One panel at vertical offset `top`: axes, round ticks, the series'
/// lines, a caption and (with `legend`) the series' labels.
fn panel(
    out: &mut String,
    top: f64,
    max_n: usize,
    series: &[&Series],
    caption: &str,
    from_zero: bool,
) {
    let finite = || {
        series
            .iter()
            .flat_map(|s| s.values.iter().copied())
            .filter(|v| v.is_finite())
    };
    let hi = finite().fold(f64::NEG_INFINITY, f64::max);
    let lo = if from_zero {
        0.0
    } else {
        finite().fold(f64::INFINITY, f64::min)
    };
    let (hi, lo) = if hi.is_finite() && lo.is_finite() {
        (hi, lo.min(hi))
    } else {
        (1.0, 0.0)
    };
    let ticks = nice_ticks(lo, hi, 5);
    let (y_lo, y_hi) = match (ticks.first(), ticks.last()) {
        (Some(&a), Some(&b)) if b > a => (a, b),
        _ => (lo, lo + 1.0),
    };
    let bottom = top + PANEL_HEIGHT;
    let plot_width = WIDTH - LEFT - RIGHT;
    let x = |i: f64| LEFT + i * plot_width / (max_n as f64);
    let y = |ms: f64| bottom - (ms - y_lo) / (y_hi - y_lo) * PANEL_HEIGHT;
    let decimals = tick_decimals(&ticks);

    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{}" font-style="italic">{}</text>"#,
        top - 6.0,
        escape(caption)
    );
    for &t in &ticks {
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{t:.4$}</text>"##,
            y(t),
            WIDTH - RIGHT,
            LEFT - 6.0,
            y(t) + 4.0,
            decimals
        );
    }
    for n in nice_ticks(0.0, max_n as f64, 6) {
        if n > max_n as f64 {
            continue;
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{n:.0}</text>"#,
            x(n),
            bottom + 16.0
        );
    }
    let _ = writeln!(
        out,
        r#"<line x1="{LEFT}" y1="{bottom}" x2="{0}" y2="{bottom}" stroke="black"/><line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{bottom}" stroke="black"/>"#,
        WIDTH - RIGHT
    );
    let mid = top + PANEL_HEIGHT / 2.0;
    let _ = writeln!(
        out,
        r#"<text x="16" y="{mid}" transform="rotate(-90 16 {mid})" text-anchor="middle">ADD latency (ms)</text>"#
    );
    for (k, s) in series.iter().enumerate() {
        let points: Vec<String> = s
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", x(i as f64), y(*v)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>"#,
            s.colour,
            points.join(" ")
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" fill="{}">{}</text>"#,
            LEFT + 10.0,
            top + 16.0 * (k as f64 + 1.0),
            s.colour,
            escape(s.label)
        );
    }
}

/// Round tick values covering `lo..=hi`, about `target` of them: the step
/// is 1, 2, 2.5 or 5 times a power of ten, the first tick a multiple of
/// it at or below `lo`, the last one at or above `hi`.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi < lo {
        return Vec::new();
    }
    let span = if hi > lo { hi - lo } else { hi.abs().max(1.0) };
    let rough = span / (target.max(2) - 1) as f64;
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).floor();
    let last = (hi / step).ceil().max(first + 1.0);
    // Multiplying the index (not adding steps) keeps 0.1 * 3 from
    // drifting to 0.30000000000000004 in the labels' rounding.
    (first as i64..=last as i64)
        .map(|k| k as f64 * step)
        .collect()
}

/// Decimals the tick labels need so that no two of them print alike.
fn tick_decimals(ticks: &[f64]) -> usize {
    (0..=3)
        .find(|&d| {
            let scale = 10f64.powi(d as i32);
            ticks
                .iter()
                .all(|t| ((t * scale).round() - t * scale).abs() < 1e-6)
        })
        .unwrap_or(3)
}

/// Splits `text` at spaces into lines of at most `width` characters (a
/// longer word gets a line of its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_series_on_top_and_the_first_alone_below() {
        let a = [1.0, 2.0, 3.0];
        let b = [20.0, 40.0, f64::NAN];
        let s = svg(
            "t <x>",
            "sub",
            &[
                Series {
                    label: "ours 0.1.0",
                    colour: "blue",
                    values: &a,
                },
                Series {
                    label: "reference 1.1.1",
                    colour: "red",
                    values: &b,
                },
            ],
        );
        assert_eq!(s.matches("<polyline").count(), 3);
        assert_eq!(s.matches(r#"stroke="blue""#).count(), 2);
        assert_eq!(s.matches(r#"stroke="red""#).count(), 1);
        assert!(s.contains("t &lt;x&gt;"));
        assert!(s.contains("reference 1.1.1"));
        assert!(s.contains("ours 0.1.0 alone, on its own scale"));
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        // The old chart's axis: 0 to 149 in quarters gave 0/37/75/112/149.
        assert_eq!(nice_ticks(0.0, 135.5, 5), vec![0.0, 50.0, 100.0, 150.0]);
        assert_eq!(nice_ticks(3.9, 7.2, 5), vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        assert_eq!(
            nice_ticks(0.0, 200.0, 6),
            vec![0.0, 50.0, 100.0, 150.0, 200.0]
        );
        let small = nice_ticks(0.21, 0.29, 5);
        assert_eq!(tick_decimals(&small), 2);
        assert!(small.first().is_some_and(|t| *t <= 0.21));
        assert!(small.last().is_some_and(|t| *t >= 0.29));
        assert!(nice_ticks(f64::NAN, 1.0, 5).is_empty());
        assert_eq!(nice_ticks(4.0, 4.0, 5), vec![4.0, 5.0]);
    }

    #[test]
    fn long_titles_wrap_instead_of_running_off_the_chart() {
        let title = "word ".repeat(60);
        let s = svg(&title, "", &[]);
        let lines = s.matches(r#"font-weight="bold""#).count();
        assert!(lines >= 2, "{lines} title lines");
        for line in wrap(&title, 40) {
            assert!(line.chars().count() <= 40);
        }
    }
}
