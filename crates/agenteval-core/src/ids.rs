//! Identifiers: time-ordered run ids, validated task ids, job ids.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// A run id: a UUIDv7, so ids sort by creation time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(uuid::Uuid);

impl RunId {
    pub fn new() -> Self {
        RunId(uuid::Uuid::now_v7())
    }

    /// The id of a run made elsewhere (a Harbor job read back): a UUIDv7 of when it started,
    /// its other bits taken from `identity`, so the same outside run always gets the same id
    /// and still sorts by time.
    pub fn derived(started_ms: u64, identity: &[u8]) -> Self {
        use sha2::{Digest as _, Sha256};
        let digest = Sha256::digest(identity);
        let mut bits = [0u8; 10];
        bits.copy_from_slice(&digest[..10]);
        RunId(uuid::Builder::from_unix_timestamp_millis(started_ms, &bits).into_uuid())
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for RunId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        uuid::Uuid::parse_str(s)
            .map(RunId)
            .map_err(|_| Error::invalid(format!("`{s}` is not a run id (expected a UUID)")))
    }
}

/// Characters allowed in task and job ids. Ids become directory names and object keys, so they
/// are restricted to a portable set; `@` is reserved for repetition suffixes.
fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && s != "."
        && s != ".."
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

macro_rules! string_id {
    ($name:ident, $what:literal) => {
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = Error;
            fn try_from(s: String) -> Result<Self, Error> {
                if valid_id(s.split_once('@').map_or(&s, |(base, _)| base))
                    && s.split_once('@').is_none_or(|(_, rep)| valid_id(rep))
                {
                    Ok($name(s))
                } else {
                    Err(Error::invalid(format!(
                        concat!("`{}` is not a valid ", $what, " id: use 1-200 characters from A-Z a-z 0-9 . _ -"),
                        s
                    )))
                }
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                Self::try_from(s.to_string())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

string_id!(TaskId, "task");
string_id!(JobId, "job");

impl TaskId {
    /// The id of repetition `rep` (0-based) of this task; repetition 0 keeps the plain id.
    pub fn repetition(&self, rep: u32) -> TaskId {
        if rep == 0 { self.clone() } else { TaskId(format!("{}@r{}", self.0, rep)) }
    }

    /// The task this one repeats: `t1` for `t1@r2`, the id itself otherwise.
    pub fn base(&self) -> &str {
        match self.0.rsplit_once("@r") {
            Some((base, rep)) if !rep.is_empty() && rep.bytes().all(|b| b.is_ascii_digit()) => base,
            _ => &self.0,
        }
    }
}

impl JobId {
    /// Job ids sort in submission order: `j000042`, or `r2-j000042` for the second resume.
    pub fn numbered(epoch: u32, n: usize) -> JobId {
        if epoch == 0 { JobId(format!("j{n:06}")) } else { JobId(format!("r{epoch}-j{n:06}")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_run_id_is_the_same_for_the_same_identity_and_sorts_by_time() {
        let a = RunId::derived(1_700_000_000_000, b"job-1");
        assert_eq!(a, RunId::derived(1_700_000_000_000, b"job-1"));
        assert_ne!(a, RunId::derived(1_700_000_000_000, b"job-2"));
        assert!(RunId::derived(1_700_000_000_001, b"job-0") > a);
        assert_eq!(a.0.get_version_num(), 7);
    }

    #[test]
    fn task_ids_reject_path_tricks() {
        for bad in ["", "..", "a/b", "a b", "x@", "@r1", "é"] {
            assert!(TaskId::from_str(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["t-1", "case_01.v2", "T@r3"] {
            assert!(TaskId::from_str(good).is_ok(), "{good:?} rejected");
        }
    }

    #[test]
    fn repetitions_get_distinct_ids() {
        let t = TaskId::from_str("t1").unwrap();
        assert_eq!(t.repetition(0).as_str(), "t1");
        assert_eq!(t.repetition(2).as_str(), "t1@r2");
        assert_eq!(t.repetition(2).base(), "t1");
        assert_eq!(t.base(), "t1");
        assert!(TaskId::from_str(t.repetition(2).as_str()).is_ok());
    }

    #[test]
    fn run_ids_are_time_ordered() {
        let a = RunId::new();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = RunId::new();
        assert!(a < b);
        assert_eq!(RunId::from_str(&a.to_string()).unwrap(), a);
    }
}
