//! Test harness: a real sibyl-server on 127.0.0.1, a local HTTP server of a saved page, and
//! a local HTTP server speaking the OpenAI chat-completions API that replays scripted
//! replies chosen by the request content (so scripts do not depend on call order).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Text unique to each role's request.
pub const PLANNER: &str = "tell me which function you would use to solve the problem in next step";
/// The channel prompt.
pub const CHANNEL: &str = "# Current Step Tool Result";
/// The Actor's turn.
pub const ACTOR: &str = "You are the Actor. Reply now.";
/// The Critic's turn.
pub const CRITIC: &str = "You are the Critic. Reply now.";
/// The formatter prompt.
pub const FORMATTER: &str = "Format the following answer according to these rules";
/// The code improver.
pub const IMPROVE: &str = "Check this code and help me improve it.";

/// A background server stopped on drop.
pub struct Running {
    /// Its address.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server and waits until its port is closed.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let task = std::mem::replace(&mut self.task, tokio::spawn(async {}));
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.abort();
    }
}

/// Starts sibyl-server in-process with the dev policy (loopback allowed).
pub async fn start_sibyl() -> Running {
    let policy = sibyl_server::Policy::from_toml(
        include_str!("../../../sandbox-policies/dev.toml"),
        "dev.toml",
    )
    .expect("dev policy");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel::<()>();
    let sibyl = sibyl_server::Sibyl::new(policy).expect("server");
    let task = tokio::spawn(async move {
        let _ = sibyl
            .serve(listener, async {
                let _ = rx.await;
            })
            .await;
    });
    Running {
        addr,
        stop: Some(tx),
        task,
    }
}

/// The saved New Zealand Wikipedia page served at `/new-zealand.html`.
pub const PAGE_PATH: &str = "/new-zealand.html";

/// Serves the fixture page on 127.0.0.1.
pub async fn start_pages() -> Running {
    let page: &'static str =
        include_str!("../../../tests/fixtures/pages/readability-wikipedia-2/source.html");
    let app = Router::new().route(
        PAGE_PATH,
        get(move || async move {
            (
                [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
                page,
            )
        }),
    );
    serve(app).await
}

async fn serve(app: Router) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
    });
    Running {
        addr,
        stop: Some(tx),
        task,
    }
}

/// What a rule answers.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A chat completion with this content.
    Content(String),
    /// An HTTP error status with a JSON error body.
    Status(u16),
    /// Sleep, then a chat completion.
    Delayed(Duration, String),
    /// A chat completion whose content is this many bytes of `x`.
    Huge(usize),
}

/// A scripted reply: used when every `all` string occurs in the request's messages, no
/// `none` string does, and (when set) the request's seed matches; at most `times` times.
#[derive(Clone, Debug)]
pub struct Rule {
    all: Vec<String>,
    none: Vec<String>,
    seed: Option<u64>,
    times: Option<usize>,
    reply: Reply,
}

/// Starts a rule matching requests that contain every string of `all`.
pub fn when(all: &[&str]) -> Rule {
    Rule {
        all: all.iter().map(|s| s.to_string()).collect(),
        none: Vec::new(),
        seed: None,
        times: None,
        reply: Reply::Status(500),
    }
}

impl Rule {
    /// Also requires that none of `none` occurs.
    pub fn unless(mut self, none: &[&str]) -> Self {
        self.none = none.iter().map(|s| s.to_string()).collect();
        self
    }
    /// Also requires this seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// Used at most `n` times.
    pub fn times(mut self, n: usize) -> Self {
        self.times = Some(n);
        self
    }
    /// Answers with `content`.
    pub fn reply(mut self, content: &str) -> Self {
        self.reply = Reply::Content(content.to_string());
        self
    }
    /// Answers with an HTTP status.
    pub fn status(mut self, code: u16) -> Self {
        self.reply = Reply::Status(code);
        self
    }
    /// Answers with `bytes` bytes of content.
    pub fn huge(mut self, bytes: usize) -> Self {
        self.reply = Reply::Huge(bytes);
        self
    }
    /// Sleeps, then answers.
    pub fn delayed(mut self, d: Duration, content: &str) -> Self {
        self.reply = Reply::Delayed(d, content.to_string());
        self
    }
}

/// One request the model server saw.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The JSON body.
    pub body: serde_json::Value,
    /// All message contents joined by newlines.
    pub text: String,
    /// Which rule answered (`None`: no rule matched; answered 404).
    pub rule: Option<usize>,
}

#[derive(Default)]
struct ModelState {
    rules: Vec<(Rule, usize)>,
    seen: Vec<Seen>,
}

/// The scripted OpenAI-compatible server.
pub struct ScriptedModel {
    /// The server.
    pub server: Running,
    state: Arc<Mutex<ModelState>>,
}

impl ScriptedModel {
    /// Base URL up to `/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.url())
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().expect("lock").seen.clone()
    }

    /// Requests whose text contains `marker`.
    pub fn count(&self, marker: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.text.contains(marker))
            .count()
    }

    /// Requests no rule matched.
    pub fn unmatched(&self) -> Vec<String> {
        self.seen()
            .iter()
            .filter(|s| s.rule.is_none())
            .map(|s| {
                s.text
                    .chars()
                    .rev()
                    .take(600)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect()
            })
            .collect()
    }
}

/// Starts the scripted model server with `rules` (first matching rule wins).
pub async fn start_model(rules: Vec<Rule>) -> ScriptedModel {
    let state = Arc::new(Mutex::new(ModelState {
        rules: rules.into_iter().map(|r| (r, 0)).collect(),
        seen: Vec::new(),
    }));
    let app = Router::new()
        .route("/v1/chat/completions", post(complete))
        .with_state(state.clone());
    ScriptedModel {
        server: serve(app).await,
        state,
    }
}

async fn complete(State(state): State<Arc<Mutex<ModelState>>>, body: String) -> Response {
    let Ok(body) = serde_json::from_str::<serde_json::Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "body is not JSON").into_response();
    };
    let text = body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| m["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    let seed = body["seed"].as_u64();
    let reply = {
        let mut st = state.lock().expect("lock");
        let found = st.rules.iter().position(|(r, used)| {
            r.times.is_none_or(|t| *used < t)
                && r.all.iter().all(|s| text.contains(s.as_str()))
                && !r.none.iter().any(|s| text.contains(s.as_str()))
                && r.seed.is_none_or(|s| seed == Some(s))
        });
        if let Some(i) = found {
            st.rules[i].1 += 1;
        }
        st.seen.push(Seen {
            body: body.clone(),
            text: text.clone(),
            rule: found,
        });
        found.map(|i| st.rules[i].0.reply.clone())
    };
    let completion = |content: String| {
        axum::Json(serde_json::json!({
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]
        }))
        .into_response()
    };
    match reply {
        Some(Reply::Content(c)) => completion(c),
        Some(Reply::Huge(n)) => completion("x".repeat(n)),
        Some(Reply::Delayed(d, c)) => {
            tokio::time::sleep(d).await;
            completion(c)
        }
        Some(Reply::Status(code)) => (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            axum::Json(serde_json::json!({"error": {"message": format!("scripted {code}")}})),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({"error": {"message": "no scripted reply matches"}})),
        )
            .into_response(),
    }
}

/// A planner reply choosing `tool` with `args`.
pub fn choose(tool: &str, args: serde_json::Value) -> String {
    serde_json::json!({"reason": "test", "tool": tool, "tool_args": args}).to_string()
}

/// A planner reply ending the loop.
pub fn done() -> String {
    choose("None", serde_json::json!({}))
}
