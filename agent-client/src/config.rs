//! Configuration of `ask`: the pipeline's limits and per-role temperatures
//! ([`PipelineConfig`], recorded in every trace) and the model endpoint.
//!
//! Sources, later ones winning: built-in defaults (the Sibyl paper's: 20 steps, 3 votes,
//! jury Actor T 0.1 / Critic T 0, at most 8 jury rounds), the `OPENAI_BASE_URL`,
//! `OPENAI_API_KEY` and `OPENAI_MODEL` environment variables, a TOML file (`--config`),
//! then command-line flags. The file never holds the key itself: `api_key_env` names the
//! variable to read it from.
//!
//! ```toml
//! [model]
//! base_url = "http://127.0.0.1:8000/v1"
//! name = "qwen2.5-7b-instruct"
//! api_key_env = "MY_ENDPOINT_KEY"
//! timeout_secs = 180
//! max_retries = 4
//! initial_backoff_ms = 1000
//! max_backoff_ms = 30000
//! cache = "/var/cache/sibyl/model-cache.sqlite"   # or cache = false
//!
//! [pipeline]
//! max_steps = 20
//! votes = 3
//! max_reasks = 3
//! jury_max_rounds = 8
//! vote_temperature = 0.7
//! max_tool_result_chars = 40000
//! improve_code_tool = "computer_terminal"
//!
//! [pipeline.temperatures]
//! planner = 0.0
//! actor = 0.1
//! critic = 0.0
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::ModelConfig;

/// Sampling temperature of each role.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Temperatures {
    /// Tool planner (run 1; later vote runs use [`PipelineConfig::vote_temperature`]).
    pub planner: f32,
    /// External information acquisition channel.
    pub channel: f32,
    /// Code improvement before the code tool runs.
    pub improve_code: f32,
    /// Jury Actor (the released code: 0.1).
    pub actor: f32,
    /// Jury Critic (the released code: 0).
    pub critic: f32,
    /// Answer formatter.
    pub formatter: f32,
}

impl Default for Temperatures {
    fn default() -> Self {
        Self {
            planner: 0.0,
            channel: 0.0,
            improve_code: 0.0,
            actor: 0.1,
            critic: 0.0,
            formatter: 0.0,
        }
    }
}

/// The pipeline's settings. Recorded in the trace, so `replay` runs with the same ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineConfig {
    /// Model name sent in every request.
    pub model: String,
    /// Most tool steps per run (paper: 20).
    pub max_steps: usize,
    /// Independent runs whose answers are voted on (paper: 3).
    pub votes: usize,
    /// Most re-asks of the planner (or code improver) after an invalid reply.
    pub max_reasks: usize,
    /// Most jury messages (Actor and Critic alternating; released code: 8).
    pub jury_max_rounds: usize,
    /// Per-role temperatures.
    pub temperatures: Temperatures,
    /// Planner temperature of vote runs 2..N, so they are independent samples (each run
    /// also sends its index as the request `seed`).
    pub vote_temperature: f32,
    /// Tool results longer than this many characters are cut (with a note) before the
    /// channel sees them.
    pub max_tool_result_chars: usize,
    /// The tool whose `code` argument gets the paper's code-improvement pass before it
    /// runs; empty disables the pass.
    pub improve_code_tool: String,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            model: String::new(),
            max_steps: 20,
            votes: 3,
            max_reasks: 3,
            jury_max_rounds: 8,
            temperatures: Temperatures::default(),
            vote_temperature: 0.7,
            max_tool_result_chars: 40_000,
            improve_code_tool: "computer_terminal".to_string(),
        }
    }
}

/// A configuration value is out of range.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A setting is out of range; names the key.
    #[error("config: `{key}` {message}")]
    Invalid {
        /// The key, e.g. `pipeline.votes`.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The file cannot be read or parsed (unknown keys included).
    #[error("config file {path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl PipelineConfig {
    /// Checks every limit.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| {
            Err(ConfigError::Invalid {
                key: key.to_string(),
                message: message.to_string(),
            })
        };
        if self.model.trim().is_empty() {
            return bad("model", "is empty: pass --model or set OPENAI_MODEL");
        }
        if !(1..=200).contains(&self.max_steps) {
            return bad("pipeline.max_steps", "must be 1..=200");
        }
        if !(1..=25).contains(&self.votes) {
            return bad("pipeline.votes", "must be 1..=25");
        }
        if self.max_reasks > 30 {
            return bad("pipeline.max_reasks", "must be 0..=30");
        }
        if !(1..=40).contains(&self.jury_max_rounds) {
            return bad("pipeline.jury_max_rounds", "must be 1..=40");
        }
        if self.max_tool_result_chars < 100 {
            return bad("pipeline.max_tool_result_chars", "must be at least 100");
        }
        let t = &self.temperatures;
        for (key, v) in [
            ("pipeline.temperatures.planner", t.planner),
            ("pipeline.temperatures.channel", t.channel),
            ("pipeline.temperatures.improve_code", t.improve_code),
            ("pipeline.temperatures.actor", t.actor),
            ("pipeline.temperatures.critic", t.critic),
            ("pipeline.temperatures.formatter", t.formatter),
            ("pipeline.vote_temperature", self.vote_temperature),
        ] {
            if !(0.0..=2.0).contains(&v) {
                return bad(key, "must be 0..=2");
            }
        }
        Ok(())
    }
}

