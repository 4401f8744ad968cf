//! The egress proxy every Chromium connection goes through (`--proxy-server`), so that the
//! browser's address rules hold for *all* of a page's traffic, not only for what CDP's request
//! interception sees: WebSockets (`ws:`/`wss:`, which Chromium tunnels with `CONNECT`),
//! service-worker and preconnect traffic, and every later DNS answer.
//!
//! The proxy resolves each host itself, checks every address with the [`AddressGuard`]
//! (as the HTTP client's resolver does) and connects to exactly the addresses it checked, so
//! a name that re-resolves to a private address between the check and the connection
//! (DNS rebinding) gets nowhere: Chromium never resolves names for proxied requests.
//!
//! Protocol (RFC 9110 §9.3.6 and §7.1, HTTP/1.1 only):
//! - `CONNECT host:port` (https, wss, ws): checked, connected, `200`, then bytes are copied
//!   both ways.
//! - `GET http://host:port/path` (absolute form, plain http): checked, connected, the request
//!   is sent in origin form with `Connection: close` (so a kept-alive client connection can
//!   never carry a second request to another host), then bytes are copied both ways.
//! - A refused or unreachable target gets `403` / `502` with a one-line reason.
//!
//! Limits: request heads up to 16 KiB read within 10 s; 256 connections at once; a connect
//! timeout of 10 s.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::browser::ssrf::AddressGuard;

const MAX_HEAD: usize = 16 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_CONNECTIONS: usize = 256;

/// A running proxy on `127.0.0.1:<port>`, stopped when dropped.
#[derive(Debug)]
pub struct EgressProxy {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl EgressProxy {
    /// Starts the proxy on its own thread (a single-threaded tokio runtime), listening on an
    /// ephemeral loopback port.
    ///
    /// # Errors
    /// The listener or the thread could not be created.
    pub fn start(guard: Arc<AddressGuard>) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("sibyl-chromium-proxy".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "Chromium egress proxy cannot listen");
                            return;
                        }
                    };
                    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
                    tokio::select! {
                        _ = stopped => {}
                        () = accept_loop(listener, guard, slots) => {}
                    }
                });
            })?;
        Ok(Self {
            addr,
            stop: Some(stop),
        })
    }

    /// The address to give Chromium as `--proxy-server=http://ADDR`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    guard: Arc<AddressGuard>,
    slots: Arc<tokio::sync::Semaphore>,
) {
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = conn.set_nodelay(true);
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!("Chromium egress proxy: too many connections; one refused");
            continue;
        };
        let guard = guard.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = serve(conn, &guard).await {
                tracing::debug!(error = %e, "Chromium egress proxy connection ended");
            }
        });
    }
}

/// Why a proxied request was not forwarded: the HTTP status and a one-line reason.
struct Refused(u16, String);

async fn serve(mut client: TcpStream, guard: &AddressGuard) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head_len = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client, &mut buf)).await
    {
        Ok(Ok(Some(n))) => n,
        Ok(Ok(None)) => return Ok(()),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Ok(()),
    };
    match forward(&buf, head_len, guard).await {
        Ok((mut upstream, preface)) => {
            if preface.is_empty() {
                client
                    .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    .await?;
            } else {
                upstream.write_all(&preface).await?;
            }
            tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
            Ok(())
        }
        Err(Refused(code, why)) => {
            tracing::info!(reason = %why, "Chromium request refused by the egress proxy");
            let reason = if code == 403 {
                "Forbidden"
            } else {
                "Bad Gateway"
            };
            let body = format!("sibyl: {why}\n");
            let reply = format!(
                "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            client.write_all(reply.as_bytes()).await?;
            client.shutdown().await
        }
    }
}

/// Reads until the end of the request head; `Some(head length)`, `None` if the client left.
async fn read_head(client: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(i + 4));
        }
        if buf.len() >= MAX_HEAD {
            return Err(std::io::Error::other("request head over 16 KiB"));
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Parses the head in `buf[..head_len]`, checks and connects the target. Returns the upstream
/// connection and what to send it first: empty for `CONNECT` (the client gets `200`), the
/// rewritten request plus any body bytes already read otherwise.
async fn forward(
    buf: &[u8],
    head_len: usize,
    guard: &AddressGuard,
) -> Result<(TcpStream, Vec<u8>), Refused> {
    let mut headers = [httparse::EMPTY_HEADER; 96];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(&buf[..head_len]) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(Refused(400, "malformed proxy request".into())),
    }
    let method = req.method.unwrap_or("");
    let target = req.path.unwrap_or("");
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(target)
            .ok_or_else(|| Refused(400, format!("bad CONNECT target `{target}`")))?;
        let upstream = connect_checked(guard, &host, port).await?;
        return Ok((upstream, Vec::new()));
    }
    let url = url::Url::parse(target)
        .map_err(|_| Refused(400, format!("not an absolute http URL: `{target}`")))?;
    if url.scheme() != "http" {
        return Err(Refused(
            403,
            format!("scheme `{}` is not proxied", url.scheme()),
        ));
    }
    let host = url
        .host_str()
        .ok_or_else(|| Refused(400, "URL without a host".into()))?
        .trim_matches(['[', ']'])
        .to_string();
    let port = url.port_or_known_default().unwrap_or(80);
    let upstream = connect_checked(guard, &host, port).await?;
    let mut path = url.path().to_string();
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "connection" | "proxy-connection" | "keep-alive" | "proxy-authorization"
        ) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out.extend_from_slice(&buf[head_len..]);
    Ok((upstream, out))
}

