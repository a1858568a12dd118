//! OpenTelemetry setup, owned by the binary: the `tracing` subscriber (terminal logs carrying
//! trace and span ids, plus the OpenTelemetry bridge), the span journal that fills the bundle's
//! `spans.jsonl` files, and the OTLP exporters (gRPC or HTTP/protobuf) when an endpoint is
//! configured. Export never harms a run: bounded queues and timeouts, one warning per process.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use agenteval_core::config::{OtlpProtocol, TelemetryConfig};
use agenteval_engine::telemetry::SpanJournal;
use opentelemetry::trace::{Span as _, SpanId, Status, TraceContextExt as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_otlp::{RetryPolicy, WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer as _, Registry};

/// Defaults chosen so that a dead or slow collector costs a run seconds, not minutes.
const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_METRICS_INTERVAL: Duration = Duration::from_secs(10);
const WORKER_EXIT_FLUSH: Duration = Duration::from_secs(2);
/// Spans waiting for export; beyond this they are dropped (the bundle keeps them all). The SDK
/// allocates the whole queue up front: 8,192 slots cost a one-job worker 2 ms of page faults,
/// more than its export. An export starts whenever a batch (512) is ready, so four batches of
/// slack suffice.
const MAX_QUEUE: usize = 2048;

/// The crates whose spans become OpenTelemetry spans (dependencies' spans stay out, so an
/// exporter's own HTTP client can never feed spans back into the exporter).
const OWN_CRATES: &[&str] = &[
    "agenteval",
    "agenteval_engine",
    "agenteval_local",
    "agenteval_aws",
    "agenteval_core",
    "agenteval_judge",
    "agenteval_llm",
    "agenteval_ui",
];

/// Where and how to export, resolved from the standard `OTEL_*` variables and the run config.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `None`: nothing leaves the process.
    pub endpoint: Option<String>,
    pub protocol: OtlpProtocol,
    pub service_name: String,
    pub resource_attributes: BTreeMap<String, String>,
    pub timeout: Duration,
    pub metrics_interval: Duration,
    /// The endpoint workers get (`telemetry.worker_endpoint`, else `endpoint`).
    pub worker_endpoint: Option<String>,
    pub disabled: bool,
    /// An `OTEL_EXPORTER_OTLP_PROTOCOL` this tool does not speak, said once as a warning.
    pub protocol_note: Option<String>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

impl Settings {
    /// Resolves settings: every field the config sets wins over its environment variable.
    pub fn resolve(config: Option<&TelemetryConfig>) -> Settings {
        Self::resolve_from(config, &|name| std::env::var(name).ok())
    }

    /// [`Settings::resolve`] over any environment (`var` answers a variable's value).
    fn resolve_from(config: Option<&TelemetryConfig>, var: &dyn Fn(&str) -> Option<String>) -> Settings {
        let env = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let env_millis = |name: &str| env(name).and_then(|v| v.parse::<u64>().ok()).map(Duration::from_millis);
        let default = TelemetryConfig::default();
        let c = config.unwrap_or(&default);
        let disabled =
            c.disabled.unwrap_or_else(|| env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")));
        let endpoint = c
            .endpoint
            .clone()
            .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").map(|e| strip_signal_path(&e)))
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"));
        let from_env = env("OTEL_EXPORTER_OTLP_PROTOCOL");
        let protocol = c
            .protocol
            .or_else(|| from_env.as_deref().and_then(OtlpProtocol::parse))
            .unwrap_or(OtlpProtocol::HttpProtobuf);
        // The spec asks for unknown values to be reported, not silently replaced.
        let protocol_note = match (&c.protocol, &from_env) {
            (None, Some(p)) if OtlpProtocol::parse(p).is_none() => Some(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={p} is not one this tool speaks (grpc, http/protobuf); using http/protobuf"
            )),
            _ => None,
        };
        let timeout = c
            .export_timeout_seconds
            .map(Duration::from_secs_f64)
            .or_else(|| env_millis("OTEL_EXPORTER_OTLP_TIMEOUT"))
            .unwrap_or(DEFAULT_EXPORT_TIMEOUT);
        let metrics_interval = c
            .metrics_interval_seconds
            .map(Duration::from_secs_f64)
            .or_else(|| env_millis("OTEL_METRIC_EXPORT_INTERVAL"))
            .unwrap_or(DEFAULT_METRICS_INTERVAL);
        Settings {
            protocol_note,
            worker_endpoint: c.worker_endpoint.clone().or_else(|| endpoint.clone()),
            endpoint: if disabled { None } else { endpoint },
            protocol,
            service_name: c
                .service_name
                .clone()
                .or_else(|| env("OTEL_SERVICE_NAME"))
                .unwrap_or_else(|| "agenteval".into()),
            resource_attributes: c.resource_attributes.clone(),
            timeout,
            metrics_interval,
            disabled,
        }
    }

    /// The environment a worker needs to export to the same place (merged over the worker's
    /// own environment by the backend). Headers are deliberately not forwarded: they often hold
    /// API keys, and job specs are stored in the bundle.
    pub fn worker_env(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        if self.disabled {
            env.insert("OTEL_SDK_DISABLED".into(), "true".into());
            return env;
        }
        let Some(endpoint) = &self.worker_endpoint else { return env };
        env.insert("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.clone());
        env.insert("OTEL_EXPORTER_OTLP_PROTOCOL".into(), self.protocol.as_str().into());
        env.insert("OTEL_EXPORTER_OTLP_TIMEOUT".into(), self.timeout.as_millis().to_string());
        env.insert("OTEL_SERVICE_NAME".into(), self.service_name.clone());
        let mut attrs: Vec<String> = env_resource_attributes();
        attrs.extend(self.resource_attributes.iter().map(|(k, v)| format!("{k}={v}")));
        if !attrs.is_empty() {
            env.insert("OTEL_RESOURCE_ATTRIBUTES".into(), attrs.join(","));
        }
        env
    }
}

fn env_resource_attributes() -> Vec<String> {
    env("OTEL_RESOURCE_ATTRIBUTES").map(|v| v.split(',').map(str::to_string).collect()).unwrap_or_default()
}

/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` names the full URL; the settings hold the base.
fn strip_signal_path(e: &str) -> String {
    e.strip_suffix("/v1/traces").unwrap_or(e).to_string()
}

/// Which process this is; a resource attribute, and it decides what is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Controller,
    Worker,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Controller => "controller",
            Role::Worker => "worker",
        }
    }
}

/// The telemetry of this process: installed once at start, connected to an exporter when the
/// settings are known, shut down (bounded) before exit.
#[derive(Clone)]
pub struct Telemetry {
    tracer_provider: SdkTracerProvider,
    journal: Arc<Journal>,
    export: Arc<OnceLock<BatchSpanProcessor>>,
    meter_provider: Arc<Mutex<Option<SdkMeterProvider>>>,
    health: Arc<Health>,
    /// How long the exit flush may wait.
    exit_flush: Arc<Mutex<Duration>>,
}

/// What this process knows about its collector: whether it warned already, and whether the
/// last export got through.
#[derive(Debug)]
struct Health {
    warned: AtomicBool,
    reachable: AtomicBool,
}

impl Telemetry {
    /// Installs the global `tracing` subscriber: terminal logs filtered by `RUST_LOG` or
    /// `default_filter`, and every span of agenteval's crates into OpenTelemetry.
    pub fn install(default_filter: &str, ansi: bool) -> Telemetry {
        let journal = Arc::new(Journal::default());
        let export: Arc<OnceLock<BatchSpanProcessor>> = Arc::default();
        let tracer_provider = SdkTracerProvider::builder()
            .with_sampler(Sampler::AlwaysOn)
            .with_span_processor(JournalProcessor(journal.clone()))
            .with_span_processor(Deferred(export.clone()))
            .build();
        let tracer = tracer_provider.tracer("agenteval");
        opentelemetry::global::set_tracer_provider(tracer_provider.clone());
        let log_filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
        let span_filter = OWN_CRATES.iter().fold(Targets::new(), |t, c| t.with_target(*c, LevelFilter::INFO));
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(|| LogTee)
            .with_ansi(ansi)
            .with_target(false)
            .event_format(WithTraceIds(Short { ansi }))
            .with_filter(log_filter);
        let otel = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false)
            .with_tracked_inactivity(false)
            .with_filter(span_filter);
        let _ = Registry::default().with(fmt).with(otel).try_init();
        Telemetry {
            tracer_provider,
            journal,
            export,
            meter_provider: Arc::new(Mutex::new(None)),
            health: Arc::new(Health { warned: AtomicBool::new(false), reachable: AtomicBool::new(true) }),
            exit_flush: Arc::new(Mutex::new(DEFAULT_EXPORT_TIMEOUT)),
        }
    }

    /// The span journal, for the engine to write `spans.jsonl`.
    pub fn journal(&self) -> Arc<dyn SpanJournal> {
        self.journal.clone()
    }

    /// The environment for workers: `settings`' while this controller's own exports get
    /// through; `OTEL_SDK_DISABLED=true` while they fail, so that a dead or silent collector
    /// costs the workers launched from then on nothing (each would wait up to the export timeout
    /// at exit). Their spans are in the bundle either way.
    pub fn worker_env(&self, settings: &Settings) -> agenteval_engine::controller::WorkerEnv {
        let env = settings.worker_env();
        let off: BTreeMap<String, String> = [("OTEL_SDK_DISABLED".to_string(), "true".to_string())].into();
        let health = self.health.clone();
        Arc::new(move || if health.reachable.load(Ordering::Relaxed) { env.clone() } else { off.clone() })
    }

    /// Whether the collector `settings` name answers at all, within one export timeout: a TCP
    /// connection and a first request (HTTP: an empty trace export; gRPC: the HTTP/2 preface)
    /// that gets any reply. One that refuses, or accepts and stays silent, is reported once and
    /// marked unreachable, so that workers are not told to export to it and exits do not wait
    /// for it. `https://` endpoints and settings without an endpoint are not probed.
    pub async fn collector_answers(&self, settings: &Settings) -> bool {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let Some(endpoint) = &settings.endpoint else { return true };
        let Some(rest) = endpoint.strip_prefix("http://") else { return true };
        let authority = rest.split('/').next().unwrap_or("").to_string();
        let addr = if authority.contains(':') { authority.clone() } else { format!("{authority}:80") };
        let hello: Vec<u8> = match settings.protocol {
            // The client preface and an empty SETTINGS frame; a server answers with its own.
            OtlpProtocol::Grpc => b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00".to_vec(),
            OtlpProtocol::HttpProtobuf => format!(
                "POST /v1/traces HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .into_bytes(),
        };
        let attempt = async {
            let mut s = tokio::net::TcpStream::connect(&addr).await.map_err(|e| e.to_string())?;
            s.write_all(&hello).await.map_err(|e| e.to_string())?;
            let mut first = [0u8; 1];
            match s.read(&mut first).await {
                Ok(0) => Err("it closed the connection without answering".to_string()),
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        };
        let answer = match tokio::time::timeout(settings.timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {:.1}s", settings.timeout.as_secs_f64())),
        };
        match answer {
            Ok(()) => true,
            Err(why) => {
                self.health.reachable.store(false, Ordering::Relaxed);
                if !self.health.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "telemetry export to {endpoint} is off for this run: {why} (spans stay in the bundle)"
                    );
                }
                false
            }
        }
    }

    /// Connects the controller's export when its collector answers: at once if it does, else
    /// from a background task that asks again every few seconds, so a collector that comes back
    /// gets the rest of the run (and workers export again) while a dead or silent one costs
    /// nothing after the first probe.
    pub async fn connect_controller(&self, settings: &Settings) {
        if self.collector_answers(settings).await {
            self.connect(settings, Role::Controller);
            return;
        }
        let (me, settings) = (self.clone(), settings.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(3)).await;
                if me.collector_answers(&settings).await {
                    me.health.reachable.store(true, Ordering::Relaxed);
                    me.connect(&settings, Role::Controller);
                    return;
                }
            }
        });
    }

    /// Starts exporting spans (and, for the controller, metrics) as `settings` say. Call once,
    /// inside the Tokio runtime (the gRPC channel lives on it).
    pub fn connect(&self, settings: &Settings, role: Role) {
        // A worker's spans are already in the bundle; its exit waits for a slow collector at
        // most WORKER_EXIT_FLUSH, since every job of the fleet pays that wait.
        *self.exit_flush.lock().expect("exit flush lock") = match role {
            Role::Controller => settings.timeout,
            Role::Worker => settings.timeout.min(WORKER_EXIT_FLUSH),
        };
        let Some(endpoint) = &settings.endpoint else { return };
        tracing::info!(
            "transport: telemetry goes to {} over {} ({:?})",
            agenteval_core::config::host_in(endpoint),
            agenteval_core::config::posture(endpoint),
            settings.protocol
        );
        if let Some(note) = &settings.protocol_note {
            tracing::warn!("{note}");
        }
        let mut attrs = vec![
            KeyValue::new("agenteval.role", role.as_str()),
            KeyValue::new("service.instance.id", uuid::Uuid::now_v7().to_string()),
            KeyValue::new("process.pid", std::process::id() as i64),
            KeyValue::new("service.version", agenteval_engine::VERSION),
        ];
        attrs.extend(settings.resource_attributes.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())));
        let resource =
            Resource::builder().with_service_name(settings.service_name.clone()).with_attributes(attrs).build();
        match span_exporter(endpoint, settings, retry_policy(role)) {
            Ok(mut exporter) => {
                exporter.set_resource(&resource);
                let exporter = WarnOnce { inner: exporter, health: self.health.clone(), endpoint: endpoint.clone() };
                let config = BatchConfigBuilder::default()
                    .with_max_queue_size(MAX_QUEUE)
                    .with_scheduled_delay(Duration::from_millis(500))
                    .build();
                let _ = self.export.set(BatchSpanProcessor::builder(exporter).with_batch_config(config).build());
            }
            Err(e) => self.warn(endpoint, &e),
        }
        if role != Role::Controller {
            return;
        }
        match metric_exporter(endpoint, settings, retry_policy(role)) {
            Ok(exporter) => {
                let exporter = WarnOnce { inner: exporter, health: self.health.clone(), endpoint: endpoint.clone() };
                let reader = PeriodicReader::builder(exporter).with_interval(settings.metrics_interval).build();
                let provider = SdkMeterProvider::builder().with_resource(resource).with_reader(reader).build();
                opentelemetry::global::set_meter_provider(provider.clone());
                *self.meter_provider.lock().expect("meter lock") = Some(provider);
            }
            Err(e) => self.warn(endpoint, &e),
        }
    }

    fn warn(&self, endpoint: &str, e: &dyn fmt::Display) {
        if !self.health.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!("telemetry export to {endpoint} is off: {e}");
        }
    }

    /// Flushes and stops export, spans and metrics in parallel, each waiting at most the exit
    /// flush budget. The blocking SDK calls run off the runtime's threads, which the gRPC channel
    /// needs to make progress.
    pub async fn shutdown(self) {
        let mut timeout = *self.exit_flush.lock().expect("exit flush lock");
        if !self.health.reachable.load(Ordering::Relaxed) {
            // The last export failed already: waiting the full timeout for this one to fail
            // too would only delay the exit.
            timeout = timeout.min(Duration::from_millis(200));
        }
        let tracer = self.tracer_provider.clone();
        let meters = self.meter_provider.lock().expect("meter lock").take();
        if self.export.get().is_none() && meters.is_none() {
            // Nothing leaves the process (no collector): ending the journal's processor is
            // immediate, and starting blocking threads for it was a measurable share of a
            // one-task worker's life.
            let _ = tracer.shutdown_with_timeout(timeout);
            return;
        }
        let spans = tokio::task::spawn_blocking(move || tracer.shutdown_with_timeout(timeout));
        let metrics = tokio::task::spawn_blocking(move || meters.map(|m| m.shutdown_with_timeout(timeout)));
        let bound = timeout + Duration::from_secs(1);
        let _ = tokio::time::timeout(bound, async {
            let _ = spans.await;
            let _ = metrics.await;
        })
        .await;
    }
}

