//! JavaScript rendering with a headless Chromium (headless_chrome + Debian's `chromium`).
//!
//! One browser process is shared by every session and relaunched when it has died (crash,
//! kill, lost connection); each render opens its own tab, which is closed afterwards. At most
//! `browser.render.max_tabs` renders run at once (others wait), each under
//! `browser.render.page_timeout_ms`. Every request the page makes (document, scripts, XHR,
//! fetch, images, iframes) passes CDP request interception, which applies the cheap part of
//! the browser's address rules ([`AddressGuard`]): only http(s) (and `data:`/`blob:`), host
//! rules, and IP-literal hosts; refused requests fail with `BlockedByClient` before any
//! connection.
//!
//! The crate costs ~100 ms per CDP call and its `wait_until_navigated` waits for network
//! idle (1–2 s); instead the page is settled inside one JavaScript evaluation: wait for the
//! load event, then until the DOM has not changed for `settle_ms` (MutationObserver), capped,
//! and return the serialised DOM (measured in ../shared/notes/browser.md: 0.66–0.85 s/page).
//!
//! Interception does not see WebSockets, and a name checked there would be resolved again by
//! Chromium (a DNS-rebinding window). So Chromium sends *every* connection through an egress
//! proxy of ours ([`proxy`], `--proxy-server`, with loopback not bypassed) that resolves
//! names, checks every address and connects to exactly the checked addresses; this is where
//! names are resolved and checked (a name resolving to a private address gets the proxy's
//! `403`). WebRTC may not use UDP outside the proxy. The proxy lives as long as the
//! [`Renderer`].

pub mod proxy;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headless_chrome::browser::tab::RequestPausedDecision;
use headless_chrome::protocol::cdp::Fetch::FailRequest;
use headless_chrome::protocol::cdp::Network::ErrorReason;
use headless_chrome::{Browser, LaunchOptions};
use serde::Deserialize;

use super::ssrf::AddressGuard;
use crate::policy::PolicyError;

/// When pages are rendered with Chromium.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderMode {
    /// Never (plain HTTP only).
    Never,
    /// When the fetched HTML has scripts but less than `min_text_chars` of text.
    Auto,
    /// Every HTML page.
    Always,
}

/// `[browser.render]` as written in the policy file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRenderPolicy {
    /// `never`, `auto` or `always`.
    pub mode: String,
    /// Chromium executable; empty for `chromium` / `chromium-browser` / `google-chrome` in PATH.
    pub chromium: String,
    /// Renders at once.
    pub max_tabs: u64,
    /// Time limit per page, milliseconds.
    pub page_timeout_ms: u64,
    /// Quiet DOM time that ends a render, milliseconds.
    pub settle_ms: u64,
    /// `auto` renders pages whose text is shorter than this many characters.
    pub min_text_chars: u64,
}

impl Default for RawRenderPolicy {
    fn default() -> Self {
        Self {
            mode: "never".into(),
            chromium: String::new(),
            max_tabs: 2,
            page_timeout_ms: 15_000,
            settle_ms: 300,
            min_text_chars: 200,
        }
    }
}

/// Checked `[browser.render]`.
#[derive(Debug, Clone)]
pub struct RenderPolicy {
    /// When to render.
    pub mode: RenderMode,
    /// Chromium executable, if set.
    pub chromium: Option<PathBuf>,
    /// Renders at once.
    pub max_tabs: usize,
    /// Time limit per page.
    pub page_timeout: Duration,
    /// Quiet DOM time that ends a render.
    pub settle: Duration,
    /// `auto` threshold in characters.
    pub min_text_chars: usize,
}

impl Default for RenderPolicy {
    fn default() -> Self {
        Self {
            mode: RenderMode::Never,
            chromium: None,
            max_tabs: 2,
            page_timeout: Duration::from_secs(15),
            settle: Duration::from_millis(300),
            min_text_chars: 200,
        }
    }
}

impl RenderPolicy {
    /// Checks the raw section.
    ///
    /// # Errors
    /// [`PolicyError::Invalid`] naming the `browser.render.*` key.
    pub fn check(raw: &RawRenderPolicy, origin: &str) -> Result<Self, PolicyError> {
        let bad = |key: &str, message: String| PolicyError::Invalid {
            origin: origin.to_string(),
            key: format!("browser.render.{key}"),
            message,
        };
        let range = |key: &str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(bad(key, format!("must be between {lo} and {hi}, got {v}")))
            }
        };
        let mode = match raw.mode.trim() {
            "never" => RenderMode::Never,
            "auto" => RenderMode::Auto,
            "always" => RenderMode::Always,
            other => {
                return Err(bad(
                    "mode",
                    format!("must be never, auto or always, got `{other}`"),
                ));
            }
        };
        let chromium = raw.chromium.trim();
        Ok(Self {
            mode,
            chromium: (!chromium.is_empty()).then(|| PathBuf::from(chromium)),
            max_tabs: range("max_tabs", raw.max_tabs, 1, 64)? as usize,
            page_timeout: Duration::from_millis(range(
                "page_timeout_ms",
                raw.page_timeout_ms,
                500,
                300_000,
            )?),
            settle: Duration::from_millis(range("settle_ms", raw.settle_ms, 0, 10_000)?),
            min_text_chars: range("min_text_chars", raw.min_text_chars, 0, 1_000_000)? as usize,
        })
    }
}

