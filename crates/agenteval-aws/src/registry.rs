//! Where the tasks' images live for the fleet (`aws.image_repository`): an ECR repository
//! (`<account>.dkr.ecr.<region>.amazonaws.com/<name>`, read through the ECR API) or any
//! registry speaking the Docker Registry HTTP API v2 (`host[:port]/<name>`, read anonymously;
//! plain HTTP for a registry on this machine). A task whose image was built locally as
//! `agenteval-env:<tag>` runs on the fleet as `<repository>:<tag>`, pinned by digest.

use agenteval_core::{Error, ErrorKind, Result};

use crate::sdk::{AwsClients, classify};

/// The local build's name of a task image; its tag is kept in the repository.
pub const LOCAL_NAME: &str = "agenteval-env";

/// A repository of task images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRepository {
    /// As configured: `host/name`.
    pub uri: String,
    pub host: String,
    pub name: String,
    /// The ECR registry (account) id when the host is ECR's.
    pub ecr_registry: Option<String>,
}

impl ImageRepository {
    pub fn parse(uri: &str) -> Result<Self> {
        let uri = uri.trim().trim_end_matches('/');
        let (host, name) = uri.split_once('/').ok_or_else(|| {
            Error::invalid(format!("image repository `{uri}` is not HOST/NAME (e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/agenteval-envs)"))
        })?;
        let bad = |why: &str| Error::invalid(format!("image repository `{uri}`: {why}"));
        if host.is_empty() || !(host.contains('.') || host.contains(':') || host == "localhost") {
            return Err(bad("its first part must be a registry host"));
        }
        if name.is_empty() || name.contains(':') || name.contains('@') {
            return Err(bad("give the repository without a tag or digest"));
        }
        let labels: Vec<&str> = host.split('.').collect();
        let ecr_registry = (labels.len() >= 6
            && labels[1] == "dkr"
            && labels[2] == "ecr"
            && labels[0].len() == 12
            && labels[0].bytes().all(|b| b.is_ascii_digit()))
        .then(|| labels[0].to_string());
        Ok(ImageRepository { uri: uri.to_string(), host: host.to_string(), name: name.to_string(), ecr_registry })
    }

    /// The repository's name for a task image: `agenteval-env:<tag>` becomes
    /// `<repository>:<tag>`; `None` for an image the task names itself (run as it is).
    pub fn reference(&self, local: &str) -> Option<String> {
        let tag = local.strip_prefix(LOCAL_NAME)?.strip_prefix(':')?;
        Some(format!("{}:{tag}", self.uri))
    }

    fn tag_of(reference: &str) -> &str {
        reference.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest")
    }

    /// The digest of `reference` (one of [`Self::reference`]) in the repository; `None` when the
    /// repository does not hold it.
    pub async fn digest(&self, clients: &AwsClients, reference: &str) -> Result<Option<String>> {
        let tag = Self::tag_of(reference);
        match &self.ecr_registry {
            Some(registry) => {
                let out = clients
                    .ecr
                    .describe_images()
                    .registry_id(registry)
                    .repository_name(&self.name)
                    .image_ids(aws_sdk_ecr::types::ImageIdentifier::builder().image_tag(tag).build())
                    .send()
                    .await;
                match out {
                    Ok(o) => Ok(o.image_details().first().and_then(|d| d.image_digest()).map(str::to_string)),
                    Err(e) => {
                        if e.as_service_error().is_some_and(|s| s.is_image_not_found_exception()) {
                            Ok(None)
                        } else {
                            Err(classify(&format!("looking up {reference} in ECR"), e))
                        }
                    }
                }
            }
            None => self.v2_digest(tag).await,
        }
    }

