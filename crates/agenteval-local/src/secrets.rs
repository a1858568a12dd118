//! Secrets on this machine: a `NAME=value` file (`backend.secrets_file`), then the environment.

use std::path::{Path, PathBuf};

use agenteval_core::secret::Secret;
use agenteval_core::traits::SecretStore;
use agenteval_core::{Error, Result};
use async_trait::async_trait;

/// Reads a secret from the secrets file when one is set and names it, else from the
/// environment of this process.
#[derive(Debug, Clone, Default)]
pub struct LocalSecrets {
    file: Option<PathBuf>,
}

impl LocalSecrets {
    pub fn new(file: Option<PathBuf>) -> Self {
        LocalSecrets { file }
    }
}

#[async_trait]
impl SecretStore for LocalSecrets {
    async fn fetch(&self, name: &str) -> Result<Secret> {
        if let Some(file) = &self.file
            && let Some(s) = read_secrets_file(file, name)?
        {
            return Ok(s);
        }
        match std::env::var(name) {
            Ok(v) => Ok(Secret::new(v)),
            Err(_) => {
                Err(Error::not_found(format!("secret `{name}` is neither in the secrets file nor in the environment")))
            }
        }
    }
}

fn read_secrets_file(path: &Path, name: &str) -> Result<Option<Secret>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::io(format!("reading secrets file {}", path.display()), e))?;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        if let Some((k, v)) = line.split_once('=')
            && k.trim() == name
        {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|x| x.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
                .unwrap_or(v);
            return Ok(Some(Secret::new(v)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_file_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.env");
        std::fs::write(&p, "# comment\nexport A_KEY=\"quoted value\"\nB_KEY=plain=with=equals\n").unwrap();
        assert_eq!(read_secrets_file(&p, "A_KEY").unwrap().unwrap().expose(), "quoted value");
        assert_eq!(read_secrets_file(&p, "B_KEY").unwrap().unwrap().expose(), "plain=with=equals");
        assert!(read_secrets_file(&p, "C_KEY").unwrap().is_none());
    }

    #[tokio::test]
    async fn local_secrets_conformance() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.env");
        std::fs::write(&p, "FILE_KEY=sk-from-the-file-0123456789\n").unwrap();
        let store = std::sync::Arc::new(LocalSecrets::new(Some(p)));
        // PATH is in every test process's environment: the fallback after the file.
        let path = std::env::var("PATH").unwrap();
        let present = [("FILE_KEY", "sk-from-the-file-0123456789"), ("PATH", path.as_str())];
        agenteval_testkit::conformance::secret_store_suite(store, &present, "AGENTEVAL_NO_SUCH_SECRET_4711").await;
    }
}
