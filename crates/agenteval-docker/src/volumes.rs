//! A task's named volumes (compose's top-level `volumes`, shared between its services): made for
//! one task attempt under names of its own, mounted by each container that names them (read-only
//! where it says so) and removed with the task. Never a folder of this machine.

use std::collections::HashMap;

use agenteval_core::environment::{EnvSpec, Volume};
use agenteval_core::{Result, RunId};
use bollard::Docker;
use bollard::models::{Mount, MountType, VolumeCreateRequest};

use crate::{LABEL_MANAGED, infra};

/// On a task attempt's volumes, and on its container: what ties them together.
pub(crate) const LABEL_VOLUMES_OF: &str = "agenteval.volumes-of";

/// The engine's names of one task attempt's named volumes, by the names the task gives them.
#[derive(Debug, Default)]
pub(crate) struct TaskVolumes {
    /// Shared by the attempt's volumes and its container's label; empty when it has none.
    pub token: String,
    names: HashMap<String, String>,
}

impl TaskVolumes {
    /// The mounts of a container that names `volumes`.
    pub fn mounts(&self, volumes: &[Volume]) -> Option<Vec<Mount>> {
        let mounts: Vec<Mount> = volumes
            .iter()
            .map(|v| Mount {
                target: Some(v.target.clone()),
                source: v.name.as_ref().and_then(|n| self.names.get(n)).cloned(),
                typ: Some(MountType::VOLUME),
                read_only: Some(v.read_only),
                ..Default::default()
            })
            .collect();
        (!mounts.is_empty()).then_some(mounts)
    }
}

/// Makes the named volumes the spec's containers mount (none: nothing made).
pub(crate) async fn make(docker: &Docker, run: &RunId, spec: &EnvSpec) -> Result<TaskVolumes> {
    use sha2::{Digest as _, Sha256};
    let mut wanted: Vec<&String> = spec
        .volumes
        .iter()
        .chain(spec.sidecars.iter().flat_map(|s| &s.volumes))
        .filter_map(|v| v.name.as_ref())
        .collect();
    wanted.sort();
    wanted.dedup();
    if wanted.is_empty() {
        return Ok(TaskVolumes::default());
    }
    let seed = format!("{run}-{:?}-{}", std::time::Instant::now(), std::process::id());
    let token = hex::encode(Sha256::digest(seed.as_bytes()))[..16].to_string();
    let mut made = TaskVolumes { token: token.clone(), names: HashMap::new() };
    for name in wanted {
        let engine_name = format!("agenteval-{token}-{name}");
        let request = VolumeCreateRequest {
            name: Some(engine_name.clone()),
            labels: Some(HashMap::from([
                (LABEL_MANAGED.to_string(), "1".to_string()),
                (agenteval_core::environment::LABEL_RUN.to_string(), run.to_string()),
                (LABEL_VOLUMES_OF.to_string(), token.clone()),
            ])),
            ..Default::default()
        };
        if let Err(e) = docker.create_volume(request).await {
            remove(docker, &token).await;
            return Err(infra(&format!("creating the task's volume {name}"), e));
        }
        made.names.insert(name.clone(), engine_name);
    }
    Ok(made)
}

/// Removes the volumes labelled with `filter` (`KEY=VALUE`), once nothing mounts them.
pub(crate) async fn remove_labelled(docker: &Docker, filter: String) {
    let filters = HashMap::from([("label".to_string(), vec![filter])]);
    let options = bollard::query_parameters::ListVolumesOptionsBuilder::default().filters(&filters).build();
    let listed = docker.list_volumes(Some(options)).await.ok().and_then(|l| l.volumes).unwrap_or_default();
    for v in listed {
        let options = bollard::query_parameters::RemoveVolumeOptionsBuilder::default().force(true).build();
        let _ = docker.remove_volume(&v.name, Some(options)).await;
    }
}

/// Removes one task attempt's volumes.
pub(crate) async fn remove(docker: &Docker, token: &str) {
    if !token.is_empty() {
        remove_labelled(docker, format!("{LABEL_VOLUMES_OF}={token}")).await;
    }
}
