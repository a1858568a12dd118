//! SWE-bench as its official harness (PyPI `swebench` 5.x) grades it: the dataset's rows and a
//! model's predictions, the eval script as the harness runs it, the log parsers the Python
//! repositories name, the resolved verdict with its report fields, and the run report. Pure:
//! the engine runs the containers (`benchmarks/swebench.rs`).

pub mod dataset;
pub mod grading;
mod parquet;
pub mod parsers;
pub mod report;

pub use dataset::{Instance, Prediction, read_dataset, read_predictions};
pub use grading::{EvalType, InstanceReport, TestsStatus};
