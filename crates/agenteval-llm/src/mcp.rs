//! The `llm` agent's MCP client: a task's HTTP MCP servers (Harbor's
//! `[[environment.mcp_servers]]`, run as the task's sidecars) become the agent's tools, named
//! `mcp__SERVER__TOOL` as Claude Code names them, dialed from the worker at the address its
//! environment gives for the server's name; a `stdio` server's program is started in the
//! agent's environment, as the agent's CLI would start it, and spoken to over its input and
//! output. The agent's loop traces every call and its result
//! like its other tools', so an MCP call cannot leave the trace.

use std::sync::Arc;
use std::time::Duration;

use agenteval_core::environment::McpServer;
use agenteval_core::traits::{AgentContext, AgentTool, TaskEnvironment, ToolSpec};
use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

/// How long one tool call may take before the agent is told it timed out.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a server may take to answer the handshake and list its tools.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest tool name the providers' APIs take.
const MAX_TOOL_NAME: usize = 64;
/// Most tools the task's servers give the agent, together (the providers take 128 a request):
/// a server that lists more has the rest left out, and the agent is told so by their absence.
const MAX_TOOLS: usize = 128;
/// Longest description of a tool passed on to the model, in characters: a dataset's server
/// does not fill the agent's context with its own words.
const MAX_DESCRIPTION: usize = 4_000;

/// The client's identity in the handshake.
#[derive(Clone)]
struct Client;

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("agenteval", env!("CARGO_PKG_VERSION")))
    }
}

/// The task's servers, connected, and their tools; the connections close when it is dropped.
#[derive(Default)]
pub(crate) struct McpTools {
    pub tools: Vec<Arc<dyn AgentTool>>,
    _connections: Vec<RunningService<RoleClient, Client>>,
}

/// Connects to every MCP server of the task. An `Err` names the server the agent cannot be
/// given, and why: the task is not the agent's to fail.
pub(crate) async fn connect(ctx: &AgentContext<'_>) -> Result<McpTools, String> {
    let servers = ctx.task.environment.as_ref().map(|e| e.mcp_servers.as_slice()).unwrap_or_default();
    let mut out = McpTools::default();
    for server in servers {
        let (connection, listed) = tokio::time::timeout(CONNECT_TIMEOUT, open(server, ctx.env))
            .await
            .unwrap_or_else(|_| Err(format!("it did not answer within {} s", CONNECT_TIMEOUT.as_secs())))
            .map_err(|e| format!("the llm agent cannot use the task's MCP server `{}`: {e}", server.name))?;
        for tool in listed {
            let name = tool_name(&server.name, &tool.name);
            if out.tools.len() >= MAX_TOOLS {
                break;
            }
            if out.tools.iter().any(|t| t.spec().name == name) {
                continue;
            }
            let parameters = Value::Object((*tool.input_schema).clone());
            let spec = ToolSpec {
                name,
                description: tool.description.as_deref().unwrap_or("").chars().take(MAX_DESCRIPTION).collect(),
                parameters: if parameters.get("type").is_some() { parameters } else { json!({"type": "object"}) },
            };
            let peer = connection.peer().clone();
            out.tools.push(Arc::new(McpTool { spec, tool: tool.name.to_string(), peer }));
        }
        out._connections.push(connection);
    }
    Ok(out)
}

/// The server's connection and its tools.
async fn open(
    server: &McpServer,
    env: &TaskEnvironment,
) -> Result<(RunningService<RoleClient, Client>, Vec<rmcp::model::Tool>), String> {
    match server.transport.as_str() {
        "streamable-http" | "http" => {}
        "stdio" => return open_stdio(server, env).await,
        other => {
            return Err(format!("its transport is `{other}`; the llm agent's client speaks streamable HTTP and stdio"));
        }
    }
    let raw = server.url.as_deref().ok_or("it names no url")?;
    let url = reqwest::Url::parse(raw).map_err(|e| format!("its url {raw:?}: {e}"))?;
    let host = url.host_str().ok_or_else(|| format!("its url {raw:?} names no host"))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let session = env.session.as_ref().ok_or("the task has no environment for it to run in")?;
    let addr = session.env.service_address(&session.handle, host, port).await.ok_or_else(|| {
        format!("this machine cannot reach `{host}` on the task's network (a {} environment)", session.env.kind())
    })?;
    // The request keeps the url's own host (a server may check it); only the address is ours.
    // No redirect is followed: the dataset's server cannot send the worker anywhere else.
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .resolve(host, addr)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(raw.to_string()),
    );
    let connection = Client.serve(transport).await.map_err(|e| format!("its handshake failed: {e}"))?;
    let tools = connection.list_all_tools().await.map_err(|e| format!("listing its tools failed: {e}"))?;
    Ok((connection, tools))
}

