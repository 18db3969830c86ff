//! Medians and spreads.

/// Median and interquartile range of a sample.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub p25: f64,
    pub p75: f64,
    pub n: usize,
}

/// Linear-interpolated quantile of sorted data.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

pub fn summarize(values: &[f64]) -> Summary {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    Summary {
        median: quantile(&v, 0.5),
        p25: quantile(&v, 0.25),
        p75: quantile(&v, 0.75),
        n: v.len(),
    }
}

/// The `q` quantile (0..=1) of a sample, NaN when it is empty.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    quantile(&v, q)
}

/// Median of element-wise ratios `b[i] / a[i]`: runs were alternated in
/// pairs, so each pair saw the same machine state.
pub fn paired_ratio(a: &[f64], b: &[f64]) -> Summary {
    let r: Vec<f64> = a.iter().zip(b).map(|(a, b)| b / a).collect();
    summarize(&r)
}

/// Significant-enough formatting: 3 digits for small numbers.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// `median (p25–p75)`.
pub fn cell(s: &Summary) -> String {
    format!("{} ({}–{})", num(s.median), num(s.p25), num(s.p75))
}

/// `0.85× (0.80–0.90)`.
pub fn ratio_cell(s: &Summary) -> String {
    format!("{}× ({}–{})", num(s.median), num(s.p25), num(s.p75))
}
