//! The `[plugins]` policy section: where plugins come from, their default limits, and what
//! each one is granted. Raw serde types (refusing unknown keys) are checked into
//! [`PluginsPolicy`]; nothing is granted unless a `[plugins.grants.<name>]` table grants it.
//!
//! ```toml
//! [plugins]
//! dir = "/var/lib/sibyl/plugins"   # *.wasm components; empty disables plugins
//! reload_interval_ms = 1000         # hot-reload poll period; 0 loads once at start
//! require_pinned = true             # refuse plugins without a sha256 pin
//! pool_slots = 128                  # instances kept mapped and reused; 0 maps per call
//! [plugins.defaults]
//! memory_mib = 64
//! timeout_ms = 5000
//! [plugins.grants.json_api]
//! sha256 = "9f2c…"                  # the file's content hash (sha256sum)
//! allow_hosts = ["api.example.org"]
//! stateful = false                  # true: allows one instance per session (if json_api.toml declares it)
//! config = { base_url = "https://api.example.org/v1" }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::policy::{HostRules, PolicyError};

/// Raw `[plugins]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawPlugins {
    dir: String,
    reload_interval_ms: u64,
    require_pinned: bool,
    pool_slots: u64,
    defaults: RawLimits,
    grants: BTreeMap<String, RawGrant>,
}

impl Default for RawPlugins {
    fn default() -> Self {
        Self {
            dir: String::new(),
            reload_interval_ms: 1000,
            require_pinned: true,
            pool_slots: 128,
            defaults: RawLimits::default(),
            grants: BTreeMap::new(),
        }
    }
}

/// Raw `[plugins.defaults]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawLimits {
    memory_mib: Option<u64>,
    timeout_ms: Option<u64>,
    fuel: Option<u64>,
    max_instances: Option<u64>,
    http_timeout_ms: Option<u64>,
    max_response_bytes: Option<u64>,
}

/// Raw `[plugins.grants.<name>]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawGrant {
    sha256: Option<String>,
    allow_hosts: Vec<String>,
    scratch: bool,
    stateful: bool,
    paths: Vec<RawPath>,
    config: BTreeMap<String, String>,
    memory_mib: Option<u64>,
    timeout_ms: Option<u64>,
    fuel: Option<u64>,
    max_instances: Option<u64>,
    http_timeout_ms: Option<u64>,
    max_response_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPath {
    host: String,
    guest: String,
    #[serde(default)]
    write: bool,
}

/// Checked `[plugins]` section.
#[derive(Debug, Clone)]
pub struct PluginsPolicy {
    /// Directory scanned for `*.wasm` components; `None` disables plugins.
    pub dir: Option<PathBuf>,
    /// How often the directory is polled for changes; `None` loads once at start.
    pub reload_interval: Option<Duration>,
    /// Refuse plugins that have no `sha256` pin.
    pub require_pinned: bool,
    /// Plugin instances that may exist at once, with their linear memories and stacks
    /// reserved at start and reused from call to call (wasmtime's pooling allocator);
    /// `None` (`pool_slots = 0`) maps and unmaps them per call instead. Running calls and the
    /// instances kept for stateful plugins' sessions share the slots; when all are taken a
    /// call is refused with `RESOURCE_EXHAUSTED`.
    pub pool_slots: Option<u32>,
    /// Limits of plugins without their own values.
    pub defaults: PluginLimits,
    /// Grants by plugin name (the file stem: `calc.wasm` is `calc`).
    pub grants: BTreeMap<String, PluginGrant>,
}

/// Resource limits of one plugin call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginLimits {
    /// Linear memory an instance may grow to, in bytes (`memory_mib`).
    pub memory_bytes: usize,
    /// Wall-clock time of one call, enforced by epoch interruption (`timeout_ms`).
    pub timeout: Duration,
    /// Fuel (roughly wasm instructions) per call; `None` for unlimited (`fuel = 0`).
    pub fuel: Option<u64>,
    /// Calls of this plugin running at once; one more is `RESOURCE_EXHAUSTED`.
    pub max_instances: usize,
    /// Timeout of one `http.get` (`http_timeout_ms`).
    pub http_timeout: Duration,
    /// Largest HTTP response body handed to the plugin, in bytes.
    pub max_response_bytes: usize,
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            timeout: Duration::from_secs(5),
            fuel: None,
            max_instances: 16,
            http_timeout: Duration::from_secs(10),
            max_response_bytes: 4 << 20,
        }
    }
}

/// A host directory visible to a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGrant {
    /// Absolute host directory.
    pub host: PathBuf,
    /// Absolute guest path it appears at, e.g. `/data`.
    pub guest: String,
    /// Writable (else read-only).
    pub write: bool,
}

