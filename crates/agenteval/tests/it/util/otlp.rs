//! An OTLP receiver for tests, built on the OTLP protobuf definitions: gRPC (tonic) and
//! HTTP/protobuf (`POST /v1/traces`, `/v1/metrics`) on 127.0.0.1, keeping what arrives.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use prost::Message;

/// A received span, flattened.
#[derive(Debug, Clone)]
pub struct RSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub attrs: BTreeMap<String, serde_json::Value>,
    /// 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    pub resource: BTreeMap<String, serde_json::Value>,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

impl RSpan {
    pub fn attr(&self, key: &str) -> Option<&serde_json::Value> {
        self.attrs.get(key)
    }
}

/// One data point: a sum or gauge value, or a histogram's count and sum.
#[derive(Debug, Clone)]
pub struct RPoint {
    pub metric: String,
    pub value: f64,
    pub count: u64,
    pub attrs: BTreeMap<String, serde_json::Value>,
    /// The exporting process (`service.instance.id`).
    pub instance: String,
    pub time_unix_nano: u64,
}

#[derive(Debug, Default)]
pub struct Store {
    /// `false`: count spans and points, keep nothing (for benchmarks: the receiver shares the
    /// machine with what it measures).
    pub keep: bool,
    pub span_count: u64,
    pub spans: Vec<RSpan>,
    pub points: Vec<RPoint>,
    pub grpc_requests: u64,
    pub http_requests: u64,
}

fn any_json(v: &Option<AnyValue>) -> serde_json::Value {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone().into(),
        Some(any_value::Value::BoolValue(b)) => (*b).into(),
        Some(any_value::Value::IntValue(i)) => (*i).into(),
        Some(any_value::Value::DoubleValue(d)) => serde_json::json!(d),
        Some(other) => format!("{other:?}").into(),
        None => serde_json::Value::Null,
    }
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, serde_json::Value> {
    kvs.iter().map(|kv| (kv.key.clone(), any_json(&kv.value))).collect()
}

/// The spans of one OTLP request, as the tests read them.
pub fn spans_of(req: ExportTraceServiceRequest) -> Vec<RSpan> {
    let mut out = Vec::new();
    for rs in req.resource_spans {
        let resource = attrs(&rs.resource.map(|r| r.attributes).unwrap_or_default());
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(RSpan {
                    trace_id: hex::encode(&s.trace_id),
                    span_id: hex::encode(&s.span_id),
                    parent_span_id: hex::encode(&s.parent_span_id),
                    name: s.name,
                    attrs: attrs(&s.attributes),
                    status_code: s.status.map(|st| st.code).unwrap_or(0),
                    resource: resource.clone(),
                    start_unix_nano: s.start_time_unix_nano,
                    end_unix_nano: s.end_time_unix_nano,
                });
            }
        }
    }
    out
}