/// A worker lives for one job and exports mostly once, at exit: retrying a dead collector
/// there only delays the fleet (the bundle has every span anyway). The controller lives for the
/// run and exports in the background, where a short retry rides out a collector restart.
fn retry_policy(role: Role) -> RetryPolicy {
    match role {
        Role::Controller => RetryPolicy::recommended().with_max_retries(2),
        Role::Worker => RetryPolicy::disabled(),
    }
}

fn span_exporter(endpoint: &str, s: &Settings, retry: RetryPolicy) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let b = opentelemetry_otlp::SpanExporter::builder();
    match s.protocol {
        OtlpProtocol::Grpc => {
            b.with_tonic().with_endpoint(endpoint).with_timeout(s.timeout).with_retry_policy(retry).build()
        }
        OtlpProtocol::HttpProtobuf => b
            .with_http()
            .with_endpoint(signal_url(endpoint, "traces"))
            .with_timeout(s.timeout)
            .with_retry_policy(retry)
            .build(),
    }
    .map_err(|e| e.to_string())
}

fn metric_exporter(
    endpoint: &str,
    s: &Settings,
    retry: RetryPolicy,
) -> Result<opentelemetry_otlp::MetricExporter, String> {
    let b = opentelemetry_otlp::MetricExporter::builder().with_temporality(Temporality::Cumulative);
    match s.protocol {
        OtlpProtocol::Grpc => {
            b.with_tonic().with_endpoint(endpoint).with_timeout(s.timeout).with_retry_policy(retry).build()
        }
        OtlpProtocol::HttpProtobuf => b
            .with_http()
            .with_endpoint(signal_url(endpoint, "metrics"))
            .with_timeout(s.timeout)
            .with_retry_policy(retry)
            .build(),
    }
    .map_err(|e| e.to_string())
}

