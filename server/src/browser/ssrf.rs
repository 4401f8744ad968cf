//! Server-side request forgery protection for the browser.
//!
//! A page, a redirect or an agent must not turn the browser against the network it runs in.
//! By default every address that is not globally routable is refused: loopback, RFC 1918
//! private, link-local (which holds the cloud metadata service 169.254.169.254), unique-local
//! IPv6, CGNAT (Alibaba's metadata 100.100.100.200), unspecified, multicast, reserved and
//! documentation ranges, and IPv6 forms that embed such an IPv4 address (mapped, NAT64, 6to4).
//! A policy can allow listed hosts or networks and block others outright.
//!
//! The check runs on the *resolved* address inside the HTTP client's DNS resolver
//! ([`GuardedResolver`]), so the address checked is the address connected to (no DNS
//! rebinding window), and it runs again for every redirect hop because each hop resolves
//! anew; URLs with IP literals, which skip DNS, are checked by [`AddressGuard::check_url`]
//! before the request and in the redirect policy.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use crate::policy::HostRules;

/// Why an address or URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// Only `http` and `https` are fetched.
    #[error("scheme `{0}` is not allowed (only http and https)")]
    Scheme(String),
    /// The URL has no host.
    #[error("the URL has no host")]
    NoHost,
    /// The host matched `browser.block_hosts`.
    #[error("host `{0}` is blocked by policy (browser.block_hosts)")]
    Blocked(String),
    /// The address is in a non-public range not allowed by `browser.allow_hosts`.
    #[error(
        "{}, which the policy does not allow (browser.allow_hosts)",
        describe(host, ip, kind)
    )]
    Private {
        /// Host as written in the URL.
        host: String,
        /// The refused address.
        ip: IpAddr,
        /// Which range, e.g. `loopback`.
        kind: &'static str,
    },
}

fn describe(host: &str, ip: &IpAddr, kind: &str) -> String {
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    if literal.parse::<IpAddr>().is_ok() {
        format!("{host} is a {kind} address")
    } else {
        format!("{host} resolves to {ip}, a {kind} address")
    }
}

/// Classifies an address: `None` for a globally routable one, else the name of its range.
pub fn non_public_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
        return Some("cloud-metadata");
    }
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_unspecified() || o[0] == 0 {
        Some("unspecified")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("shared (CGNAT)")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_broadcast()
        || o[0] >= 240
        || ip.is_documentation()
        || (o[0] == 198 && (o[1] & 0xfe) == 18)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
    {
        Some("reserved")
    } else {
        None
    }
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_v4(ip) {
        return v4_kind(v4);
    }
    let s = ip.segments();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if (s[0] & 0xfe00) == 0xfc00 {
        // fd00:ec2::254 (AWS's IPv6 metadata service) is in here too.
        Some("unique-local")
    } else if (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xffc0) == 0xfec0 {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) {
        Some("reserved")
    } else {
        None
    }
}

/// The IPv4 address an IPv6 address stands for, if any: IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && !(s[6] == 0 && s[7] <= 1) {
        return Some(tail());
    }
    if s[0] == 0x0064 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return Some(tail());
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

/// The policy's address rules, shared by the resolver and the redirect policy.
#[derive(Debug, Clone)]
pub struct AddressGuard {
    allow: HostRules,
    block: HostRules,
}

impl AddressGuard {
    /// A guard with the policy's allow and block lists.
    pub fn new(allow: HostRules, block: HostRules) -> Self {
        Self { allow, block }
    }

    /// Checks a host name before resolving it (block list by name).
    ///
    /// # Errors
    /// [`Refusal::Blocked`].
    pub fn check_name(&self, host: &str) -> Result<(), Refusal> {
        if self.block.matches_name(host) {
            return Err(Refusal::Blocked(host.to_string()));
        }
        Ok(())
    }

    /// Checks one address that `host` resolved to (or that `host` is, for IP literals).
    ///
    /// # Errors
    /// [`Refusal::Blocked`] or [`Refusal::Private`].
    pub fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), Refusal> {
        // Compare IPv4-mapped IPv6 addresses as the IPv4 address they are.
        let canon = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        if self.block.matches_ip(canon) || self.block.matches_ip(ip) {
            return Err(Refusal::Blocked(format!("{host} ({ip})")));
        }
        match non_public_kind(canon) {
            None => Ok(()),
            Some(_) if self.allow.matches_ip(canon) || self.allow.matches_ip(ip) => Ok(()),
            Some(_) if self.allow.matches_name(host) => Ok(()),
            Some(kind) => Err(Refusal::Private {
                host: host.to_string(),
                ip,
                kind,
            }),
        }
    }

    /// Checks a URL's scheme and host; IP-literal hosts are checked fully here, names are
    /// checked against the block list (their addresses are checked when resolved).
    ///
    /// # Errors
    /// Any [`Refusal`].
    pub fn check_url(&self, url: &url::Url) -> Result<(), Refusal> {
        match url.scheme() {
            "http" | "https" => {}
            other => return Err(Refusal::Scheme(other.to_string())),
        }
        match url.host() {
            None => Err(Refusal::NoHost),
            Some(url::Host::Ipv4(v4)) => self.check_ip(&v4.to_string(), IpAddr::V4(v4)),
            Some(url::Host::Ipv6(v6)) => self.check_ip(&format!("[{v6}]"), IpAddr::V6(v6)),
            Some(url::Host::Domain(d)) => {
                let d = d.to_ascii_lowercase();
                self.check_name(&d)?;
                // Names that are numbers in disguise never reach DNS unchecked: the url crate
                // already turns "2130706433" or "0x7f.1" into Ipv4 hosts for http(s).
                Ok(())
            }
        }
    }
}

