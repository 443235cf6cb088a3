//! An SVG chart of ADD latency against the number of pods already attached,
//! one line per side, from the growth figures of the chain benchmark.

use std::fmt::Write as _;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 400.0;
const MARGIN: f64 = 56.0;

/// `series`: (label, colour, ADD time in ms of pod i).
pub fn svg(title: &str, series: &[(&str, &str, &[f64])]) -> String {
    let max_n = series.iter().map(|s| s.2.len()).max().unwrap_or(0).max(1);
    let max_ms = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .filter(|v| v.is_finite())
        .fold(1.0_f64, f64::max)
        * 1.1;
    let x = |i: usize| MARGIN + (i as f64) * (WIDTH - 2.0 * MARGIN) / (max_n as f64);
    let y = |ms: f64| HEIGHT - MARGIN - ms / max_ms * (HEIGHT - 2.0 * MARGIN);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    // Axes with a few ticks.
    let _ = writeln!(
        out,
        r#"<line x1="{MARGIN}" y1="{0}" x2="{1}" y2="{0}" stroke="black"/><line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{0}" stroke="black"/>"#,
        HEIGHT - MARGIN,
        WIDTH - MARGIN
    );
    for k in 0..=4 {
        let ms = max_ms * k as f64 / 4.0;
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{}" text-anchor="end">{ms:.0}</text><line x1="{MARGIN}" y1="{1}" x2="{2}" y2="{1}" stroke="#ddd"/>"##,
            MARGIN - 6.0,
            y(ms) + 4.0,
            WIDTH - MARGIN
        );
        let n = max_n * k / 4;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{n}</text>"#,
            x(n),
            HEIGHT - MARGIN + 16.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">pods already attached</text>"#,
        WIDTH / 2.0,
        HEIGHT - 12.0
    );
    let _ = writeln!(
        out,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {0})" text-anchor="middle">ADD latency (ms)</text>"#,
        HEIGHT / 2.0
    );
    for (k, (label, colour, values)) in series.iter().enumerate() {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
            points.join(" ")
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" fill="{colour}">{}</text>"#,
            MARGIN + 10.0,
            MARGIN + 14.0 * (k as f64 + 1.0),
            escape(label)
        );
    }
    out.push_str("</svg>\n");
    out
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
    fn draws_one_polyline_per_series() {
        let a = [1.0, 2.0, 3.0];
        let b = [2.0, 4.0, f64::NAN];
        let s = svg("t <x>", &[("ours", "blue", &a), ("reference", "red", &b)]);
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("t &lt;x&gt;"));
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
    }
}