/// The OTLP/HTTP URL of one signal under a base endpoint (as the specification builds it from
/// `OTEL_EXPORTER_OTLP_ENDPOINT`).
fn signal_url(base: &str, signal: &str) -> String {
    format!("{}/v1/{signal}", base.trim_end_matches('/'))
}

/// Wraps an exporter: the first failure in this process becomes one warning; later ones are
/// silent (the bundle has every span regardless).
#[derive(Debug)]
struct WarnOnce<E> {
    inner: E,
    health: Arc<Health>,
    endpoint: String,
}

impl<E> WarnOnce<E> {
    fn check(&self, r: OTelSdkResult) -> OTelSdkResult {
        self.health.reachable.store(r.is_ok(), Ordering::Relaxed);
        if let Err(e) = &r
            && !self.health.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                "telemetry export to {} failed (the run goes on; spans stay in the bundle; workers started while it \
                 fails do not export): {e}",
                self.endpoint
            );
        }
        r
    }
}

impl<E: SpanExporter> SpanExporter for WarnOnce<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let r = self.inner.export(batch).await;
        self.check(r)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

impl<E: PushMetricExporter> PushMetricExporter for WarnOnce<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let r = self.inner.export(metrics).await;
        self.check(r)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// A span processor filled in later: the OTLP batch processor once `connect` knows where to