/// A `stdio` server: its program started in the agent's environment as the agent's CLI would
/// start it, spoken to over its input and output.
async fn open_stdio(
    server: &McpServer,
    env: &TaskEnvironment,
) -> Result<(RunningService<RoleClient, Client>, Vec<rmcp::model::Tool>), String> {
    let command = server.command.as_deref().filter(|c| !c.trim().is_empty()).ok_or("it names no command")?;
    let session = env.session.as_ref().ok_or("the task has no environment for it to run in")?;
    let argv: Vec<String> = std::iter::once(command.to_string()).chain(server.args.iter().cloned()).collect();
    let (output, input) = session.env.open_stdio(&session.handle, &argv).await.ok_or_else(|| {
        format!(
            "a {} environment cannot start `{command}` with its input and output open to the worker",
            session.env.kind()
        )
    })?;
    let connection = Client.serve((output, input)).await.map_err(|e| format!("its handshake failed: {e}"))?;
    let tools = connection.list_all_tools().await.map_err(|e| format!("listing its tools failed: {e}"))?;
    Ok((connection, tools))
}

/// `mcp__SERVER__TOOL`, in the characters and length every provider takes.
fn tool_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
    };
    let mut name = format!("mcp__{}__{}", clean(server), clean(tool));
    name.truncate(MAX_TOOL_NAME);
    name
}

/// One tool of a server.
struct McpTool {
    spec: ToolSpec,
    /// Its name on the server.
    tool: String,
    peer: Peer<RoleClient>,
}

#[async_trait]
impl AgentTool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, arguments: &Value, _env: &TaskEnvironment) -> Result<String, String> {
        let mut params = CallToolRequestParams::new(self.tool.clone());
        params.arguments = match arguments {
            Value::Object(o) => Some(o.clone()),
            Value::Null => None,
            other => return Err(format!("the arguments must be an object, not {other}")),
        };
        let result = tokio::time::timeout(CALL_TIMEOUT, self.peer.call_tool(params))
            .await
            .map_err(|_| format!("the MCP server did not answer within {} s", CALL_TIMEOUT.as_secs()))?
            .map_err(|e| format!("the MCP call failed: {e}"))?;
        let blocks: Vec<Value> = result.content.iter().filter_map(|b| serde_json::to_value(b).ok()).collect();
        let mut text: Vec<String> = blocks.iter().map(block_text).collect();
        if text.is_empty()
            && let Some(s) = &result.structured_content
        {
            text.push(s.to_string());
        }
        let text = text.join("\n");
        if result.is_error == Some(true) { Err(text) } else { Ok(text) }
    }
}

