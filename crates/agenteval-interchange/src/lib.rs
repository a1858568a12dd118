//! Results in the formats other tools read, built from what a bundle holds: a task attempt's
//! trajectory as ATIF (`atif`), a run as a Harbor job folder and a Harbor job read back
//! (`harbor`), a certified run's package and its offline check (`certified`), and JUnit XML for
//! CI (`junit`).
//! Pure functions over the core's types: the binary reads the bundle and writes the files.

pub mod atif;
pub mod certified;
pub mod harbor;
pub mod junit;

/// A name as a file name and a task id allow it: letters, digits, `-`, `_` and `.`, any other
/// character as `_` (a Harbor task `org/name`, a repetition `t@r1`).
pub fn file_stem(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect()
}

/// Why a document could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file of another tool's format does not say what its format requires.
    #[error("{file}: {why}")]
    Invalid { file: String, why: String },
    #[error("writing XML: {0}")]
    Xml(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl From<Error> for agenteval_core::Error {
    fn from(e: Error) -> Self {
        agenteval_core::Error::invalid(e.to_string())
    }
}
