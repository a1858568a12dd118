//! The fork server's wire format: one JSON object per line, each way, over a socket pair.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Start a worker: run `entry(args)` in a child whose stdout and stderr go to `log` (created or
/// truncated) and whose environment is the server's plus `env`.
#[derive(Serialize, Deserialize)]
pub(crate) struct Start {
    pub id: u64,
    pub args: Vec<String>,
    pub log: PathBuf,
    pub env: Vec<(String, String)>,
}

/// The environment may carry credentials: `Debug` names the variables, never their values.
impl std::fmt::Debug for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Start")
            .field("id", &self.id)
            .field("args", &self.args)
            .field("log", &self.log)
            .field("env", &self.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>())
            .finish()
    }
}

/// What the server says. `Exited` for a pid always follows its `Started`.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub(crate) enum Reply {
    Started {
        id: u64,
        pid: i32,
    },
    Refused {
        id: u64,
        error: String,
    },
    /// `status` is the wait status as `waitpid` gives it (`ExitStatus::from_raw` reads it).
    Exited {
        pid: i32,
        status: i32,
    },
}

/// One line of JSON, newline included.
pub(crate) fn line<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut out = serde_json::to_vec(msg).expect("protocol messages serialize");
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_request_does_not_show_its_environment_values() {
        let s =
            Start { id: 1, args: vec!["worker".into()], log: "/l".into(), env: vec![("KEY".into(), "s3cr3t".into())] };
        let shown = format!("{s:?}");
        assert!(shown.contains("KEY") && !shown.contains("s3cr3t"), "{shown}");
    }

    #[test]
    fn replies_round_trip_as_one_line_each() {
        for r in [
            Reply::Started { id: 3, pid: 42 },
            Reply::Refused { id: 4, error: "no".into() },
            Reply::Exited { pid: 42, status: 2 << 8 },
        ] {
            let l = line(&r);
            assert_eq!(l.iter().filter(|b| **b == b'\n').count(), 1);
            assert_eq!(serde_json::from_slice::<Reply>(&l).unwrap(), r);
        }
    }
}
