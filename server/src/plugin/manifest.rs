//! A plugin's manifest: `NAME.toml` beside `NAME.wasm` in the plugins directory, written by
//! the plugin's author. It pins the component's content hash, declares whether the plugin
//! keeps per-session state, and lists what the plugin needs from the policy. Nothing in it
//! grants anything: the policy alone grants; the manifest only lets the server refuse a
//! file that is not the one the author shipped (a mismatched or half-copied `.wasm`) and say
//! when the policy grants less than the plugin asks for.
//!
//! ```toml
//! # json_api.toml, the manifest of json_api.wasm
//! sha256 = "9f2c…"                # required: sha256sum of json_api.wasm (64 hex digits)
//! version = "0.1.0"               # optional, for logs and diagnostics
//! stateful = false                # optional: one instance per session (the policy must allow it)
//! [requests]                      # optional: what the plugin needs to work
//! allow_hosts = ["api.example.org"]
//! scratch = false
//! paths = [{ guest = "/data", write = false }]
//! config = ["base_url"]
//! memory_mib = 16
//! timeout_ms = 5000
//! ```
//!
//! Like the policy, the file is read in two stages: raw serde types that refuse unknown keys
//! and wrong types, then checked into a [`Manifest`] (hash format, host entries, paths,
//! ranges). Every problem is a [`ManifestError`] naming the file and the key; the loader turns
//! it into a diagnostic and skips the plugin.

use serde::Deserialize;

use crate::plugin::policy::PluginGrant;
use crate::policy::{HostRules, PolicyError};

/// Largest manifest file accepted, in bytes.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 10;

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Not TOML, an unknown key, or a value of the wrong type (the message says where).
    #[error("invalid manifest {file}: {message}")]
    Parse {
        /// The manifest's file name.
        file: String,
        /// The TOML parser's message, with line and column.
        message: String,
    },
    /// A key's value is out of range or malformed.
    #[error("invalid manifest {file}: `{key}` {message}")]
    Invalid {
        /// The manifest's file name.
        file: String,
        /// The key, e.g. `requests.allow_hosts[0]`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

/// Raw manifest, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    sha256: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    stateful: bool,
    #[serde(default)]
    requests: RawRequests,
}

/// Raw `[requests]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawRequests {
    allow_hosts: Vec<String>,
    scratch: bool,
    paths: Vec<RawPathRequest>,
    config: Vec<String>,
    memory_mib: Option<u64>,
    timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPathRequest {
    guest: String,
    #[serde(default)]
    write: bool,
}

/// A checked manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Lower-case hex sha256 the component file must have.
    pub sha256: String,
    /// The author's version string (1-64 printable characters), if given.
    pub version: Option<String>,
    /// The plugin declares itself per-session stateful: it expects its memory to persist
    /// across one session's calls. Kept only if the policy also allows it.
    pub stateful: bool,
    /// What the plugin asks the policy for.
    pub requests: Requests,
}

/// What a plugin needs from its grant to work. Informational: compared with the grant to
/// report shortfalls, never granted from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    /// Host entries for `http.get`, in the policy's forms (`name`, `*.domain`, IP, CIDR),
    /// lower-cased.
    pub allow_hosts: Vec<String>,
    /// The session's `/scratch`.
    pub scratch: bool,
    /// Guest paths, and whether each must be writable.
    pub paths: Vec<(String, bool)>,
    /// Keys the plugin reads with `config.get`.
    pub config: Vec<String>,
    /// Linear memory it needs, in MiB.
    pub memory_mib: Option<u64>,
    /// Time one call may need, in milliseconds.
    pub timeout_ms: Option<u64>,
}