/// send (the provider's processors are fixed when it is built, before the config is read).
#[derive(Debug)]
struct Deferred(Arc<OnceLock<BatchSpanProcessor>>);

impl SpanProcessor for Deferred {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        if let Some(p) = self.0.get() {
            p.on_start(span, cx)
        }
    }

    fn on_end(&self, span: SpanData) {
        if let Some(p) = self.0.get() {
            p.on_end(span)
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.get().map_or(Ok(()), |p| p.force_flush())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.get().map_or(Ok(()), |p| p.shutdown_with_timeout(timeout))
    }
}

/// Finished spans of this process, grouped by their local root (the outermost span of this
/// process above them: `eval.run` in the controller, each `eval.task` in a worker), as JSON
/// lines ready for `spans.jsonl`.
#[derive(Debug, Default)]
pub struct Journal {
    inner: Mutex<JournalInner>,
}

#[derive(Debug, Default)]
struct JournalInner {
    /// Open spans and their local roots.
    roots: HashMap<SpanId, SpanId>,
    /// Finished spans by local root.
    done: HashMap<SpanId, Vec<u8>>,
}

impl SpanJournal for Journal {
    fn take_tree(&self, root: SpanId) -> Vec<u8> {
        self.inner.lock().expect("journal lock").done.remove(&root).unwrap_or_default()
    }

