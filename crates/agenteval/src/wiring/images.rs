//! The image side of the wiring: building a task's image on the local Docker engine, pushing it
//! to the fleet's repository (ECR or a v2 registry) and reading its digest there, for
//! `agenteval images build`.

use std::path::Path;
use std::time::Duration;

use agenteval_aws::{AwsSettings, ImageRepository};
use agenteval_core::Result;
use agenteval_core::config::RunConfig;

use super::Wiring;

/// Builds and pushes the images of one config's tasks.
pub struct Images {
    docker: std::sync::Arc<agenteval_docker::DockerEnvironment>,
    repository: Option<ImageRepository>,
    clients: Option<std::sync::Arc<agenteval_aws::AwsClients>>,
}

impl Wiring {
    /// What `images build` works with: the config's base image, and `push` as a repository.
    pub async fn images(&self, config: &RunConfig, push: Option<&str>) -> Result<Images> {
        let repository = push.map(ImageRepository::parse).transpose()?;
        let clients = match &repository {
            Some(_) => Some(self.clients.get(&AwsSettings::of(config.aws.as_ref())).await),
            None => None,
        };
        Ok(Images {
            docker: std::sync::Arc::new(agenteval_docker::DockerEnvironment::new(
                config.environment.base_image.clone(),
            )),
            repository,
            clients,
        })
    }
}

impl Images {
    /// The task image's tag, built unless the engine has it, and what was done.
    pub async fn build(&self, context: &Path, timeout: Duration) -> Result<(String, String)> {
        self.docker.build_image(context, timeout).await
    }

    /// The agent layer of `task` (its image plus the config's installed agent), built unless
    /// the engine has it: its tag and what was done.
    pub async fn layer(
        &self,
        layer: &agenteval_engine::agents::installed::layer::Layer,
        task: &agenteval_core::model::TaskSpec,
    ) -> Result<(String, String)> {
        let env: std::sync::Arc<dyn agenteval_core::traits::Environment> = self.docker.clone();
        let spec = task.environment.clone().unwrap_or_default();
        let ready =
            layer.ensure(&env, &agenteval_core::RunId::new(), task, 0, &spec, &[]).await.map_err(|e| e.error)?;
        Ok((ready.image, ready.note))
    }

    /// Pushes a built image as the repository's (`None` without `--push`, or for an image the
    /// task names itself); the reference pushed, pinned by its digest when the registry says it.
    pub async fn push(&self, local: &str) -> Result<Option<String>> {
        self.push_as(local, local).await
    }

    /// Pushes the image `local` under the repository's name for `name` (an agent layer under
    /// its fleet name, `agenteval-env:<hash>-agent-<key>`).
    pub async fn push_as(&self, local: &str, name: &str) -> Result<Option<String>> {
        let (Some(repo), Some(clients)) = (&self.repository, &self.clients) else { return Ok(None) };
        let Some(reference) = repo.reference(name) else { return Ok(None) };
        let creds = repo.push_credentials(clients).await?;
        self.docker.push(local, &reference, creds).await?;
        Ok(Some(match repo.digest(clients, &reference).await? {
            Some(d) if !d.is_empty() => format!("{}@{d}", repo.uri),
            _ => reference,
        }))
    }
}