impl Store {
    fn add_traces(&mut self, req: ExportTraceServiceRequest) {
        if !self.keep {
            self.span_count +=
                req.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len() as u64).sum::<u64>();
            return;
        }
        let spans = spans_of(req);
        self.span_count += spans.len() as u64;
        self.spans.extend(spans);
    }

    fn add_metrics(&mut self, req: ExportMetricsServiceRequest) {
        if !self.keep {
            return;
        }
        for rm in req.resource_metrics {
            let resource = attrs(&rm.resource.map(|r| r.attributes).unwrap_or_default());
            let instance = resource.get("service.instance.id").map(|v| v.to_string()).unwrap_or_default();
            for sm in rm.scope_metrics {
                for m in sm.metrics {
                    let mut push = |value: f64, count: u64, a: &[KeyValue], t: u64| {
                        self.points.push(RPoint {
                            metric: m.name.clone(),
                            value,
                            count,
                            attrs: attrs(a),
                            instance: instance.clone(),
                            time_unix_nano: t,
                        })
                    };
                    let number = |v: &Option<number_data_point::Value>| match v {
                        Some(number_data_point::Value::AsDouble(d)) => *d,
                        Some(number_data_point::Value::AsInt(i)) => *i as f64,
                        None => 0.0,
                    };
                    match &m.data {
                        Some(metric::Data::Sum(s)) => {
                            for p in &s.data_points {
                                push(number(&p.value), 0, &p.attributes, p.time_unix_nano)
                            }
                        }
                        Some(metric::Data::Gauge(g)) => {
                            for p in &g.data_points {
                                push(number(&p.value), 0, &p.attributes, p.time_unix_nano)
                            }
                        }
                        Some(metric::Data::Histogram(h)) => {
                            for p in &h.data_points {
                                push(p.sum.unwrap_or(0.0), p.count, &p.attributes, p.time_unix_nano)
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// The latest point of each stream (process × attribute set) of a metric. Cumulative sums
    /// and histograms: their final totals; gauges: their last value.
    pub fn latest(&self, metric: &str) -> Vec<RPoint> {
        let mut last: HashMap<(String, String), RPoint> = HashMap::new();
        for p in self.points.iter().filter(|p| p.metric == metric) {
            let key = (p.instance.clone(), serde_json::to_string(&p.attrs).unwrap());
            match last.get(&key) {
                Some(q) if q.time_unix_nano > p.time_unix_nano => {}
                _ => {
                    last.insert(key, p.clone());
                }
            }
        }
        last.into_values().collect()
    }

    /// The final total of a cumulative counter across streams.
    pub fn total(&self, metric: &str) -> f64 {
        self.latest(metric).iter().map(|p| p.value).sum()
    }
}

#[derive(Clone)]
struct Svc(Arc<Mutex<Store>>);

#[tonic::async_trait]
impl TraceService for Svc {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut s = self.0.lock().unwrap();
        s.grpc_requests += 1;
        s.add_traces(req.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Svc {
    async fn export(
        &self,
        req: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let mut s = self.0.lock().unwrap();
        s.grpc_requests += 1;
        s.add_metrics(req.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// A running receiver. It serves from a thread of its own (so tests with or without a Tokio
/// runtime can use it) until the test process exits.
pub struct Receiver {
    pub store: Arc<Mutex<Store>>,
    pub addr: SocketAddr,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Protocol {
    Grpc,
    Http,
}

impl Receiver {
    pub fn start(protocol: Protocol) -> Receiver {
        Self::start_with(protocol, true)
    }

    /// A receiver that only counts spans (see `Store::keep`).
    pub fn counting(protocol: Protocol) -> Receiver {
        Self::start_with(protocol, false)
    }

    fn start_with(protocol: Protocol, keep: bool) -> Receiver {
        Self::serve_on(protocol, keep, std::net::TcpListener::bind("127.0.0.1:0").unwrap())
    }

    /// A receiver on a socket the test already holds: until this is called the socket accepts
    /// connections and answers nothing (a silent collector); from then on it is served.
    pub fn serve_on(protocol: Protocol, keep: bool, listener: std::net::TcpListener) -> Receiver {
        let store = Arc::new(Mutex::new(Store { keep, ..Default::default() }));
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = Svc(store.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(serve(protocol, svc, listener));
        });
        Receiver { store, addr }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits until `done` holds for what has arrived (export is asynchronous to the run).
    pub fn wait_for(&self, timeout: Duration, done: impl Fn(&Store) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if done(&self.store.lock().unwrap()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        done(&self.store.lock().unwrap())
    }
}

async fn serve(protocol: Protocol, svc: Svc, listener: std::net::TcpListener) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    match protocol {
        Protocol::Grpc => tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(svc.clone()))
            .add_service(MetricsServiceServer::new(svc))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap(),
        Protocol::Http => {
            use axum::body::Bytes;
            use axum::routing::post;
            let (t, m) = (svc.clone(), svc);
            let app = axum::Router::new()
                .route(
                    "/v1/traces",
                    post(move |body: Bytes| async move {
                        let req = ExportTraceServiceRequest::decode(body).expect("OTLP trace protobuf");
                        let mut s = t.0.lock().unwrap();
                        s.http_requests += 1;
                        s.add_traces(req);
                        (
                            [("content-type", "application/x-protobuf")],
                            ExportTraceServiceResponse::default().encode_to_vec(),
                        )
                    }),
                )
                .route(
                    "/v1/metrics",
                    post(move |body: Bytes| async move {
                        let req = ExportMetricsServiceRequest::decode(body).expect("OTLP metrics protobuf");
                        let mut s = m.0.lock().unwrap();
                        s.http_requests += 1;
                        s.add_metrics(req);
                        (
                            [("content-type", "application/x-protobuf")],
                            ExportMetricsServiceResponse::default().encode_to_vec(),
                        )
                    }),
                );
            axum::serve(listener, app).await.unwrap()
        }
    }
}
