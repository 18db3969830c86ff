//! The report's figures: SVG written from the bench's own numbers, no
//! plotting crate and no network. Three shapes cover the headlines: the
//! distribution of a sample per side (box from p25 to p75, the median, and
//! every run as a dot), series over a numeric x (IPAM ops/s by clients), and
//! a reading over the daemon's cycles.

use std::fmt::Write;

use crate::stats::{num, summarize};

const W: f64 = 720.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// One colour per side, the same side the same colour in every figure.
pub const COLOURS: [&str; 5] = ["#7f7f7f", "#1f77b4", "#2ca02c", "#d62728", "#9467bd"];

/// Text as SVG character data.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// About five round ticks from `lo` to `hi`.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 && out.len() < 50 {
        out.push(t);
        t += step;
    }
    out
}

/// The axis range: from 0 (every quantity here is a size, a rate or a
/// time) to a little above the largest value.
fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let hi = values.filter(|v| v.is_finite()).fold(0.0, f64::max);
    (0.0, if hi > 0.0 { hi * 1.08 } else { 1.0 })
}

fn header(out: &mut String, h: f64, title: &str) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        W / 2.0,
        esc(title)
    );
}

/// Vertical grid lines and labels of a horizontal value axis.
fn x_axis(out: &mut String, lo: f64, hi: f64, y0: f64, y1: f64, label: &str) {
    let sx = |v: f64| LEFT + (v - lo) / (hi - lo) * (W - LEFT - RIGHT);
    for t in ticks(lo, hi) {
        let x = sx(t);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{y0:.1}" x2="{x:.1}" y2="{y1:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            y1 + 15.0,
            num(t)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        y1 + 35.0,
        esc(label)
    );
}

/// One row per side: its runs as dots, a box from p25 to p75 and the
/// median as a bar. `rows`: (side, values).
pub fn distributions(title: &str, unit: &str, rows: &[(&str, Vec<f64>)]) -> String {
    let row_h = 44.0;
    let h = TOP + BOTTOM + row_h * rows.len() as f64;
    let (lo, hi) = range(rows.iter().flat_map(|(_, v)| v.iter().copied()));
    let sx = |v: f64| LEFT + (v - lo) / (hi - lo) * (W - LEFT - RIGHT);
    let mut out = String::new();
    header(&mut out, h, title);
    x_axis(&mut out, lo, hi, TOP, h - BOTTOM, unit);
    for (i, (side, values)) in rows.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let cy = TOP + row_h * (i as f64 + 0.5);
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 8.0,
            cy + 4.0,
            esc(side)
        );
        let s = summarize(values);
        if s.n == 0 {
            continue;
        }
        let _ = writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}" fill-opacity="0.25" stroke="{colour}"/>"#,
            sx(s.p25),
            cy - 12.0,
            (sx(s.p75) - sx(s.p25)).max(1.0),
            24.0
        );
        let _ = writeln!(
            out,
            r#"<line x1="{m:.1}" y1="{:.1}" x2="{m:.1}" y2="{:.1}" stroke="{colour}" stroke-width="3"/>"#,
            cy - 14.0,
            cy + 14.0,
            m = sx(s.median)
        );
        // Dots spread a little vertically (by index, not at random: the
        // same data draws the same figure).
        for (j, v) in values.iter().filter(|v| v.is_finite()).enumerate() {
            let dy = ((j % 7) as f64 - 3.0) * 2.5;
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2" fill="{colour}" fill-opacity="0.6"/>"#,
                sx(*v),
                cy + dy
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" fill="{colour}">{}</text>"#,
            sx(s.median) + 4.0,
            cy - 16.0,
            num(s.median)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// Lines over a numeric x: `series` are (name, points (x, y)).
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> String {
    let h = 360.0;
    let (xlo, xhi) = range(series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)));
    let (ylo, yhi) = range(series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)));
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, TOP, h - BOTTOM);
    let sx = |v: f64| x0 + (v - xlo) / (xhi - xlo) * (x1 - x0);
    let sy = |v: f64| y1 - (v - ylo) / (yhi - ylo) * (y1 - y0);
    let mut out = String::new();
    header(&mut out, h, title);
    x_axis(&mut out, xlo, xhi, y0, y1, x_label);
    for t in ticks(ylo, yhi) {
        let y = sy(t);
        let _ = writeln!(
            out,
            r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{x1:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            num(t)
        );
    }
    let _ = writeln!(
        out,
        r#"<text transform="translate(20,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (y0 + y1) / 2.0,
        esc(y_label)
    );
    for (i, (name, points)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let at: Vec<(f64, f64)> = points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|(x, y)| (sx(*x), sy(*y)))
            .collect();
        let path: Vec<String> = at.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for (cx, cy) in &at {
            let _ = writeln!(
                out,
                r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="3" fill="{colour}"/>"#
            );
        }
        let _ = writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="10" height="10" fill="{colour}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            x0 + 10.0,
            y0 + 6.0 + 16.0 * i as f64,
            x0 + 25.0,
            y0 + 15.0 + 16.0 * i as f64,
            esc(name)
        );
    }
    out.push_str("</svg>\n");
    out
}
