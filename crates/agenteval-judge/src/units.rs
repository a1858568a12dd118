//! One unit per figure: a metric's value, its difference and a gate's limit as text, the same
//! on the terminal, in Markdown and on the HTML page (a share in percent and its differences in
//! points, a cost in dollars).

/// Whether a metric is a share (shown in percent, its differences in points).
pub(crate) fn is_share(metric: &str) -> bool {
    metric == "pass_rate" || metric == "pairwise" || metric.starts_with("score:")
}

/// A metric's value in its one unit, as text, the HTML page and the gates show it: a share in
/// percent, a cost in dollars, anything else as a number.
pub fn fmt_value(metric: &str, v: f64) -> String {
    if is_share(metric) {
        format!("{:.1}%", v * 100.0)
    } else if metric == "cost_per_task" {
        format!("${v:.4}")
    } else {
        format!("{v:.3}")
    }
}

/// A difference of a metric in its unit: points for a share, dollars for a cost.
pub(crate) fn fmt_delta(metric: &str, v: f64) -> String {
    if is_share(metric) {
        format!("{:+.2} pts", v * 100.0)
    } else if metric == "cost_per_task" {
        format!("{}${:.4}", if v < 0.0 { "-" } else { "+" }, v.abs())
    } else {
        format!("{v:+.3}")
    }
}

/// A gate's limit (or the value it judged) in the unit of what it judges: `pass_rate.min`
/// and `max` in percent, `pass_rate.max_drop` in points, `cost_per_task` limits in dollars,
/// `…max_drop_pct` in percent, counts as whole numbers.
pub fn gate_figure(gate: &str, v: f64) -> String {
    let (metric, kind) = gate.rsplit_once('.').unwrap_or((gate, ""));
    match kind {
        "min" | "max" => fmt_value(metric, v),
        "max_drop" if is_share(metric) => format!("{:.2} pts", v * 100.0),
        "max_drop" if metric == "cost_per_task" => format!("${v:.4}"),
        "max_drop_pct" => format!("{v:.2}%"),
        _ if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        _ => format!("{v:.4}"),
    }
}