/// What one plugin may do. The default grants nothing.
#[derive(Debug, Clone, Default)]
pub struct PluginGrant {
    /// Lower-case hex sha256 the file must have, if pinned.
    pub sha256: Option<String>,
    /// Hosts `http.get` may reach; empty denies all HTTP. Listed loopback/private addresses
    /// are allowed past the SSRF rules; unlisted ones never are.
    pub allow_hosts: HostRules,
    /// The session's scratch directory is visible, read-write, as `/scratch`.
    pub scratch: bool,
    /// Allows per-session state: when the plugin's manifest also declares `stateful = true`,
    /// one instance is kept per session (state persists across the session's calls, never
    /// across sessions). A plugin declaring it without this consent is not loaded; without
    /// the declaration every call gets a fresh instance.
    pub stateful: bool,
    /// Other directories.
    pub paths: Vec<PathGrant>,
    /// Values for `config.get`.
    pub config: BTreeMap<String, String>,
    /// Limits (the defaults overridden by the grant's own values).
    pub limits: PluginLimits,
}

impl PluginsPolicy {
    /// The grant of plugin `name`: its table, or nothing granted with the default limits.
    pub fn grant_for(&self, name: &str) -> PluginGrant {
        self.grants
            .get(name)
            .cloned()
            .unwrap_or_else(|| PluginGrant {
                limits: self.defaults.clone(),
                ..PluginGrant::default()
            })
    }
}

/// True for a valid plugin or tool name: 1 to 64 of `a-z`, `0-9`, `_`, `-`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Checks the raw section.
///
/// # Errors
/// [`PolicyError::Invalid`] naming the key.
pub(crate) fn check(raw: &RawPlugins, origin: &str) -> Result<PluginsPolicy, PolicyError> {
    let bad = |key: String, message: String| PolicyError::Invalid {
        origin: origin.to_string(),
        key,
        message,
    };
    let range = |key: String, v: u64, lo: u64, hi: u64| -> Result<u64, PolicyError> {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(bad(key, format!("must be between {lo} and {hi}, got {v}")))
        }
    };
    let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let limits = |prefix: &str,
                  base: &PluginLimits,
                  memory_mib: Option<u64>,
                  timeout_ms: Option<u64>,
                  fuel: Option<u64>,
                  max_instances: Option<u64>,
                  http_timeout_ms: Option<u64>,
                  max_response_bytes: Option<u64>|
     -> Result<PluginLimits, PolicyError> {
        let mut l = base.clone();
        if let Some(v) = memory_mib {
            l.memory_bytes = to_usize(range(format!("{prefix}.memory_mib"), v, 1, 4096)?) << 20;
        }
        if let Some(v) = timeout_ms {
            l.timeout =
                Duration::from_millis(range(format!("{prefix}.timeout_ms"), v, 10, 600_000)?);
        }
        if let Some(v) = fuel {
            l.fuel = (v > 0).then_some(v);
        }
        if let Some(v) = max_instances {
            l.max_instances = to_usize(range(format!("{prefix}.max_instances"), v, 1, 100_000)?);
        }
        if let Some(v) = http_timeout_ms {
            l.http_timeout =
                Duration::from_millis(range(format!("{prefix}.http_timeout_ms"), v, 10, 600_000)?);
        }
        if let Some(v) = max_response_bytes {
            l.max_response_bytes = to_usize(range(
                format!("{prefix}.max_response_bytes"),
                v,
                1024,
                1 << 30,
            )?);
        }
        Ok(l)
    };
    let d = &raw.defaults;
    let defaults = limits(
        "plugins.defaults",
        &PluginLimits::default(),
        d.memory_mib,
        d.timeout_ms,
        d.fuel,
        d.max_instances,
        d.http_timeout_ms,
        d.max_response_bytes,
    )?;
    let dir = match raw.dir.trim() {
        "" => None,
        d if Path::new(d).is_absolute() => Some(PathBuf::from(d)),
        d => {
            return Err(bad(
                "plugins.dir".into(),
                format!("must be an absolute path, got `{d}`"),
            ));
        }
    };
    let mut grants = BTreeMap::new();
    for (name, g) in &raw.grants {
        let prefix = format!("plugins.grants.{name}");
        if !valid_name(name) {
            return Err(bad(
                prefix,
                "plugin names are 1-64 characters of a-z, 0-9, `_` and `-`".into(),
            ));
        }
        let sha256 = match &g.sha256 {
            None => None,
            Some(h) => {
                let h = h.trim().to_ascii_lowercase();
                if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad(
                        format!("{prefix}.sha256"),
                        "must be 64 hexadecimal digits (the output of sha256sum)".into(),
                    ));
                }
                Some(h)
            }
        };
        let mut paths = Vec::new();
        for (i, p) in g.paths.iter().enumerate() {
            let key = format!("{prefix}.paths[{i}]");
            if !Path::new(&p.host).is_absolute() {
                return Err(bad(key, format!("host `{}` must be absolute", p.host)));
            }
            if !p.guest.starts_with('/') || p.guest == "/scratch" || p.guest.contains("..") {
                return Err(bad(
                    key,
                    format!(
                        "guest `{}` must be absolute, without `..`, and not /scratch",
                        p.guest
                    ),
                ));
            }
            paths.push(PathGrant {
                host: PathBuf::from(&p.host),
                guest: p.guest.clone(),
                write: p.write,
            });
        }
        grants.insert(
            name.clone(),
            PluginGrant {
                sha256,
                allow_hosts: HostRules::parse(
                    &g.allow_hosts,
                    origin,
                    &format!("{prefix}.allow_hosts"),
                )?,
                scratch: g.scratch,
                stateful: g.stateful,
                paths,
                config: g.config.clone(),
                limits: limits(
                    &prefix,
                    &defaults,
                    g.memory_mib,
                    g.timeout_ms,
                    g.fuel,
                    g.max_instances,
                    g.http_timeout_ms,
                    g.max_response_bytes,
                )?,
            },
        );
    }
    Ok(PluginsPolicy {
        dir,
        reload_interval: (raw.reload_interval_ms > 0)
            .then(|| Duration::from_millis(raw.reload_interval_ms.clamp(50, 3_600_000))),
        require_pinned: raw.require_pinned,
        pool_slots: match range("plugins.pool_slots".into(), raw.pool_slots, 0, 100_000)? {
            0 => None,
            n => Some(u32::try_from(n).unwrap_or(u32::MAX)),
        },
        defaults,
        grants,
    })
}