/// Why a render failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// Chromium could not be started.
    #[error("cannot start Chromium: {0}")]
    Launch(String),
    /// The page did not settle in time.
    #[error("the page did not finish rendering within {0} ms (browser.render.page_timeout_ms)")]
    Timeout(u128),
    /// Chromium failed during the render.
    #[error("Chromium failed: {0}")]
    Browser(String),
}

/// The shared Chromium.
pub struct Renderer {
    policy: RenderPolicy,
    guard: Arc<AddressGuard>,
    browser: Arc<Mutex<Option<Browser>>>,
    /// Started with the first render; every Chromium connection goes through it.
    proxy: Arc<Mutex<Option<proxy::EgressProxy>>>,
    slots: tokio::sync::Semaphore,
}

/// In-page settle: load event, then a quiet DOM for SETTLE ms (capped at CAP ms), then the
/// serialised document.
const SETTLE_JS: &str = r#"new Promise((resolve) => {
  const settle = SETTLE, cap = CAP;
  const done = () => resolve(document.documentElement ? document.documentElement.outerHTML : "");
  const start = () => {
    let timer = setTimeout(finish, settle);
    const obs = new MutationObserver(() => { clearTimeout(timer); timer = setTimeout(finish, settle); });
    obs.observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
    const hard = setTimeout(finish, cap);
    function finish() { obs.disconnect(); clearTimeout(hard); clearTimeout(timer); done(); }
  };
  if (document.readyState === "complete") start(); else window.addEventListener("load", start, {once: true});
})"#;

impl Renderer {
    /// The egress proxy's address, starting the proxy on first use.
    fn proxy_addr(&self) -> Result<std::net::SocketAddr, RenderError> {
        let mut p = self
            .proxy
            .lock()
            .map_err(|_| RenderError::Browser("proxy lock poisoned".into()))?;
        if let Some(running) = p.as_ref() {
            return Ok(running.addr());
        }
        let started = proxy::EgressProxy::start(self.guard.clone())
            .map_err(|e| RenderError::Launch(format!("cannot start the egress proxy: {e}")))?;
        let addr = started.addr();
        *p = Some(started);
        Ok(addr)
    }