    fn take_all(&self) -> Vec<u8> {
        let mut inner = self.inner.lock().expect("journal lock");
        let mut out = Vec::new();
        for (_, lines) in inner.done.drain() {
            out.extend_from_slice(&lines);
        }
        out
    }
}

#[derive(Debug)]
struct JournalProcessor(Arc<Journal>);

impl SpanProcessor for JournalProcessor {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        let id = span.span_context().span_id();
        let parent = cx.span().span_context().clone();
        let mut inner = self.0.inner.lock().expect("journal lock");
        let root = if parent.is_valid() && !parent.is_remote() {
            inner.roots.get(&parent.span_id()).copied().unwrap_or(parent.span_id())
        } else {
            id
        };
        inner.roots.insert(id, root);
    }

    fn on_end(&self, span: SpanData) {
        let line = span_json(&span);
        let id = span.span_context.span_id();
        let mut inner = self.0.inner.lock().expect("journal lock");
        let root = inner.roots.remove(&id).unwrap_or(id);
        let lines = inner.done.entry(root).or_default();
        serde_json::to_writer(&mut *lines, &line).expect("span JSON serializes");
        lines.push(b'\n');
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

fn time(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// An attribute value as JSON: a number, string, boolean or array of them (a float that is not
/// finite is `null`, as `serde_json` writes it).
struct ValueJson<'a>(&'a Value);

impl serde::Serialize for ValueJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use opentelemetry::Array;
        match self.0 {
            Value::Bool(b) => s.serialize_bool(*b),
            Value::I64(i) => s.serialize_i64(*i),
            Value::F64(f) => s.serialize_f64(*f),
            Value::String(v) => s.serialize_str(v.as_str()),
            Value::Array(Array::Bool(a)) => s.collect_seq(a),
            Value::Array(Array::I64(a)) => s.collect_seq(a),
            Value::Array(Array::F64(a)) => s.collect_seq(a),
            Value::Array(Array::String(a)) => s.collect_seq(a.iter().map(|v| v.as_str())),
            other => s.serialize_str(&other.to_string()),
        }
    }
}

