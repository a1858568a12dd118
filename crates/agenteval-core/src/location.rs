//! Where bundles and the run index live: typed locations parsed once from the strings users
//! write (`runs`, `s3://bucket/prefix`, `runs/index.sqlite`, `dynamodb://table`).
//!
//! Both types serialize as those same strings, so configs, job specs and bundles keep their
//! format; code branches on the variant instead of on string prefixes.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Error, Result, RunId};

/// Where `<run_id>/` bundles are written: a local folder or an S3 prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BundleRoot {
    Local(PathBuf),
    S3 { bucket: String, prefix: String },
}

/// Where the run index is: a SQLite file or a DynamoDB table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IndexLocation {
    Sqlite(PathBuf),
    DynamoDb { table: String },
}

fn scheme_error(s: &str, what: &str, expected: &str) -> Error {
    Error::invalid(format!("`{s}` is not a {what} location (use {expected})"))
}

impl FromStr for BundleRoot {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        if let Some(rest) = s.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(Error::invalid(format!("`{s}` names no bucket")));
            }
            return Ok(BundleRoot::S3 { bucket: bucket.to_string(), prefix: prefix.trim_matches('/').to_string() });
        }
        if s.contains("://") {
            return Err(scheme_error(s, "bundle", "a folder or s3://bucket/prefix"));
        }
        if s.is_empty() {
            return Err(Error::invalid("the bundle root is empty"));
        }
        Ok(BundleRoot::Local(PathBuf::from(s)))
    }
}

impl fmt::Display for BundleRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BundleRoot::Local(p) => write!(f, "{}", p.display()),
            BundleRoot::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            BundleRoot::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

impl BundleRoot {
    pub fn is_local(&self) -> bool {
        matches!(self, BundleRoot::Local(_))
    }

    /// The folder of a local root.
    pub fn local_path(&self) -> Option<&Path> {
        match self {
            BundleRoot::Local(p) => Some(p),
            BundleRoot::S3 { .. } => None,
        }
    }

    /// Splits a bundle location (`/path/runs/<run_id>` or `s3://bucket/prefix/<run_id>`) into
    /// its root and run id.
    pub fn split_bundle_uri(uri: &str) -> Result<(BundleRoot, RunId)> {
        let trimmed = uri.trim_end_matches('/');
        let (root, last) =
            trimmed.rsplit_once('/').ok_or_else(|| Error::invalid(format!("`{uri}` is not a bundle location")))?;
        let run = RunId::from_str(last)
            .map_err(|_| Error::invalid(format!("`{uri}` does not end in a run id (…/runs/<run_id>)")))?;
        let root = if root.is_empty() { "/" } else { root };
        if root == "s3:/" {
            return Err(Error::invalid(format!("`{uri}` names no bucket")));
        }
        Ok((root.parse()?, run))
    }
}

impl FromStr for IndexLocation {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        if let Some(table) = s.strip_prefix("dynamodb://") {
            if table.is_empty() || table.contains('/') {
                return Err(Error::invalid(format!("`{s}` is not a dynamodb://table location")));
            }
            return Ok(IndexLocation::DynamoDb { table: table.to_string() });
        }
        if s.contains("://") {
            return Err(scheme_error(s, "run index", "a SQLite file or dynamodb://table"));
        }
        if s.is_empty() {
            return Err(Error::invalid("the index location is empty"));
        }
        Ok(IndexLocation::Sqlite(PathBuf::from(s)))
    }
}

impl fmt::Display for IndexLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexLocation::Sqlite(p) => write!(f, "{}", p.display()),
            IndexLocation::DynamoDb { table } => write!(f, "dynamodb://{table}"),
        }
    }
}

impl IndexLocation {
    pub fn is_local(&self) -> bool {
        matches!(self, IndexLocation::Sqlite(_))
    }
}

macro_rules! string_serde {
    ($t:ty, $format:literal, $desc:literal) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(|e: Error| serde::de::Error::custom(e))
            }
        }

        impl schemars::JsonSchema for $t {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($t).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                // The format is checked when a config loads (`config::load`), so a bad location is
                // reported with every other problem, at its position.
                schemars::json_schema!({ "type": "string", "format": $format, "description": $desc })
            }
        }
    };
}

string_serde!(BundleRoot, "bundle-root", "A folder, or s3://bucket/prefix.");
string_serde!(IndexLocation, "index-location", "A SQLite file, or dynamodb://table.");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_parse_and_print_as_written() {
        for s in ["runs", "/abs/runs", "s3://b", "s3://b/team/runs"] {
            assert_eq!(s.parse::<BundleRoot>().unwrap().to_string(), s);
        }
        assert_eq!(
            "s3://b/p/".parse::<BundleRoot>().unwrap(),
            BundleRoot::S3 { bucket: "b".into(), prefix: "p".into() }
        );
        assert!("s3:///x".parse::<BundleRoot>().is_err());
        assert!("gs://b/x".parse::<BundleRoot>().unwrap_err().to_string().contains("s3://bucket/prefix"));
        for s in ["runs/index.sqlite", "dynamodb://t"] {
            assert_eq!(s.parse::<IndexLocation>().unwrap().to_string(), s);
        }
        assert!("dynamodb://".parse::<IndexLocation>().is_err());
        assert!("dynamodb://a/b".parse::<IndexLocation>().is_err());
        assert!("postgres://x".parse::<IndexLocation>().is_err());
    }

    #[test]
    fn bundle_uris_split_into_root_and_run() {
        let run = RunId::new();
        for root in ["/tmp/runs", "s3://b/team/runs", "s3://b"] {
            let r: BundleRoot = root.parse().unwrap();
            let uri = format!("{root}/{run}");
            assert_eq!(BundleRoot::split_bundle_uri(&uri).unwrap(), (r, run), "{uri}");
        }
        assert!(BundleRoot::split_bundle_uri("/tmp/runs/notarun").is_err());
        assert_eq!(BundleRoot::split_bundle_uri(&format!("/{run}")).unwrap().0, BundleRoot::Local("/".into()));
    }
}
