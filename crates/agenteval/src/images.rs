//! `agenteval images build --config FILE [--push REPOSITORY]`: every distinct environment image
//! of a config's tasks, built on the local Docker engine under the tag a run gives it
//! (`agenteval-env:<hash of its folder>`) and, with `--push`, pushed to the repository the fleet
//! runs them from (`aws.image_repository`); with an `installed` agent, each image's agent layer
//! too (built locally, as a run's first task on that image would).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use agenteval_core::Error;
use agenteval_engine::benchmarks::benchmark_from_config;
use serde_json::json;

use crate::cli::RunConfigArgs;
use crate::session::{config_failure, exe, load_config};
use crate::wiring::Wiring;
use crate::{Failure, exit};

/// One image of the config's tasks.
struct Row {
    context: PathBuf,
    tasks: usize,
    tag: String,
    note: String,
    pushed: Option<String>,
    /// The image's agent layer as pushed, for an installed agent.
    layer_pushed: Option<String>,
    error: Option<String>,
}

// Long: the images are built, pushed, layered and printed one after another, in one pass.
pub async fn build(args: &RunConfigArgs, push: Option<&str>, json: bool) -> Result<u8, Failure> {
    let loaded = load_config(&args.config, &args.overrides()).map_err(config_failure)?;
    let config = &loaded.config;
    let benchmark = benchmark_from_config(&config.benchmark)?;
    let mut contexts: BTreeMap<PathBuf, usize> = BTreeMap::new();
    let mut named: BTreeMap<String, usize> = BTreeMap::new();
    // A task of each image, for its agent layer.
    let mut first: BTreeMap<PathBuf, agenteval_core::model::TaskSpec> = BTreeMap::new();
    benchmark
        .for_each_task(config.benchmark.filter(), &mut |t| {
            if let Some(env) = &t.environment {
                if let Some(c) = &env.context {
                    first.entry(c.clone()).or_insert_with(|| t.clone());
                }
                match (&env.context, &env.image) {
                    (Some(c), _) => *contexts.entry(c.clone()).or_default() += 1,
                    (None, Some(i)) => *named.entry(i.clone()).or_default() += 1,
                    (None, None) => {}
                }
                // A compose task's services are built and pushed beside it.
                for c in env.sidecars.iter().filter_map(|s| s.context.as_ref()) {
                    *contexts.entry(c.clone()).or_default() += 1;
                }
            }
            Ok(())
        })
        .await?;
    if contexts.is_empty() && named.is_empty() {
        return Err(Error::invalid(format!(
            "the tasks of {} have no environment images to build",
            args.config.display()
        ))
        .into());
    }
    // A custom setup that needs secrets is left to the run's first task, which has them.
    let layer = agenteval_engine::agents::installed::layer::Layer::of(&config.agent)
        .filter(|l| l.buildable_ahead(config.agent.secrets().len()));
    let wiring = Wiring::new(exe()?, config.aws.as_ref());
    let images = wiring.images(config, push).await?;
    let mut rows = Vec::new();
    let total = contexts.len();
    for (i, (context, tasks)) in contexts.into_iter().enumerate() {
        // A build can take minutes: say which one is under way (stderr; stdout stays the result).
        if !json {
            eprintln!("[{}/{total}] building {}", i + 1, context.display());
        }
        let started = Instant::now();
        let timeout = Duration::from_secs(3600);
        let mut row = Row {
            context: context.clone(),
            tasks,
            tag: String::new(),
            note: String::new(),
            pushed: None,
            layer_pushed: None,
            error: None,
        };
        match images.build(&context, timeout).await {
            // Another folder with the same content: the same image.
            Ok((tag, _)) if rows.iter().any(|r: &Row| r.tag == tag) => {
                if let Some(r) = rows.iter_mut().find(|r| r.tag == tag) {
                    r.tasks += tasks;
                }
                continue;
            }
            Ok((tag, note)) => {
                row.tag = tag;
                row.note = note;
                match images.push(&row.tag).await {
                    Ok(p) => row.pushed = p,
                    Err(e) => row.error = Some(e.to_string()),
                }
                // The installed agent's layer on it, as the run's first task would build it.
                // With --push it goes beside its image, under the name a fleet run gives it.
                if let (Some(layer), Some(task), None) = (&layer, first.get(&context), &row.error) {
                    let built = match images.layer(layer, task).await {
                        Ok((local, note)) => {
                            row.note = format!("{}; {note}", row.note);
                            let names: Vec<&str> = config.agent.secrets().keys().map(String::as_str).collect();
                            match layer.fleet_tag(&row.tag, &names) {
                                Ok(name) => images.push_as(&local, &name).await,
                                Err(e) => Err(e),
                            }
                        }
                        Err(e) => Err(e),
                    };
                    match built {
                        Ok(pushed) => row.layer_pushed = pushed,
                        Err(e) => row.error = Some(e.to_string()),
                    }
                }
            }
            Err(e) => row.error = Some(e.to_string()),
        }
        if !json {
            let what = match (&row.error, &row.pushed) {
                (Some(e), _) => format!("FAILED: {}", e.lines().next().unwrap_or_default()),
                (None, Some(p)) => format!("{}; pushed as {p}", row.note),
                (None, None) => row.note.clone(),
            };
            say!(
                "{:<34} {:>5} task(s)  {what} ({:.1} s)",
                if row.tag.is_empty() { context.display().to_string() } else { row.tag.clone() },
                row.tasks,
                started.elapsed().as_secs_f64()
            );
        }
        rows.push(row);
    }
    let failed = rows.iter().filter(|r| r.error.is_some()).count();
    if json {
        let list: Vec<_> = rows
            .iter()
            .map(|r| json!({"context": r.context, "tasks": r.tasks, "tag": r.tag, "note": r.note, "pushed": r.pushed, "layer_pushed": r.layer_pushed, "error": r.error}))
            .collect();
        let named: Vec<_> = named.iter().map(|(i, n)| json!({"image": i, "tasks": n})).collect();
        say!("{}", json!({"images": list, "named": named, "failed": failed}));
    } else {
        for (image, n) in &named {
            say!("{image:<34} {n:>5} task(s)  named by the tasks: pulled as it is, not built");
        }
        if failed > 0 {
            say!("{failed} image(s) failed; the lines above say why");
        }
    }
    Ok(if failed > 0 { exit::FAILED } else { exit::OK })
}