/// Attributes as a JSON object, keys in order (the last of a repeated key counts).
struct AttrsJson<'a>(&'a [KeyValue]);

impl serde::Serialize for AttrsJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let sorted: std::collections::BTreeMap<&str, ValueJson> =
            self.0.iter().map(|kv| (kv.key.as_str(), ValueJson(&kv.value))).collect();
        s.collect_map(sorted)
    }
}

#[derive(serde::Serialize)]
struct EventJson<'a> {
    attributes: AttrsJson<'a>,
    name: &'a str,
    time: String,
}

/// One line of `spans.jsonl` (documented in docs/bundle-format.md), keys in order. Written
/// straight from the span: a worker ends a dozen spans per task, and building a JSON tree for
/// each first was a tenth of a small task's time.
#[derive(serde::Serialize)]
struct SpanJson<'a> {
    attributes: AttrsJson<'a>,
    duration_ms: f64,
    end_time: String,
    events: Vec<EventJson<'a>>,
    kind: &'static str,
    name: &'a str,
    parent_is_remote: bool,
    parent_span_id: Option<String>,
    span_id: String,
    start_time: String,
    status: &'static str,
    status_message: Option<&'a str>,
    trace_id: String,
}

fn span_json(s: &SpanData) -> SpanJson<'_> {
    use opentelemetry::trace::SpanKind;
    let (status, status_message) = match &s.status {
        Status::Unset => ("unset", None),
        Status::Ok => ("ok", None),
        Status::Error { description } => ("error", Some(description.as_ref())),
    };
    SpanJson {
        attributes: AttrsJson(&s.attributes),
        duration_ms: s.end_time.duration_since(s.start_time).unwrap_or_default().as_secs_f64() * 1000.0,
        end_time: time(s.end_time),
        events: s
            .events
            .iter()
            .map(|e| EventJson { attributes: AttrsJson(&e.attributes), name: &e.name, time: time(e.timestamp) })
            .collect(),
        kind: match s.span_kind {
            SpanKind::Client => "client",
            SpanKind::Server => "server",
            SpanKind::Producer => "producer",
            SpanKind::Consumer => "consumer",
            SpanKind::Internal => "internal",
        },
        name: &s.name,
        parent_is_remote: s.parent_span_is_remote,
        parent_span_id: (s.parent_span_id != SpanId::INVALID).then(|| s.parent_span_id.to_string()),
        span_id: s.span_context.span_id().to_string(),
        start_time: time(s.start_time),
        status,
        status_message,
        trace_id: s.span_context.trace_id().to_string(),
    }
}

/// Where log lines go: stderr, and, once [`capture_log`] was called (a worker whose bundle is
/// not on this machine), a copy kept in memory for the bundle's `worker.log`.
struct LogTee;

/// Most of a worker's log kept for the bundle; past it the oldest half is dropped.
const LOG_CAPTURE_LIMIT: usize = 8 << 20;

static CAPTURED: OnceLock<Mutex<Vec<u8>>> = OnceLock::new();

/// Starts keeping a copy of every log line from now on.
pub fn capture_log() {
    let _ = CAPTURED.set(Mutex::new(Vec::new()));
}

/// The log kept so far (empty when nothing is captured).
pub fn captured_log() -> Vec<u8> {
    CAPTURED.get().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()).clone()).unwrap_or_default()
}