/// `host:port` or `[v6]:port`.
fn split_authority(target: &str) -> Option<(String, u16)> {
    let (host, port) = target.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

/// Resolves `host` (unless it is an address), checks every address against the guard (all
/// must pass, as in the HTTP client's resolver) and connects to one of exactly those.
async fn connect_checked(
    guard: &AddressGuard,
    host: &str,
    port: u16,
) -> Result<TcpStream, Refused> {
    let addrs: Vec<SocketAddr> = if let Ok(ip) = host.parse::<IpAddr>() {
        vec![SocketAddr::new(ip, port)]
    } else {
        guard
            .check_name(host)
            .map_err(|e| Refused(403, e.to_string()))?;
        tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| Refused(502, format!("cannot resolve {host}: {e}")))?
            .collect()
    };
    if addrs.is_empty() {
        return Err(Refused(502, format!("{host} has no addresses")));
    }
    for a in &addrs {
        guard
            .check_ip(host, a.ip())
            .map_err(|e| Refused(403, e.to_string()))?;
    }
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addrs[..])).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(Refused(
            502,
            format!("cannot connect to {host}:{port}: {e}"),
        )),
        Err(_) => Err(Refused(
            502,
            format!("connecting to {host}:{port} timed out"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::HostRules;

    fn guard(allow: &[&str]) -> Arc<AddressGuard> {
        let allow = HostRules::parse(
            &allow.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "<test>",
            "allow_hosts",
        )
        .expect("rules");
        let block = HostRules::parse(&[], "<test>", "block_hosts").expect("rules");
        Arc::new(AddressGuard::new(allow, block))
    }

    async fn raw(proxy: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(proxy).await.expect("proxy");
        s.write_all(request.as_bytes()).await.expect("write");
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn refuses_non_public_targets_and_forwards_allowed_ones() {
        // An allowed upstream on 127.0.0.1 answering one request.
        let up = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let up_addr = up.local_addr().expect("addr");
        let upstream = tokio::spawn(async move {
            let (mut c, _) = up.accept().await.expect("accept");
            let mut b = vec![0u8; 4096];
            let n = c.read(&mut b).await.expect("read");
            let head = String::from_utf8_lossy(&b[..n]).into_owned();
            c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
                .expect("reply");
            head
        });
        // A forbidden one on 127.0.0.2 that must never be reached.
        let secret = TcpListener::bind("127.0.0.2:0").await.expect("bind");
        let secret_addr = secret.local_addr().expect("addr");

        let proxy = EgressProxy::start(guard(&["127.0.0.1"])).expect("proxy");
        let p = proxy.addr();

        let r = raw(
            p,
            &format!("CONNECT {secret_addr} HTTP/1.1\r\nHost: {secret_addr}\r\n\r\n"),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        assert!(r.contains("loopback"), "{r}");
        let r = raw(
            p,
            &format!("GET http://{secret_addr}/x HTTP/1.1\r\nHost: {secret_addr}\r\n\r\n"),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        let r = raw(p, "CONNECT [::1]:9 HTTP/1.1\r\nHost: [::1]:9\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        let r = raw(
            p,
            "CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n",
        )
        .await;
        assert!(r.contains("cloud-metadata"), "{r}");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), secret.accept())
                .await
                .is_err(),
            "the forbidden listener was reached"
        );

        let r = raw(
            p,
            &format!(
                "GET http://{up_addr}/page?q=1 HTTP/1.1\r\nHost: {up_addr}\r\n\
                 Proxy-Connection: keep-alive\r\n\r\n"
            ),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.ends_with("ok"), "{r}");
        let head = upstream.await.expect("upstream");
        assert!(head.starts_with("GET /page?q=1 HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("Connection: close\r\n"), "{head}");
        assert!(
            !head.to_ascii_lowercase().contains("proxy-connection"),
            "{head}"
        );

        let r = raw(p, "garbage\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    }
}
