//! The official harness's run report (`make_run_report`, `schema_version` 2): how many
//! instances were submitted, completed, resolved, and which, from each instance's outcome.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// What became of one instance, as the harness sorts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sorted {
    /// Graded, every FAIL_TO_PASS and PASS_TO_PASS test as required.
    Resolved,
    /// Graded, not resolved (its log may have shown nothing usable).
    Unresolved,
    /// Not graded: the patch did not apply, the tests timed out, or grading failed.
    Error,
    /// An empty or missing patch: never graded.
    EmptyPatch,
}

/// The report over the dataset's instances (`total`), the predictions submitted, and the
/// outcome of each instance that had one (an instance without one is incomplete).
pub fn run_report(total: &[String], submitted: &[String], outcomes: &BTreeMap<String, Sorted>) -> Value {
    let pick = |want: Sorted| -> Vec<&String> {
        let mut v: Vec<&String> = outcomes.iter().filter(|(_, s)| **s == want).map(|(k, _)| k).collect();
        v.sort();
        v
    };
    let (resolved, unresolved, errors, empty) =
        (pick(Sorted::Resolved), pick(Sorted::Unresolved), pick(Sorted::Error), pick(Sorted::EmptyPatch));
    let mut completed: Vec<&String> = resolved.iter().chain(&unresolved).copied().collect();
    completed.sort();
    let mut incomplete: Vec<&String> = total.iter().filter(|i| !outcomes.contains_key(*i)).collect();
    incomplete.sort();
    let mut submitted_ids: Vec<&String> = submitted.iter().collect();
    submitted_ids.sort();
    json!({
        "total_instances": total.len(),
        "submitted_instances": submitted.len(),
        "completed_instances": completed.len(),
        "resolved_instances": resolved.len(),
        "unresolved_instances": unresolved.len(),
        "infra_failure_instances": 0,
        "ambiguous_failure_instances": 0,
        "empty_patch_instances": empty.len(),
        "error_instances": errors.len(),
        "completed_ids": completed,
        "incomplete_ids": incomplete,
        "empty_patch_ids": empty,
        "submitted_ids": submitted_ids,
        "resolved_ids": resolved,
        "unresolved_ids": unresolved,
        "infra_failure_ids": [],
        "ambiguous_failure_ids": [],
        "failure_reasons": {},
        "error_ids": errors,
        "schema_version": 2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_instance_lands_in_the_harnesss_lists() {
        let total: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let outcomes: BTreeMap<String, Sorted> = [
            ("a".to_string(), Sorted::Resolved),
            ("b".to_string(), Sorted::Unresolved),
            ("c".to_string(), Sorted::Error),
            ("d".to_string(), Sorted::EmptyPatch),
        ]
        .into();
        let r = run_report(&total, &total[..4], &outcomes);
        assert_eq!(r["resolved_ids"], json!(["a"]));
        assert_eq!(r["completed_ids"], json!(["a", "b"]));
        assert_eq!(r["incomplete_ids"], json!(["e"]));
        assert_eq!((r["error_instances"].as_u64(), r["empty_patch_instances"].as_u64()), (Some(1), Some(1)));
        assert_eq!(r["schema_version"], 2);
    }
}