#[cfg(test)]
mod tests {
    use crate::Policy;

    fn err(text: &str) -> String {
        match Policy::from_toml(text, "t.toml") {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn grants_parse_and_default_to_nothing() {
        let p = Policy::from_toml(
            "[plugins]\ndir = \"/p\"\n[plugins.defaults]\ntimeout_ms = 100\n[plugins.grants.calc]\nsha256 = \"AB\"\n",
            "t",
        )
        .err();
        assert!(p.is_some_and(|e| e.to_string().contains("plugins.grants.calc.sha256")));
        let p = Policy::from_toml(
            "[plugins]\ndir = \"/p\"\n[plugins.defaults]\ntimeout_ms = 100\n[plugins.grants.api]\nallow_hosts = [\"127.0.0.1\"]\nmemory_mib = 8\nconfig = { base = \"x\" }\n",
            "t",
        )
        .expect("policy");
        let g = p.plugins.grant_for("api");
        assert_eq!(g.limits.memory_bytes, 8 << 20);
        assert_eq!(g.limits.timeout.as_millis(), 100);
        assert!(g.allow_hosts.matches_ip("127.0.0.1".parse().expect("ip")));
        let other = p.plugins.grant_for("other");
        assert!(other.allow_hosts.is_empty() && !other.scratch && other.paths.is_empty());
        assert!(other.config.is_empty());
        assert!(p.plugins.require_pinned);
        assert_eq!(p.plugins.pool_slots, Some(128));
        let p = Policy::from_toml("[plugins]\npool_slots = 0\n", "t").expect("policy");
        assert_eq!(p.plugins.pool_slots, None);
    }

    #[test]
    fn bad_plugin_keys_are_named() {
        assert!(err("[plugins]\ndir = \"rel\"\n").contains("plugins.dir"));
        assert!(err("[plugins.grants.x]\nallow = []\n").contains("allow"));
        assert!(
            err("[plugins.grants.x]\nmemory_mib = 0\n").contains("plugins.grants.x.memory_mib")
        );
        assert!(err("[plugins.grants.X]\n").contains("plugins.grants.X"));
        assert!(err("[plugins]\npool_slots = 100001\n").contains("plugins.pool_slots"));
        assert!(
            err("[plugins.grants.x]\nallow_hosts = [\"bad host\"]\n")
                .contains("plugins.grants.x.allow_hosts[0]")
        );
        assert!(
            err("[plugins.grants.x]\npaths = [{ host = \"/a\", guest = \"/scratch\" }]\n")
                .contains("plugins.grants.x.paths[0]")
        );
    }
}