    /// A renderer for `policy`, refusing what `guard` refuses. Chromium starts on first use.
    pub fn new(policy: RenderPolicy, guard: Arc<AddressGuard>) -> Self {
        let slots = tokio::sync::Semaphore::new(policy.max_tabs);
        Self {
            policy,
            guard,
            browser: Arc::new(Mutex::new(None)),
            proxy: Arc::new(Mutex::new(None)),
            slots,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &RenderPolicy {
        &self.policy
    }

    /// The running browser's process id, if one is running (for tests and metrics).
    pub fn process_id(&self) -> Option<u32> {
        self.browser
            .lock()
            .ok()
            .and_then(|b| b.as_ref().and_then(Browser::get_process_id))
    }

    /// Loads `url` in a new tab, runs its scripts, waits for the DOM to settle and returns
    /// the rendered HTML.
    ///
    /// # Errors
    /// [`RenderError`]: launch failure, timeout or browser failure (after one relaunch).
    pub async fn render(&self, url: &url::Url) -> Result<String, RenderError> {
        let _permit = self
            .slots
            .acquire()
            .await
            .map_err(|e| RenderError::Browser(e.to_string()))?;
        let timeout = self.policy.page_timeout;
        let browser = self.browser.clone();
        let guard = self.guard.clone();
        let policy = self.policy.clone();
        let proxy = self.proxy_addr()?;
        let url = url.to_string();
        let job = tokio::task::spawn_blocking(move || {
            // One retry with a fresh browser if the shared one has died.
            match render_once(&browser, &guard, &policy, proxy, &url) {
                Err(RenderError::Browser(e)) => {
                    tracing::warn!(error = %e, "Chromium render failed; relaunching");
                    if let Ok(mut b) = browser.lock() {
                        *b = None;
                    }
                    render_once(&browser, &guard, &policy, proxy, &url)
                }
                other => other,
            }
        });
        match tokio::time::timeout(timeout + Duration::from_secs(2), job).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(RenderError::Browser(format!("render task failed: {e}"))),
            Err(_) => Err(RenderError::Timeout(timeout.as_millis())),
        }
    }
}

fn launch(policy: &RenderPolicy, proxy: std::net::SocketAddr) -> Result<Browser, RenderError> {
    let path = policy.chromium.clone().or_else(|| {
        ["chromium", "chromium-browser", "google-chrome"]
            .iter()
            .find_map(|n| which(n))
    });
    let proxy_arg = format!("--proxy-server=http://{proxy}");
    let flags = [
        "--disable-component-update",
        "--mute-audio",
        "--renderer-process-limit=2",
        "--disable-dev-shm-usage",
        "--no-default-browser-check",
        "--disable-features=DnsOverHttps",
        // Every connection goes through the egress proxy, loopback included (Chromium
        // bypasses proxies for loopback unless told not to), and WebRTC may not send UDP
        // around it.
        proxy_arg.as_str(),
        "--proxy-bypass-list=<-loopback>",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--dns-prefetch-disable",
    ];
    let args: Vec<&std::ffi::OsStr> = flags.iter().map(std::ffi::OsStr::new).collect();
    let opts = LaunchOptions::default_builder()
        .headless(true)
        // Root in a container has no user namespaces for Chromium's sandbox.
        .sandbox(false)
        .enable_gpu(false)
        .path(path)
        .args(args)
        // The crate's 30 s default closes an idle shared browser.
        .idle_browser_timeout(Duration::from_secs(7 * 24 * 3600))
        .build()
        .map_err(|e| RenderError::Launch(e.to_string()))?;
    Browser::new(opts).map_err(|e| RenderError::Launch(e.to_string()))
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn render_once(
    shared: &Mutex<Option<Browser>>,
    guard: &Arc<AddressGuard>,
    policy: &RenderPolicy,
    proxy: std::net::SocketAddr,
    url: &str,
) -> Result<String, RenderError> {
    let browser = {
        let mut b = shared
            .lock()
            .map_err(|_| RenderError::Browser("browser lock poisoned".into()))?;
        let alive = b.as_ref().is_some_and(|br| br.get_version().is_ok());
        if !alive {
            *b = Some(launch(policy, proxy)?);
        }
        match b.as_ref() {
            Some(br) => br.clone(),
            None => return Err(RenderError::Launch("no browser".into())),
        }
    };
    let tab = browser
        .new_tab()
        .map_err(|e| RenderError::Browser(e.to_string()))?;
    let result = (|| {
        tab.set_default_timeout(policy.page_timeout);
        let g = guard.clone();
        tab.enable_request_interception(Arc::new(
            move |_t: Arc<headless_chrome::browser::transport::Transport>,
                  _s: headless_chrome::browser::transport::SessionId,
                  ev: headless_chrome::protocol::cdp::Fetch::events::RequestPausedEvent| {
                let req_url = &ev.params.request.url;
                match allowed(&g, req_url) {
                    Ok(()) => RequestPausedDecision::Continue(None),
                    Err(why) => {
                        tracing::info!(url = %req_url, reason = %why, "Chromium request refused");
                        RequestPausedDecision::Fail(FailRequest {
                            request_id: ev.params.request_id.clone(),
                            error_reason: ErrorReason::BlockedByClient,
                        })
                    }
                }
            },
        ))
        .map_err(|e| RenderError::Browser(e.to_string()))?;
        tab.enable_fetch(None, None)
            .map_err(|e| RenderError::Browser(e.to_string()))?;
        tab.navigate_to(url)
            .map_err(|e| RenderError::Browser(e.to_string()))?;
        let js = SETTLE_JS
            .replace("SETTLE", &policy.settle.as_millis().to_string())
            .replace(
                "CAP",
                &(policy.page_timeout.as_millis().saturating_sub(1000)).to_string(),
            );
        let v = tab
            .evaluate(&js, true)
            .map_err(|e| RenderError::Browser(e.to_string()))?;
        v.value
            .and_then(|v| v.as_str().map(str::to_string))
            .ok_or_else(|| RenderError::Browser("the page returned no document".into()))
    })();
    let _ = tab.close(false);
    result
}

/// The early check for one request from the page: scheme, host rules, and IP-literal hosts.
/// Names are not resolved here: the egress proxy ([`proxy`]) resolves and checks every
/// connection's addresses itself, so a lookup here would be the same work done twice, on
/// the CDP event path.
fn allowed(guard: &AddressGuard, raw: &str) -> Result<(), String> {
    let u = url::Url::parse(raw).map_err(|e| e.to_string())?;
    match u.scheme() {
        "data" | "blob" | "about" => return Ok(()),
        "http" | "https" => {}
        s => return Err(format!("scheme `{s}` is not allowed")),
    }
    guard.check_url(&u).map_err(|e| e.to_string())
}