impl Manifest {
    /// Parses and checks manifest text; `file` names it in errors.
    ///
    /// # Errors
    /// [`ManifestError::Parse`] for malformed TOML, unknown keys or wrong types (the missing
    /// `sha256` too), [`ManifestError::Invalid`] for a malformed value.
    pub fn from_toml(text: &str, file: &str) -> Result<Self, ManifestError> {
        let raw: RawManifest = toml::from_str(text).map_err(|e| ManifestError::Parse {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        let bad = |key: &str, message: String| ManifestError::Invalid {
            file: file.to_string(),
            key: key.to_string(),
            message,
        };
        let sha256 = raw.sha256.trim().to_ascii_lowercase();
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(
                "sha256",
                format!(
                    "must be 64 hexadecimal digits (the output of sha256sum), got `{}`",
                    raw.sha256.chars().take(80).collect::<String>()
                ),
            ));
        }
        if let Some(v) = &raw.version
            && (v.is_empty() || v.len() > 64 || v.chars().any(char::is_control))
        {
            return Err(bad(
                "version",
                "must be 1-64 characters without control characters".into(),
            ));
        }
        let r = raw.requests;
        // Validated with the policy's own parser, so a request can always be copied into a
        // grant as written.
        HostRules::parse(&r.allow_hosts, file, "requests.allow_hosts").map_err(|e| match e {
            PolicyError::Invalid { key, message, .. } => bad(&key, message),
            other => bad("requests.allow_hosts", other.to_string()),
        })?;
        let mut paths = Vec::new();
        for (i, p) in r.paths.iter().enumerate() {
            if !p.guest.starts_with('/') || p.guest == "/scratch" || p.guest.contains("..") {
                return Err(bad(
                    &format!("requests.paths[{i}].guest"),
                    format!(
                        "`{}` must be absolute, without `..`, and not /scratch (use `scratch = true`)",
                        p.guest
                    ),
                ));
            }
            paths.push((p.guest.clone(), p.write));
        }
        for (i, k) in r.config.iter().enumerate() {
            if k.is_empty() || k.len() > 256 {
                return Err(bad(
                    &format!("requests.config[{i}]"),
                    "must be a key of 1-256 bytes".into(),
                ));
            }
        }
        if let Some(m) = r.memory_mib
            && !(1..=4096).contains(&m)
        {
            return Err(bad(
                "requests.memory_mib",
                format!("must be between 1 and 4096, got {m}"),
            ));
        }
        if let Some(t) = r.timeout_ms
            && !(10..=600_000).contains(&t)
        {
            return Err(bad(
                "requests.timeout_ms",
                format!("must be between 10 and 600000, got {t}"),
            ));
        }
        Ok(Self {
            sha256,
            version: raw.version,
            stateful: raw.stateful,
            requests: Requests {
                allow_hosts: r
                    .allow_hosts
                    .iter()
                    .map(|h| h.trim().to_ascii_lowercase())
                    .collect(),
                scratch: r.scratch,
                paths,
                config: r.config,
                memory_mib: r.memory_mib,
                timeout_ms: r.timeout_ms,
            },
        })
    }

    /// What plugin `name` asks for in `[requests]` that `grant` does not give, one sentence
    /// each naming the policy key to set; empty when the grant covers every request.
    pub fn shortfalls(&self, name: &str, grant: &PluginGrant) -> Vec<String> {
        let key = |k: &str| format!("plugins.grants.{name}.{k}");
        let r = &self.requests;
        let mut out = Vec::new();
        let missing: Vec<&str> = r
            .allow_hosts
            .iter()
            .filter(|h| !host_covered(h, &grant.allow_hosts))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            out.push(format!(
                "requests allow_hosts {} not granted by {}; its HTTP calls there are denied",
                quote_list(&missing),
                key("allow_hosts")
            ));
        }
        if r.scratch && !grant.scratch {
            out.push(format!(
                "requests scratch but {} is not set; it sees no /scratch",
                key("scratch")
            ));
        }
        for (guest, write) in &r.paths {
            let granted = grant
                .paths
                .iter()
                .find(|p| p.guest.trim_end_matches('/') == guest.trim_end_matches('/'));
            match granted {
                None => out.push(format!(
                    "requests path {guest} but {} does not grant it",
                    key("paths")
                )),
                Some(p) if *write && !p.write => out.push(format!(
                    "requests path {guest} writable but {} grants it read-only",
                    key("paths")
                )),
                Some(_) => {}
            }
        }
        let missing: Vec<&str> = r
            .config
            .iter()
            .filter(|k| !grant.config.contains_key(*k))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            out.push(format!(
                "requests config {} not set in {}",
                quote_list(&missing),
                key("config")
            ));
        }
        let granted_mib = (grant.limits.memory_bytes >> 20) as u64;
        if let Some(m) = r.memory_mib
            && m > granted_mib
        {
            out.push(format!(
                "requests memory_mib = {m} but {} is {granted_mib}",
                key("memory_mib")
            ));
        }
        let granted_ms = u64::try_from(grant.limits.timeout.as_millis()).unwrap_or(u64::MAX);
        if let Some(t) = r.timeout_ms
            && t > granted_ms
        {
            out.push(format!(
                "requests timeout_ms = {t} but {} is {granted_ms}",
                key("timeout_ms")
            ));
        }
        out
    }
}

