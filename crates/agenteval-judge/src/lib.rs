//! Judging runs: did the agent get worse, and can we trust that answer? Statistics over paired
//! tasks (`stats`), the comparison of two runs (`compare`), gates that turn it into a verdict
//! (`gates`), the judgement a run's bundle keeps (`judgement`), the reports people read
//! (`report`), the samples they show (`samples`) and the runs of a matrix side by side
//! (`set`). Reads bundles through the core's `BundleStore`; knows nothing of backends, the
//! engine or the CLI.

pub mod adaptive;
pub mod compare;
pub mod gates;
pub mod html;
pub mod judgement;
pub mod report;
pub mod results;
pub mod samples;
pub mod set;
pub mod stats;
pub mod units;

/// `1 task`, `2 tasks`: a count of tasks as every report says it.
pub fn tasks(n: usize) -> String {
    if n == 1 { "1 task".into() } else { format!("{n} tasks") }
}
