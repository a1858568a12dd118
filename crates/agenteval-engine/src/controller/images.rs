//! Tasks in their own images on a fleet that runs each job in one (ECS: `CloudBackend::
//! task_images`): at submit, each task's environment is named by the image the fleet runs
//! (checked in its registry before anything is created) and its tests and solution are packed
//! into the run's bundle, since the workers cannot read this machine's disk.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use agenteval_core::config::RunConfig;
use agenteval_core::environment::EnvSpec;
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::{CloudBackend, Resolver};
use agenteval_core::{Error, Result};

use crate::environments::files::Packed;

/// Whether the run's jobs each run in their tasks' own image.
pub(super) async fn uses_task_images(config: &RunConfig, backend: &dyn CloudBackend) -> Result<bool> {
    Ok(crate::environments::kind_of(config).in_containers() && backend.task_images(&[]).await?.is_some())
}

/// Names each task's image as the fleet runs it and packs its folders; an `Invalid` error (exit
/// 2) names every image the registry lacks, before the run exists.
pub(super) async fn prepare(
    config: &RunConfig,
    resolver: &dyn Resolver,
    backend: &dyn CloudBackend,
    tasks: &mut [TaskSpec],
) -> Result<Packed> {
    // An installed agent's tasks run in their image's agent layer, pushed beside it.
    // (A setup that needs secrets installs in the task's container instead.)
    let layer = crate::agents::installed::layer::Layer::of(&config.agent)
        .filter(|l| l.buildable_ahead(config.agent.secrets().len()));
    let secret_names: Vec<&str> = config.agent.secrets().keys().map(String::as_str).collect();
    let layer_key = match &layer {
        Some(l) => Some(l.key(&secret_names)?),
        None => None,
    };
    let mut by_context: HashMap<PathBuf, String> = HashMap::new();
    let mut local: Vec<Option<String>> = Vec::with_capacity(tasks.len());
    for t in tasks.iter() {
        let Some(spec) = &t.environment else {
            local.push(None);
            continue;
        };
        let tag = match (&spec.image, &spec.context) {
            (Some(image), _) => image.clone(),
            (None, Some(ctx)) => match by_context.get(ctx) {
                Some(tag) => tag.clone(),
                None => {
                    let mut tag = resolver.task_image(spec, &config.environment)?;
                    if let Some(layer) = &layer {
                        tag = layer.fleet_tag(&tag, &secret_names)?;
                    }
                    by_context.insert(ctx.clone(), tag.clone());
                    tag
                }
            },
            (None, None) => {
                return Err(Error::invalid(format!("task {} names no image and no folder to build one from", t.id)));
            }
        };
        local.push(Some(tag));
    }
    // A compose task's services run from their own images, built and pushed beside it.
    let mut services: HashMap<PathBuf, String> = HashMap::new();
    for s in tasks.iter().filter_map(|t| t.environment.as_ref()).flat_map(|e| &e.sidecars) {
        if let Some(ctx) = s.context.as_ref().filter(|c| !services.contains_key(*c)) {
            let spec = EnvSpec { context: Some(ctx.clone()), ..EnvSpec::default() };
            services.insert(ctx.clone(), resolver.task_image(&spec, &config.environment)?);
        }
    }
    let distinct: Vec<String> =
        local.iter().flatten().chain(services.values()).cloned().collect::<BTreeSet<_>>().into_iter().collect();
    let fleet: BTreeMap<String, String> = backend.task_images(&distinct).await?.unwrap_or_default();
    let mut packed = Packed::default();
    for (t, tag) in tasks.iter_mut().zip(local) {
        let (Some(spec), Some(tag)) = (&mut t.environment, tag) else { continue };
        let pinned = fleet.get(&tag).ok_or_else(|| Error::internal(format!("the backend did not name image {tag}")))?;
        spec.image = Some(pinned.clone());
        if spec.context.is_some() {
            spec.agent_layer = layer_key.clone();
        }
        // Built already: the fleet runs the image, not the folder.
        spec.context = None;
        for s in &mut spec.sidecars {
            if let Some(ctx) = s.context.take() {
                let tag = &services[&ctx];
                let pinned =
                    fleet.get(tag).ok_or_else(|| Error::internal(format!("the backend did not name image {tag}")))?;
                s.image = Some(pinned.clone());
            }
        }
        packed.pack(t)?;
    }
    Ok(packed)
}