impl std::io::Write for LogTee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(m) = CAPTURED.get() {
            let mut log = m.lock().unwrap_or_else(|e| e.into_inner());
            if log.len() + buf.len() > LOG_CAPTURE_LIMIT {
                let cut = log.len() / 2;
                log.drain(..cut);
            }
            log.extend_from_slice(buf);
        }
        std::io::stderr().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// A log line that says what it is about in a few words: time, level, the run, job and task
/// it concerns (from its spans — not every field of every span, which ran to ~350 characters a
/// line), then the event's message and fields.
struct Short {
    ansi: bool,
}

/// Span fields worth repeating on a log line, and the short names they get there.
const LINE_IDS: &[(&str, &str)] =
    &[("agenteval.run.id", "run"), ("agenteval.job.id", "job"), ("agenteval.task.id", "task")];

impl<S, N> FormatEvent<S, N> for Short
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let level = *event.metadata().level();
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ");
        if self.ansi {
            let colour = match level {
                tracing::Level::ERROR => "31",
                tracing::Level::WARN => "33",
                tracing::Level::INFO => "32",
                _ => "2",
            };
            write!(writer, "{now} \x1b[{colour}m{level:>5}\x1b[0m ")?;
        } else {
            write!(writer, "{now} {level:>5} ")?;
        }
        let mut seen: Vec<(&str, String)> = Vec::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                let Some(fields) = ext.get::<tracing_subscriber::fmt::FormattedFields<N>>() else { continue };
                for kv in fields.fields.split(' ') {
                    let Some((k, v)) = kv.split_once('=') else { continue };
                    if let Some((_, short)) = LINE_IDS.iter().find(|(long, _)| *long == k)
                        && !seen.iter().any(|(s, _)| s == short)
                    {
                        seen.push((short, v.trim_matches('"').to_string()));
                    }
                }
            }
        }
        for (k, v) in &seen {
            write!(writer, "{k}={v} ")?;
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// A log line with the current span's trace and span ids appended, so a log line leads to its
/// trace.
struct WithTraceIds<F>(F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let ids = ctx.lookup_current().and_then(|span| {
            let dispatch = tracing::dispatcher::get_default(|d| d.clone());
            let cx = tracing_opentelemetry::get_otel_context(&span.id(), &dispatch)?;
            let sc = cx.span().span_context().clone();
            sc.is_valid().then(|| format!(" trace_id={} span_id={}", sc.trace_id(), sc.span_id()))
        });
        let Some(ids) = ids else {
            return self.0.format_event(ctx, writer, event);
        };
        // The ids go at the end of the line, before its newline.
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        writeln!(writer, "{}{ids}", line.trim_end_matches('\n'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_line_has_its_keys_in_order_and_every_kind_of_value() {
        use opentelemetry::trace::{SpanContext, SpanKind, TraceFlags, TraceId, TraceState};
        let start = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_000);
        let mut events = opentelemetry_sdk::trace::SpanEvents::default();
        events.events.push(opentelemetry::trace::Event::new(
            "retry",
            start + Duration::from_millis(1),
            vec![KeyValue::new("attempt", 2)],
            0,
        ));
        let span = SpanData {
            span_context: SpanContext::new(
                TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
                SpanId::from_hex("b7ad6b7169203331").unwrap(),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: "chat mock".into(),
            start_time: start,
            end_time: start + Duration::from_micros(2500),
            attributes: vec![
                KeyValue::new("z.text", "a \"quoted\" word"),
                KeyValue::new("a.count", 3),
                KeyValue::new("m.cost", 0.25),
                KeyValue::new("n.nan", f64::NAN),
                KeyValue::new("b.ok", true),
                KeyValue::new("a.count", 4),
                KeyValue::new("s.list", Value::Array(vec![opentelemetry::StringValue::from("x")].into())),
            ],
            dropped_attributes_count: 0,
            events,
            links: Default::default(),
            status: Status::error("it broke"),
            instrumentation_scope: Default::default(),
        };
        let line = serde_json::to_string(&span_json(&span)).unwrap();
        assert_eq!(
            line,
            concat!(
                r#"{"attributes":{"a.count":4,"b.ok":true,"m.cost":0.25,"n.nan":null,"s.list":["x"],"z.text":"a \"quoted\" word"},"#,
                r#""duration_ms":2.5,"end_time":"2023-11-14T22:13:20.002500000Z","#,
                r#""events":[{"attributes":{"attempt":2},"name":"retry","time":"2023-11-14T22:13:20.001000000Z"}],"#,
                r#""kind":"client","name":"chat mock","parent_is_remote":false,"parent_span_id":null,"#,
                r#""span_id":"b7ad6b7169203331","start_time":"2023-11-14T22:13:20.000000000Z","status":"error","#,
                r#""status_message":"it broke","trace_id":"0af7651916cd43dd8448eb211c80319c"}"#
            )
        );
    }

    #[test]
    fn the_environment_fills_what_the_config_leaves_unset_and_never_wins() {
        let vars: BTreeMap<&str, &str> = BTreeMap::from([
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://from-env:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1500"),
            ("OTEL_SERVICE_NAME", "env-name"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "250"),
        ]);
        let var = |k: &str| vars.get(k).map(|v| v.to_string());
        let from_env = Settings::resolve_from(None, &var);
        assert_eq!(from_env.protocol_note, None);
        let bogus =
            Settings::resolve_from(None, &|k: &str| (k == "OTEL_EXPORTER_OTLP_PROTOCOL").then(|| "bogus".into()));
        assert_eq!(bogus.protocol, OtlpProtocol::HttpProtobuf);
        assert!(bogus.protocol_note.as_deref().unwrap().contains("OTEL_EXPORTER_OTLP_PROTOCOL=bogus"));
        assert_eq!(from_env.endpoint.as_deref(), Some("http://from-env:4318"));
        assert_eq!(from_env.protocol, OtlpProtocol::Grpc);
        assert_eq!(from_env.timeout, Duration::from_millis(1500));
        assert_eq!(from_env.metrics_interval, Duration::from_millis(250));
        assert_eq!(from_env.service_name, "env-name");
        let c = TelemetryConfig {
            endpoint: Some("http://from-config:4317".into()),
            protocol: Some(OtlpProtocol::HttpProtobuf),
            service_name: Some("config-name".into()),
            export_timeout_seconds: Some(2.0),
            ..Default::default()
        };
        let s = Settings::resolve_from(Some(&c), &var);
        assert_eq!(s.endpoint.as_deref(), Some("http://from-config:4317"));
        assert_eq!(s.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(s.timeout, Duration::from_secs(2));
        assert_eq!(s.service_name, "config-name");
        assert_eq!(s.metrics_interval, Duration::from_millis(250), "unset in the config: the environment's");
        let traces =
            |k: &str| (k == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").then(|| "http://t:4318/v1/traces".to_string());
        assert_eq!(Settings::resolve_from(None, &traces).endpoint.as_deref(), Some("http://t:4318"));
        let off = |k: &str| var(k).or_else(|| (k == "OTEL_SDK_DISABLED").then(|| "TRUE".to_string()));
        assert_eq!(Settings::resolve_from(None, &off).endpoint, None, "OTEL_SDK_DISABLED turns export off");
    }

    #[test]
    fn config_settings_reach_workers_without_headers() {
        let c = TelemetryConfig {
            endpoint: Some("http://collector:4317".into()),
            protocol: Some(OtlpProtocol::Grpc),
            worker_endpoint: Some("http://localhost:4317".into()),
            service_name: Some("nightly".into()),
            export_timeout_seconds: Some(2.0),
            ..Default::default()
        };
        let s = Settings::resolve(Some(&c));
        assert_eq!(s.endpoint.as_deref(), Some("http://collector:4317"));
        assert_eq!(s.protocol, OtlpProtocol::Grpc);
        assert_eq!(s.timeout, Duration::from_secs(2));
        let w = s.worker_env();
        assert_eq!(w["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://localhost:4317");
        assert_eq!(w["OTEL_EXPORTER_OTLP_PROTOCOL"], "grpc");
        assert_eq!(w["OTEL_SERVICE_NAME"], "nightly");
        assert!(!w.contains_key("OTEL_EXPORTER_OTLP_HEADERS"));

        let off = Settings::resolve(Some(&TelemetryConfig { disabled: Some(true), ..c }));
        assert_eq!(off.endpoint, None);
        assert_eq!(off.worker_env()["OTEL_SDK_DISABLED"], "true");
    }

    #[test]
    fn signal_urls() {
        assert_eq!(signal_url("http://h:4318/", "traces"), "http://h:4318/v1/traces");
        assert_eq!(strip_signal_path("http://h:4318/v1/traces"), "http://h:4318");
    }
}