/// A DNS resolver for reqwest that resolves with the system resolver and refuses the
/// connection unless every address passes the [`AddressGuard`].
///
/// All addresses are checked, not just the first: a name that resolves to one public and
/// one private address is refused, so a client falling back to the second cannot be steered.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    guard: Arc<AddressGuard>,
}

impl GuardedResolver {
    /// A resolver enforcing `guard`.
    pub fn new(guard: Arc<AddressGuard>) -> Self {
        Self { guard }
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.guard.clone();
        let host = name.as_str().to_ascii_lowercase();
        Box::pin(async move {
            guard.check_name(&host)?;
            let lookup_host = host.clone();
            let addrs: Vec<SocketAddr> = tokio::task::spawn_blocking(move || {
                (lookup_host.as_str(), 0u16)
                    .to_socket_addrs()
                    .map(|it| it.collect::<Vec<_>>())
            })
            .await
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)??;
            if addrs.is_empty() {
                return Err(format!("{host} has no addresses").into());
            }
            for a in &addrs {
                guard.check_ip(&host, a.ip())?;
            }
            let it: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(it)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip literal")
    }

    #[test]
    fn non_public_ranges_are_classified() {
        for (a, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.1.1", "link-local"),
            ("169.254.169.254", "cloud-metadata"),
            ("100.100.100.200", "cloud-metadata"),
            ("100.64.0.1", "shared (CGNAT)"),
            ("0.0.0.0", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("fc00::1", "unique-local"),
            ("fd00:ec2::254", "unique-local"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "cloud-metadata"),
            ("64:ff9b::a00:1", "private"),
            ("2002:c0a8:0101::1", "private"),
        ] {
            assert_eq!(non_public_kind(ip(a)), Some(kind), "{a}");
        }
        for a in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "2606:4700::1111",
            "100.128.0.1",
        ] {
            assert_eq!(non_public_kind(ip(a)), None, "{a}");
        }
    }

    fn guard(allow: &[&str], block: &[&str]) -> AddressGuard {
        let to = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let p = crate::policy::Policy::from_toml(
            &format!(
                "[browser]\nallow_hosts = {:?}\nblock_hosts = {:?}\n",
                to(allow),
                to(block)
            ),
            "t",
        )
        .expect("policy");
        AddressGuard::new(p.browser.allow, p.browser.block)
    }

    #[test]
    fn default_refuses_private_and_allows_public() {
        let g = guard(&[], &[]);
        assert!(matches!(
            g.check_ip("x", ip("127.0.0.1")),
            Err(Refusal::Private {
                kind: "loopback",
                ..
            })
        ));
        assert!(g.check_ip("x", ip("93.184.216.34")).is_ok());
        let u = |s: &str| url::Url::parse(s).expect("url");
        assert!(g.check_url(&u("http://127.0.0.1:8080/")).is_err());
        assert!(
            g.check_url(&u("http://2130706433/")).is_err(),
            "decimal IPv4 form"
        );
        assert!(g.check_url(&u("http://0x7f.1/")).is_err(), "hex IPv4 form");
        assert!(g.check_url(&u("http://[::ffff:7f00:1]/")).is_err());
        assert!(
            g.check_url(&u("http://169.254.169.254/latest/meta-data/"))
                .is_err()
        );
        assert!(matches!(
            g.check_url(&u("file:///etc/passwd")),
            Err(Refusal::Scheme(_))
        ));
        assert!(matches!(
            g.check_url(&u("ftp://example.com/")),
            Err(Refusal::Scheme(_))
        ));
    }

    #[test]
    fn allow_and_block_lists() {
        let g = guard(
            &["127.0.0.1", "intranet.test"],
            &["evil.test", "93.184.216.0/24"],
        );
        assert!(g.check_ip("127.0.0.1", ip("127.0.0.1")).is_ok());
        assert!(g.check_ip("127.0.0.2", ip("127.0.0.2")).is_err());
        assert!(g.check_ip("intranet.test", ip("10.0.0.5")).is_ok());
        assert!(matches!(
            g.check_name("evil.test"),
            Err(Refusal::Blocked(_))
        ));
        assert!(matches!(
            g.check_ip("example.com", ip("93.184.216.34")),
            Err(Refusal::Blocked(_))
        ));
    }
}
