//! `agenteval ui` under test: the server started on a free port (its address read from its
//! first line), plain HTTP/1.1 requests with any `Host`, and headless Chromium loading a page.

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `agenteval ui`, stopped when dropped.
pub struct UiServer {
    child: Child,
    /// Kept open: the server prints more lines, and a closed pipe would end it.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
    /// `http://127.0.0.1:PORT/`.
    pub url: String,
    pub port: u16,
    /// The token the printed address carried, if any.
    pub token: Option<String>,
}

impl Drop for UiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl UiServer {
    /// Starts `cmd` (an `agenteval ui … --port 0` command) and waits for its address.
    pub fn start(mut cmd: Command) -> UiServer {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        let url = line.trim().strip_prefix("agenteval ui: ").unwrap_or_else(|| {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("ui printed no address: {line:?} {err}")
        });
        let port = url.split(':').nth(2).unwrap().split('/').next().unwrap().parse().unwrap();
        let (base, token) = match url.split_once("?token=") {
            Some((base, token)) => (base, Some(token.to_string())),
            None => (url, None),
        };
        UiServer { url: base.to_string(), port, token, child, _stdout: stdout }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The address of `path` (relative, with its query and fragment), carrying the token.
    pub fn page(&self, path: &str) -> String {
        let Some(token) = &self.token else { return format!("{}{path}", self.url) };
        let (path, fragment) = path.split_once('#').map_or((path, String::new()), |(p, f)| (p, format!("#{f}")));
        let sep = if path.contains('?') { '&' } else { '?' };
        format!("{}{path}{sep}token={token}{fragment}", self.url)
    }

    /// `GET path` with `Host: 127.0.0.1:PORT` (and the token).
    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &format!("127.0.0.1:{}", self.port), &[])
    }

    /// A request carrying the token as `Authorization: Bearer`.
    pub fn request(&self, method: &str, path: &str, host: &str, headers: &[(&str, &str)]) -> Response {
        let bearer = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let mut all = headers.to_vec();
        all.extend(bearer.as_deref().map(|b| ("Authorization", b)));
        request(self.port, method, path, host, &all)
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One HTTP/1.1 request on its own connection.
pub fn request(port: u16, method: &str, path: &str, host: &str, headers: &[(&str, &str)]) -> Response {
    send(port, method, path, host, headers, "")
}

/// A JSON request to a local server (a tracking server's REST API), its response.
pub fn json_request(port: u16, method: &str, path: &str, body: &serde_json::Value) -> Response {
    send(port, method, path, "127.0.0.1", &[("Content-Type", "application/json")], &body.to_string())
}

fn send(port: u16, method: &str, path: &str, host: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").map_or(raw.len(), |i| i + 4);
    let (head, body) = raw.split_at(split);
    let head = String::from_utf8_lossy(head);
    let mut lines = head.lines();
    let status = lines.next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_vec() };
    Response { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

/// The body of a `Transfer-Encoding: chunked` response.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..eol]).ok().and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let Some(size) = size.filter(|&n| n > 0 && raw.len() >= eol + 2 + n) else { break };
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[(eol + 4 + size).min(raw.len())..];
    }
    out
}

pub fn chromium() -> &'static str {
    for c in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(c).exists() {
            return c;
        }
    }
    panic!("headless Chromium is needed for this test: `apt-get install chromium` (tests/run.sh does)");
}

/// Loads `url` in headless Chromium: the DOM its scripts built and every console line it logged
/// (errors, requests the page's policy blocked, anything printed). With `screenshot`, also a
/// 1280×900 picture of the page.
pub fn browse(url: &str, screenshot: Option<&Path>) -> (String, Vec<String>) {
    let run = |extra: &[String]| {
        let child = Command::new(chromium())
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"])
            .args(["--no-first-run", "--disable-background-networking", "--disable-component-update"])
            .args(extra)
            .arg(url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = super::wait_output(child, Duration::from_secs(90));
        assert!(out.status.success(), "chromium failed: {}", super::text(&out.stderr));
        out
    };
    let out = run(&["--dump-dom".to_string()]);
    let console = super::text(&out.stderr).lines().filter(|l| l.contains("CONSOLE")).map(str::to_string).collect();
    if let Some(p) = screenshot {
        run(&[format!("--screenshot={}", p.display()), "--window-size=1280,900".into(), "--hide-scrollbars".into()]);
    }
    (super::text(&out.stdout), console)
}