/// The `[model]` table of a config file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelFile {
    /// Base URL up to `/v1`.
    pub base_url: Option<String>,
    /// Model name.
    pub name: Option<String>,
    /// Environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// Time limit of one HTTP attempt, seconds.
    pub timeout_secs: Option<u64>,
    /// Retries after the first attempt.
    pub max_retries: Option<u32>,
    /// First backoff, milliseconds.
    pub initial_backoff_ms: Option<u64>,
    /// Longest backoff, milliseconds.
    pub max_backoff_ms: Option<u64>,
    /// Cache file, or `false` for no cache.
    pub cache: Option<CacheSetting>,
}

/// `cache = "path"` or `cache = false`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum CacheSetting {
    /// `false` disables the cache (`true` keeps the default file).
    Enabled(bool),
    /// A cache file.
    Path(PathBuf),
}

/// A config file: `[model]` and `[pipeline]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigFile {
    /// The endpoint.
    pub model: ModelFile,
    /// The pipeline (missing keys keep their defaults).
    pub pipeline: Option<PipelineConfig>,
}

impl ConfigFile {
    /// Reads and parses a TOML config file.
    ///
    /// # Errors
    /// [`ConfigError::File`], naming unknown keys.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let err = |message: String| ConfigError::File {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        toml::from_str(&text).map_err(|e| err(e.to_string()))
    }

    /// Applies the `[model]` table over `m` (env-derived); the key is read from the
    /// variable `api_key_env` names.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when `api_key_env` names an unset variable.
    pub fn apply_model(&self, m: &mut ModelConfig) -> Result<(), ConfigError> {
        let f = &self.model;
        if let Some(u) = &f.base_url {
            m.base_url.clone_from(u);
        }
        if let Some(var) = &f.api_key_env {
            m.api_key = Some(std::env::var(var).map_err(|_| ConfigError::Invalid {
                key: "model.api_key_env".into(),
                message: format!("names `{var}`, which is not set"),
            })?);
        }
        if let Some(s) = f.timeout_secs {
            m.timeout = Duration::from_secs(s);
        }
        if let Some(r) = f.max_retries {
            m.max_retries = r;
        }
        if let Some(ms) = f.initial_backoff_ms {
            m.initial_backoff = Duration::from_millis(ms);
        }
        if let Some(ms) = f.max_backoff_ms {
            m.max_backoff = Duration::from_millis(ms);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_overrides_and_unknown_keys_are_named() {
        let f: ConfigFile = toml::from_str(
            "[model]\nname = \"m\"\ncache = false\n[pipeline]\nvotes = 5\n[pipeline.temperatures]\nactor = 0.3\n",
        )
        .expect("parse");
        let p = f.pipeline.expect("pipeline");
        assert_eq!(p.votes, 5);
        assert_eq!(p.max_steps, 20);
        assert!((p.temperatures.actor - 0.3).abs() < 1e-6);
        assert!(matches!(f.model.cache, Some(CacheSetting::Enabled(false))));
        let e = toml::from_str::<ConfigFile>("[pipeline]\nvotez = 5\n").expect_err("unknown");
        assert!(e.to_string().contains("votez"), "{e}");
    }

    #[test]
    fn the_example_file_parses_and_passes_the_checks() {
        let f: ConfigFile =
            toml::from_str(include_str!("../agent.example.toml")).expect("example parses");
        let mut p = f.pipeline.expect("pipeline");
        assert_eq!(p, PipelineConfig::default());
        p.model = "m".into();
        assert!(p.check().is_ok());
        assert_eq!(f.model.max_retries, Some(4));
    }

    #[test]
    fn limits_are_checked_by_key() {
        let mut c = PipelineConfig {
            model: "m".into(),
            ..PipelineConfig::default()
        };
        assert!(c.check().is_ok());
        c.votes = 0;
        assert!(
            c.check()
                .expect_err("votes")
                .to_string()
                .contains("pipeline.votes")
        );
        c.votes = 1;
        c.temperatures.critic = 5.0;
        assert!(c.check().expect_err("t").to_string().contains("critic"));
    }
}
