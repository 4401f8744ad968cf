//! Sandbox policies: the TOML files in `sandbox-policies/`, loaded in two stages.
//!
//! A file is first deserialized into raw serde types that refuse unknown keys (so a typo such
//! as `viewport_sise` is an error naming the key, not a silently ignored setting), then
//! checked into [`Policy`], whose fields are validated, typed limits. Nothing runs on a policy
//! that has not passed both stages (the two-stage pattern of ripgrep's configuration).
//!
//! The format is documented in `sandbox-policies/README.md`; `default.toml` (embedded in the
//! binary as [`DEFAULT_POLICY_TOML`]) is safe for production and `dev.toml` allows loopback.
//!
//! Tables: `[server]`, `[sessions]`, `[browser]` (with `[browser.extract]`,
//! `[browser.render]`), `[search]`, `[runner]` and `[plugins]`; each area checks its own table
//! in its own module. Tenants will add per-tenant tables; a policy that names a table this
//! build does not know is refused.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use ipnet::IpNet;

/// The production-safe default policy, `sandbox-policies/default.toml`, compiled in.
pub const DEFAULT_POLICY_TOML: &str = include_str!("../../sandbox-policies/default.toml");

/// Why a policy was refused. The message always names the offending key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read policy file {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown key, or a value of the wrong type.
    #[error("invalid policy {origin}: {message}")]
    Parse {
        /// File path or `<embedded default>`.
        origin: String,
        /// The TOML parser's message (with line, column and the key).
        message: String,
    },
    /// A value parsed but is out of range or inconsistent.
    #[error("invalid policy {origin}: key `{key}`: {message}")]
    Invalid {
        /// File path or `<embedded default>`.
        origin: String,
        /// Dotted key path, e.g. `browser.viewport_size`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

mod raw {
    //! Serde shapes of the TOML file. Every table refuses unknown keys.
    use serde::Deserialize;

    #[derive(Debug, Deserialize, Default)]
    #[serde(deny_unknown_fields, default)]
    pub struct Policy {
        pub server: Server,
        pub sessions: Sessions,
        pub browser: Browser,
        pub runner: crate::runner::policy::raw::Runner,
        pub plugins: crate::plugin::policy::RawPlugins,
        pub search: crate::browser::search::RawSearchPolicy,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct Server {
        pub max_concurrent_calls: u64,
        pub max_request_bytes: u64,
    }

    impl Default for Server {
        fn default() -> Self {
            Self {
                max_concurrent_calls: 256,
                max_request_bytes: 1 << 20,
            }
        }
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct Sessions {
        pub idle_ttl_secs: u64,
        pub max_sessions: u64,
        pub scratch_root: String,
    }

    impl Default for Sessions {
        fn default() -> Self {
            Self {
                idle_ttl_secs: 900,
                max_sessions: 1024,
                scratch_root: String::new(),
            }
        }
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct Browser {
        pub viewport_size: u64,
        pub connect_timeout_ms: u64,
        pub request_timeout_ms: u64,
        pub max_response_bytes: u64,
        pub max_redirects: u64,
        pub user_agent: String,
        pub allow_hosts: Vec<String>,
        pub block_hosts: Vec<String>,
        pub main_content: String,
        pub extract: crate::browser::extract::RawExtractPolicy,
        pub render: crate::browser::render::RawRenderPolicy,
    }

    impl Default for Browser {
        fn default() -> Self {
            Self {
                viewport_size: 8192,
                connect_timeout_ms: 10_000,
                request_timeout_ms: 30_000,
                max_response_bytes: 20 << 20,
                max_redirects: 10,
                user_agent: super::DEFAULT_USER_AGENT.to_string(),
                allow_hosts: Vec::new(),
                block_hosts: Vec::new(),
                main_content: "auto".into(),
                extract: Default::default(),
                render: Default::default(),
            }
        }
    }
}

/// The user agent sent when a policy names none: a current desktop Chrome, as Sibyl's
/// browser sent (many sites serve a stripped page to unknown agents).
pub const DEFAULT_USER_AGENT: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 sibyl/0.1";

/// A checked policy: every limit the server enforces.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Server-wide limits.
    pub server: ServerPolicy,
    /// Session lifetime and count.
    pub sessions: SessionPolicy,
    /// The text browser.
    pub browser: BrowserPolicy,
    /// The Python runners (`[runner]`, see [`crate::runner::policy`]).
    pub runner: crate::runner::RunnerPolicy,
    /// WebAssembly plugin tools (`[plugins]`).
    pub plugins: crate::plugin::policy::PluginsPolicy,
    /// Web search (`[search]`).
    pub search: crate::browser::search::SearchPolicy,
}

/// Server-wide limits (`[server]`).
#[derive(Debug, Clone)]
pub struct ServerPolicy {
    /// Calls running at once across all clients; one more is `RESOURCE_EXHAUSTED`.
    pub max_concurrent_calls: usize,
    /// Largest gRPC request message accepted, in bytes.
    pub max_request_bytes: usize,
}

/// Session limits (`[sessions]`).
#[derive(Debug, Clone)]
pub struct SessionPolicy {
    /// A session with no call for this long is closed.
    pub idle_ttl: Duration,
    /// Sessions open at once on this server; one more is `RESOURCE_EXHAUSTED`.
    pub max_sessions: usize,
    /// Directory under which each session's scratch directory is made; `None` for the
    /// system temporary directory.
    pub scratch_root: Option<std::path::PathBuf>,
}

/// Browser limits and address rules (`[browser]`).
#[derive(Debug, Clone)]
pub struct BrowserPolicy {
    /// Characters per viewport (AutoGen's default 8192; Sibyl used 16384).
    pub viewport_size: usize,
    /// TCP + TLS connect timeout.
    pub connect_timeout: Duration,
    /// Whole-request timeout, from sending the request to the last body byte.
    pub request_timeout: Duration,
    /// Largest response body accepted, in bytes, counted after decompression.
    pub max_response_bytes: usize,
    /// Redirects followed before giving up.
    pub max_redirects: usize,
    /// `User-Agent` header value.
    pub user_agent: String,
    /// Hosts and networks allowed even though they are loopback/private/link-local.
    pub allow: HostRules,
    /// Hosts and networks always refused.
    pub block: HostRules,
    /// Whole page or main content only, for HTML pages (`main_content`).
    pub main_content: crate::browser::convert::MainContent,
    /// File extraction limits (`[browser.extract]`).
    pub extract: crate::browser::extract::ExtractPolicy,
    /// JavaScript rendering with Chromium (`[browser.render]`).
    pub render: crate::browser::render::RenderPolicy,
}

/// A list of host rules: exact host names, `*.suffix` wildcards, IP addresses and CIDR networks.
#[derive(Debug, Clone, Default)]
pub struct HostRules {
    /// Lower-case exact host names.
    pub names: Vec<String>,
    /// Lower-case suffixes from `*.example.com` entries (stored as `.example.com`).
    pub suffixes: Vec<String>,
    /// Networks; a single address is stored as a /32 or /128.
    pub nets: Vec<IpNet>,
}

impl HostRules {
    pub(crate) fn parse(entries: &[String], origin: &str, key: &str) -> Result<Self, PolicyError> {
        let mut rules = HostRules::default();
        for (i, raw) in entries.iter().enumerate() {
            let e = raw.trim().to_ascii_lowercase();
            let e = e.trim_start_matches('[').trim_end_matches(']').to_string();
            let bad = |message: String| PolicyError::Invalid {
                origin: origin.to_string(),
                key: format!("{key}[{i}]"),
                message,
            };
            if e.is_empty() {
                return Err(bad("empty host entry".into()));
            }
            if let Ok(net) = e.parse::<IpNet>() {
                rules.nets.push(net.trunc());
            } else if let Ok(ip) = e.parse::<IpAddr>() {
                rules.nets.push(IpNet::from(ip));
            } else if let Some(suffix) = e.strip_prefix("*.") {
                if !valid_hostname(suffix) {
                    return Err(bad(format!("`{raw}` is not a valid `*.domain` wildcard")));
                }
                rules.suffixes.push(format!(".{suffix}"));
            } else if valid_hostname(&e) {
                rules.names.push(e);
            } else {
                return Err(bad(format!(
                    "`{raw}` is neither a host name, `*.domain`, an IP address nor a CIDR network"
                )));
            }
        }
        Ok(rules)
    }

    /// True when `host` (a lower-case name, without brackets) matches a name or suffix rule.
    pub fn matches_name(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.names.iter().any(|n| n == host)
            || self
                .suffixes
                .iter()
                .any(|s| host.ends_with(s.as_str()) || host == &s[1..])
    }

    /// True when `ip` lies in one of the networks.
    pub fn matches_ip(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// True when there are no rules at all.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.suffixes.is_empty() && self.nets.is_empty()
    }
}

fn valid_hostname(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

impl Policy {
    /// The embedded production-safe default policy.
    ///
    /// # Errors
    /// Only if the embedded file is broken, which the test suite rules out.
    pub fn embedded_default() -> Result<Self, PolicyError> {
        Self::from_toml(DEFAULT_POLICY_TOML, "<embedded default>")
    }

    /// Reads and checks a policy file.
    ///
    /// # Errors
    /// [`PolicyError`] naming the file and the bad key.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Parses and checks policy TOML text; `origin` names it in errors.
    ///
    /// # Errors
    /// [`PolicyError::Parse`] for malformed TOML or unknown keys, [`PolicyError::Invalid`]
    /// for values out of range.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, PolicyError> {
        let raw: raw::Policy = toml::from_str(text).map_err(|e| PolicyError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        Self::check(raw, origin)
    }

    fn check(raw: raw::Policy, origin: &str) -> Result<Self, PolicyError> {
        let range = |key: &str, v: u64, lo: u64, hi: u64| -> Result<u64, PolicyError> {
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(PolicyError::Invalid {
                    origin: origin.to_string(),
                    key: key.to_string(),
                    message: format!("must be between {lo} and {hi}, got {v}"),
                })
            }
        };
        let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let b = &raw.browser;
        if b.user_agent.trim().is_empty() || b.user_agent.chars().any(|c| c.is_control()) {
            return Err(PolicyError::Invalid {
                origin: origin.to_string(),
                key: "browser.user_agent".into(),
                message: "must be non-empty printable text".into(),
            });
        }
        Ok(Policy {
            runner: crate::runner::policy::check(&raw.runner, origin)?,
            search: crate::browser::search::SearchPolicy::check(&raw.search, origin)?,
            server: ServerPolicy {
                max_concurrent_calls: to_usize(range(
                    "server.max_concurrent_calls",
                    raw.server.max_concurrent_calls,
                    1,
                    1_000_000,
                )?),
                max_request_bytes: to_usize(range(
                    "server.max_request_bytes",
                    raw.server.max_request_bytes,
                    1024,
                    64 << 20,
                )?),
            },
            sessions: SessionPolicy {
                idle_ttl: Duration::from_secs(range(
                    "sessions.idle_ttl_secs",
                    raw.sessions.idle_ttl_secs,
                    1,
                    7 * 24 * 3600,
                )?),
                max_sessions: to_usize(range(
                    "sessions.max_sessions",
                    raw.sessions.max_sessions,
                    1,
                    10_000_000,
                )?),
                scratch_root: {
                    let r = raw.sessions.scratch_root.trim();
                    if r.is_empty() {
                        None
                    } else if !Path::new(r).is_absolute() {
                        return Err(PolicyError::Invalid {
                            origin: origin.to_string(),
                            key: "sessions.scratch_root".into(),
                            message: format!("must be an absolute path, got `{r}`"),
                        });
                    } else {
                        Some(std::path::PathBuf::from(r))
                    }
                },
            },
            browser: BrowserPolicy {
                viewport_size: to_usize(range(
                    "browser.viewport_size",
                    b.viewport_size,
                    256,
                    1 << 20,
                )?),
                connect_timeout: Duration::from_millis(range(
                    "browser.connect_timeout_ms",
                    b.connect_timeout_ms,
                    10,
                    300_000,
                )?),
                request_timeout: Duration::from_millis(range(
                    "browser.request_timeout_ms",
                    b.request_timeout_ms,
                    10,
                    600_000,
                )?),
                max_response_bytes: to_usize(range(
                    "browser.max_response_bytes",
                    b.max_response_bytes,
                    1024,
                    1 << 30,
                )?),
                max_redirects: to_usize(range("browser.max_redirects", b.max_redirects, 0, 50)?),
                user_agent: b.user_agent.clone(),
                allow: HostRules::parse(&b.allow_hosts, origin, "browser.allow_hosts")?,
                block: HostRules::parse(&b.block_hosts, origin, "browser.block_hosts")?,
                main_content: crate::browser::convert::MainContent::parse(&b.main_content)
                    .map_err(|message| PolicyError::Invalid {
                        origin: origin.to_string(),
                        key: "browser.main_content".into(),
                        message,
                    })?,
                extract: crate::browser::extract::ExtractPolicy::check(&b.extract, origin)?,
                render: crate::browser::render::RenderPolicy::check(&b.render, origin)?,
            },
            plugins: crate::plugin::policy::check(&raw.plugins, origin)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        match Policy::from_toml(text, "t.toml") {
            Ok(_) => panic!("policy unexpectedly accepted:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn shipped_policies_parse() {
        let d = Policy::embedded_default().expect("default.toml");
        assert!(
            d.browser.allow.is_empty(),
            "default must not allow private hosts"
        );
        let dev = Policy::from_toml(include_str!("../../sandbox-policies/dev.toml"), "dev.toml")
            .expect("dev.toml");
        let pd = Policy::from_toml(
            include_str!("../../sandbox-policies/plugins-dev.toml"),
            "plugins-dev.toml",
        )
        .expect("plugins-dev.toml");
        assert!(pd.plugins.dir.is_some() && d.plugins.dir.is_none());
        assert!(
            dev.browser
                .allow
                .matches_ip("127.0.0.1".parse().expect("ip"))
        );
    }

    #[test]
    fn unknown_key_is_named() {
        let e = err("[browser]\nviewport_sise = 10\n");
        assert!(e.contains("viewport_sise"), "{e}");
        let e = err("[browserr]\n");
        assert!(e.contains("browserr"), "{e}");
    }

    #[test]
    fn out_of_range_is_named() {
        let e = err("[browser]\nviewport_size = 0\n");
        assert!(e.contains("browser.viewport_size"), "{e}");
        let e = err("[sessions]\nidle_ttl_secs = 0\n");
        assert!(e.contains("sessions.idle_ttl_secs"), "{e}");
    }

    #[test]
    fn main_content_is_checked() {
        let e = err("[browser]\nmain_content = \"article\"\n");
        assert!(
            e.contains("browser.main_content") && e.contains("off or auto"),
            "{e}"
        );
        let p = Policy::from_toml("[browser]\nmain_content = \"auto\"\n", "t").expect("auto");
        assert_eq!(
            p.browser.main_content,
            crate::browser::convert::MainContent::Auto
        );
    }

    #[test]
    fn wrong_type_is_named() {
        let e = err("[browser]\nviewport_size = \"big\"\n");
        assert!(e.contains("viewport_size"), "{e}");
    }

    #[test]
    fn host_rules_parse_and_match() {
        let p = Policy::from_toml(
            "[browser]\nallow_hosts = [\"127.0.0.1\", \"10.0.0.0/8\", \"intranet.example\", \"*.corp.example\", \"[::1]\"]\n",
            "t",
        )
        .expect("policy");
        let a = &p.browser.allow;
        assert!(a.matches_ip("127.0.0.1".parse().expect("ip")));
        assert!(!a.matches_ip("127.0.0.2".parse().expect("ip")));
        assert!(a.matches_ip("10.1.2.3".parse().expect("ip")));
        assert!(a.matches_ip("::1".parse().expect("ip")));
        assert!(a.matches_name("intranet.example"));
        assert!(a.matches_name("a.b.corp.example"));
        assert!(a.matches_name("corp.example"));
        assert!(!a.matches_name("evilcorp.example"));
        let e = err("[browser]\nallow_hosts = [\"not a host!\"]\n");
        assert!(e.contains("browser.allow_hosts[0]"), "{e}");
    }
}