/// A content block as the model reads it: its text, or what it is when it is not text.
fn block_text(block: &Value) -> String {
    let s = |k: &str| block[k].as_str().unwrap_or("").to_string();
    match block["type"].as_str().unwrap_or("") {
        "text" => s("text"),
        "image" | "audio" => format!("[{} ({}), not shown]", s("type"), s("mimeType")),
        "resource" => {
            let r = &block["resource"];
            r["text"].as_str().map_or_else(|| format!("[resource {}]", r["uri"].as_str().unwrap_or("")), String::from)
        }
        "resource_link" => format!("[resource link {}]", s("uri")),
        other => format!("[{other} content]"),
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use agenteval_core::environment::{EnvHandle, EnvSpec, ExecOutput, ExecRequest};
    use agenteval_core::traits::{EnvSession, Environment};

    use super::*;

    /// An environment that only says where its services answer: at `0` whatever their name.
    struct Reaches(Option<SocketAddr>);

    #[async_trait]
    impl Environment for Reaches {
        fn kind(&self) -> &str {
            "test"
        }
        async fn prepare(
            &self,
            _: &agenteval_core::RunId,
            _: &agenteval_core::model::TaskSpec,
            _: u32,
            _: &EnvSpec,
        ) -> agenteval_core::Result<EnvHandle> {
            unreachable!("not prepared here")
        }
        async fn exec(&self, _: &EnvHandle, _: &ExecRequest) -> agenteval_core::Result<ExecOutput> {
            unreachable!("the client runs nothing in the environment")
        }
        async fn copy_in(&self, _: &EnvHandle, _: &std::path::Path, _: &str) -> agenteval_core::Result<()> {
            unreachable!()
        }
        async fn copy_out(&self, _: &EnvHandle, _: &str, _: &std::path::Path, _: u64) -> agenteval_core::Result<()> {
            unreachable!()
        }
        async fn teardown(&self, _: &EnvHandle) -> agenteval_core::Result<()> {
            Ok(())
        }
        async fn sweep(&self, _: &agenteval_core::RunId) -> agenteval_core::Result<usize> {
            Ok(0)
        }
        async fn service_address(&self, _: &EnvHandle, _: &str, _: u16) -> Option<SocketAddr> {
            self.0
        }
    }

    fn env(reaches: Option<SocketAddr>) -> TaskEnvironment {
        let handle = EnvHandle { kind: "test".into(), id: "t".into(), workdir: "/".into(), notes: vec![] };
        TaskEnvironment {
            session: Some(EnvSession { env: Arc::new(Reaches(reaches)), handle }),
            ..TaskEnvironment::default()
        }
    }

    fn server(transport: &str, url: &str) -> McpServer {
        McpServer {
            name: "orders".into(),
            transport: transport.into(),
            url: Some(url.into()),
            command: None,
            args: vec![],
        }
    }

    async fn refusal(s: &McpServer, env: &TaskEnvironment) -> String {
        match tokio::time::timeout(CONNECT_TIMEOUT, open(s, env)).await {
            Ok(Ok(_)) => panic!("{s:?} was opened"),
            Ok(Err(e)) => e,
            Err(_) => panic!("{s:?}: no answer within {CONNECT_TIMEOUT:?}"),
        }
    }

    #[tokio::test]
    async fn a_server_the_client_cannot_use_is_refused_saying_why() {
        let http = server("streamable-http", "http://orders:8000/mcp");
        let no_command = McpServer { url: None, ..server("stdio", "") };
        assert!(refusal(&no_command, &env(None)).await.contains("names no command"));
        let stdio = McpServer { command: Some("orders-server".into()), ..no_command };
        assert!(
            refusal(&stdio, &env(None)).await.contains("cannot start `orders-server`"),
            "{}",
            refusal(&stdio, &env(None)).await
        );
        assert!(refusal(&server("sse", "http://orders:8000/sse"), &env(None)).await.contains("`sse`"));
        assert!(refusal(&http, &TaskEnvironment::default()).await.contains("no environment"));
        assert!(refusal(&http, &env(None)).await.contains("cannot reach `orders`"));
        assert!(refusal(&server("http", "not a url"), &env(None)).await.contains("its url"));
    }

    /// A dataset's server that answers with a redirect does not send the worker's request
    /// anywhere else: the place it names is never asked.
    #[tokio::test]
    async fn a_server_that_redirects_sends_the_client_nowhere() {
        let asked = Arc::new(AtomicUsize::new(0));
        let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let elsewhere_addr = elsewhere.local_addr().unwrap();
        let counted = asked.clone();
        let app = axum::Router::new().fallback(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { "{}" }
        });
        tokio::spawn(async move { axum::serve(elsewhere, app).await });
        let redirecting = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = redirecting.local_addr().unwrap();
        let to = format!("http://{elsewhere_addr}/mcp");
        let app = axum::Router::new().fallback(move || {
            let to = to.clone();
            async move { (axum::http::StatusCode::TEMPORARY_REDIRECT, [(axum::http::header::LOCATION, to)]) }
        });
        tokio::spawn(async move { axum::serve(redirecting, app).await });
        let why =
            refusal(&server("streamable-http", &format!("http://orders:{}/mcp", addr.port())), &env(Some(addr))).await;
        assert!(why.contains("handshake failed"), "{why}");
        assert_eq!(asked.load(Ordering::SeqCst), 0, "the redirect was followed");
    }

    #[test]
    fn tool_names_are_what_every_provider_takes() {
        assert_eq!(tool_name("orders", "order_status"), "mcp__orders__order_status");
        assert_eq!(tool_name("my server", "get.item/v2"), "mcp__my_server__get_item_v2");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), MAX_TOOL_NAME);
    }

    #[test]
    fn content_blocks_read_as_text() {
        assert_eq!(block_text(&json!({"type": "text", "text": "hi"})), "hi");
        assert_eq!(
            block_text(&json!({"type": "image", "data": "AAAA", "mimeType": "image/png"})),
            "[image (image/png), not shown]"
        );
        assert_eq!(block_text(&json!({"type": "resource", "resource": {"uri": "f://a", "text": "body"}})), "body");
        assert_eq!(
            block_text(&json!({"type": "resource", "resource": {"uri": "f://a", "blob": "AA"}})),
            "[resource f://a]"
        );
    }
}