fn quote_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// True when every host `entry` (a checked request entry) names is granted by `rules`.
fn host_covered(entry: &str, rules: &HostRules) -> bool {
    let e = entry.trim_start_matches('[').trim_end_matches(']');
    if let Ok(net) = e.parse::<ipnet::IpNet>() {
        rules.nets.iter().any(|n| n.contains(&net.trunc()))
    } else if let Ok(ip) = e.parse::<std::net::IpAddr>() {
        rules.matches_ip(ip)
    } else if let Some(suffix) = e.strip_prefix("*.") {
        // `*.d` is covered by a grant of `*.d` or of a wider `*.parent-of-d`.
        let dotted = format!(".{suffix}");
        rules.suffixes.iter().any(|s| dotted.ends_with(s.as_str()))
    } else {
        rules.matches_name(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;

    const HASH: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn grant(toml: &str) -> PluginGrant {
        Policy::from_toml(toml, "t")
            .expect("policy")
            .plugins
            .grant_for("p")
    }

    #[test]
    fn parses_a_full_manifest() {
        let m = Manifest::from_toml(
            &format!(
                "sha256 = \"{}\"\nversion = \"1.2.0\"\nstateful = true\n[requests]\nallow_hosts = [\"API.example.org\", \"*.cdn.example.org\", \"10.0.0.0/8\"]\nscratch = true\npaths = [{{ guest = \"/data\" }}, {{ guest = \"/out\", write = true }}]\nconfig = [\"base_url\"]\nmemory_mib = 128\ntimeout_ms = 9000\n",
                HASH.to_uppercase()
            ),
            "p.toml",
        )
        .expect("manifest");
        assert_eq!(m.sha256, HASH);
        assert_eq!(m.version.as_deref(), Some("1.2.0"));
        assert!(m.stateful);
        assert_eq!(m.requests.allow_hosts[0], "api.example.org");
        assert_eq!(
            m.requests.paths,
            vec![("/data".to_string(), false), ("/out".to_string(), true)]
        );
        let minimal = Manifest::from_toml(&format!("sha256 = \"{HASH}\"\n"), "p.toml")
            .expect("minimal manifest");
        assert!(!minimal.stateful && minimal.requests == Requests::default());
    }

    #[test]
    fn bad_manifests_name_the_file_and_key() {
        let err = |text: &str| match Manifest::from_toml(text, "p.toml") {
            Ok(m) => panic!("accepted {text}: {m:?}"),
            Err(e) => e.to_string(),
        };
        let e = err(&format!("sha256 = \"{HASH}\"\nstatefull = true\n"));
        assert!(
            e.contains("p.toml") && e.contains("unknown field `statefull`"),
            "{e}"
        );
        let e = err("stateful = true\n");
        assert!(e.contains("missing field `sha256`"), "{e}");
        let e = err("sha256 = \"abc\"\n");
        assert!(e.contains("`sha256` must be 64 hexadecimal digits"), "{e}");
        let e = err(&format!("sha256 = \"{}\"\n", "g".repeat(64)));
        assert!(e.contains("`sha256`"), "{e}");
        let e = err(&format!("sha256 = \"{HASH}\"\nstateful = \"yes\"\n"));
        assert!(e.contains("stateful"), "{e}");
        let e = err(&format!(
            "sha256 = \"{HASH}\"\n[requests]\nallow_hosts = [\"bad host\"]\n"
        ));
        assert!(e.contains("requests.allow_hosts[0]"), "{e}");
        let e = err(&format!(
            "sha256 = \"{HASH}\"\n[requests]\npaths = [{{ guest = \"/scratch\" }}]\n"
        ));
        assert!(e.contains("requests.paths[0].guest"), "{e}");
        let e = err(&format!(
            "sha256 = \"{HASH}\"\n[requests]\nmemory_mib = 0\n"
        ));
        assert!(e.contains("requests.memory_mib"), "{e}");
        let e = err("not toml at all [");
        assert!(e.starts_with("invalid manifest p.toml:"), "{e}");
    }

    #[test]
    fn shortfalls_name_what_the_policy_does_not_grant() {
        let m = Manifest::from_toml(
            &format!(
                "sha256 = \"{HASH}\"\n[requests]\nallow_hosts = [\"api.example.org\", \"*.cdn.example.org\", \"10.1.0.0/16\", \"other.org\"]\nscratch = true\npaths = [{{ guest = \"/data\" }}, {{ guest = \"/out\", write = true }}]\nconfig = [\"base_url\", \"token\"]\nmemory_mib = 128\ntimeout_ms = 9000\n"
            ),
            "p.toml",
        )
        .expect("manifest");
        let all = grant(
            "[plugins.grants.p]\nallow_hosts = [\"api.example.org\", \"*.example.org\", \"10.0.0.0/8\", \"other.org\"]\nscratch = true\npaths = [{ host = \"/srv/d\", guest = \"/data\" }, { host = \"/srv/o\", guest = \"/out\", write = true }]\nconfig = { base_url = \"x\", token = \"y\" }\nmemory_mib = 128\ntimeout_ms = 9000\n",
        );
        assert_eq!(m.shortfalls("p", &all), Vec::<String>::new());
        let less = grant(
            "[plugins.grants.p]\nallow_hosts = [\"api.example.org\", \"10.1.2.0/24\"]\npaths = [{ host = \"/srv/o\", guest = \"/out\" }]\nconfig = { base_url = \"x\" }\n",
        );
        let s = m.shortfalls("p", &less);
        assert_eq!(s.len(), 7, "{s:#?}");
        assert!(
            s[0].contains("`*.cdn.example.org`, `10.1.0.0/16`, `other.org`")
                && s[0].contains("plugins.grants.p.allow_hosts"),
            "{}",
            s[0]
        );
        assert!(s[1].contains("plugins.grants.p.scratch"));
        assert!(s[2].contains("/data") && s[3].contains("/out writable"));
        assert!(s[4].contains("`token`") && !s[4].contains("base_url"));
        assert!(s[5].contains("memory_mib = 128") && s[5].ends_with("is 64"));
        assert!(s[6].contains("timeout_ms = 9000"));
        // Nothing granted at all (no grant table).
        assert_eq!(m.shortfalls("p", &grant("")).len(), 7);
    }
}