    async fn v2_digest(&self, tag: &str) -> Result<Option<String>> {
        let local = self.host.starts_with("localhost") || self.host.starts_with("127.");
        let url = format!("{}://{}/v2/{}/manifests/{tag}", if local { "http" } else { "https" }, self.host, self.name);
        let accept = [
            "application/vnd.docker.distribution.manifest.v2+json",
            "application/vnd.docker.distribution.manifest.list.v2+json",
            "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.oci.image.index.v1+json",
        ]
        .join(", ");
        let resp = reqwest::Client::new()
            .head(&url)
            .header("Accept", accept)
            .timeout(std::time::Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| Error::new(ErrorKind::Transient, format!("cannot reach the registry {}: {e}", self.host)))?;
        match resp.status().as_u16() {
            200 => Ok(resp
                .headers()
                .get("Docker-Content-Digest")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .or_else(|| Some(String::new()))),
            404 => Ok(None),
            401 | 403 => Err(Error::new(
                ErrorKind::Unauthorized,
                format!("the registry {} refuses anonymous reads of {}: use an ECR repository", self.host, self.name),
            )),
            s => {
                Err(Error::new(ErrorKind::Transient, format!("the registry {} answered HTTP {s} for {url}", self.host)))
            }
        }
    }

    /// A user name and password for pushing to the repository (ECR's from its API, valid 12
    /// hours); `None` for a registry taken anonymously.
    pub async fn push_credentials(&self, clients: &AwsClients) -> Result<Option<(String, String)>> {
        if self.ecr_registry.is_none() {
            return Ok(None);
        }
        let out = clients
            .ecr
            .get_authorization_token()
            .send()
            .await
            .map_err(|e| classify("getting a token to push to ECR", e))?;
        let token = out
            .authorization_data()
            .first()
            .and_then(|d| d.authorization_token())
            .ok_or_else(|| Error::new(ErrorKind::Unauthorized, "ECR gave no authorization token"))?;
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(token)
            .map_err(|_| Error::new(ErrorKind::Unauthorized, "ECR's authorization token is not base64"))?;
        let text =
            String::from_utf8(decoded).map_err(|_| Error::new(ErrorKind::Unauthorized, "ECR's token is not text"))?;
        let (user, pass) = text
            .split_once(':')
            .ok_or_else(|| Error::new(ErrorKind::Unauthorized, "ECR's token is not USER:PASSWORD"))?;
        Ok(Some((user.to_string(), pass.to_string())))
    }

    /// Whether the repository exists and how it is set (doctor): ECR's scan-on-push and
    /// lifecycle policy, or that a v2 registry answers.
    pub async fn check(&self, clients: &AwsClients) -> Result<String> {
        match &self.ecr_registry {
            Some(registry) => {
                let out = clients
                    .ecr
                    .describe_repositories()
                    .registry_id(registry)
                    .repository_names(&self.name)
                    .send()
                    .await
                    .map_err(|e| classify(&format!("ECR repository {}", self.name), e))?;
                let repo = out
                    .repositories()
                    .first()
                    .ok_or_else(|| Error::not_found(format!("no ECR repository {}", self.name)))?;
                let scan = repo.image_scanning_configuration().map(|c| c.scan_on_push()).unwrap_or(false);
                let lifecycle = clients
                    .ecr
                    .get_lifecycle_policy()
                    .registry_id(registry)
                    .repository_name(&self.name)
                    .send()
                    .await
                    .is_ok();
                Ok(format!(
                    "ECR {} (scan on push {}, lifecycle policy {})",
                    self.name,
                    if scan { "on" } else { "off" },
                    if lifecycle { "set" } else { "none: old images are never removed" }
                ))
            }
            None => self.v2_digest("agenteval-doctor-probe").await.map(|_| format!("registry {} answers", self.host)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_are_read_as_ecr_or_a_registry() {
        let r = ImageRepository::parse("123456789012.dkr.ecr.us-east-1.amazonaws.com/agenteval-envs").unwrap();
        assert_eq!(r.ecr_registry.as_deref(), Some("123456789012"));
        assert_eq!(r.name, "agenteval-envs");
        assert_eq!(
            r.reference("agenteval-env:0123456789abcdef").unwrap(),
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/agenteval-envs:0123456789abcdef"
        );
        assert_eq!(r.reference("python:3.12"), None, "an image the task names runs as it is");
        let local = ImageRepository::parse("127.0.0.1:5000/envs").unwrap();
        assert_eq!((local.host.as_str(), local.ecr_registry.clone()), ("127.0.0.1:5000", None));
        for bad in ["envs", "registry.example/envs:1", "/envs"] {
            assert!(ImageRepository::parse(bad).is_err(), "{bad}");
        }
    }
}
