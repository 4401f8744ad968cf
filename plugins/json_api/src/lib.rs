//! The `json_api` plugin: reads one site's JSON API through the granted-HTTP capability.
//! The site is fixed by the operator (`config.base_url` in the plugin's policy grant, and the
//! host must be in its `allow_hosts`); the agent chooses only the path and what to extract.

use sibyl_plugin_sdk::{
    Hints, Tool, ToolError, ToolResult, config, http, schemars, serde, serde_json,
};

/// Arguments of `api_get`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiArgs {
    /// Path under the API's base URL, with an optional query, e.g. `users/3?fields=name`.
    pub path: String,
    /// Optional JSON Pointer (RFC 6901) selecting part of the answer, e.g. `/items/0/title`.
    #[serde(default)]
    pub pointer: Option<String>,
    /// Characters of pretty-printed JSON shown (default 8000).
    #[serde(default)]
    pub max_chars: Option<u32>,
}

/// GETs a path of the configured JSON API.
pub struct ApiGet;
impl Tool for ApiGet {
    type Args = ApiArgs;
    const NAME: &'static str = "api_get";
    const DESCRIPTION: &'static str = "GETs a path of the configured JSON API and returns the JSON (optionally only the part a JSON Pointer selects), pretty-printed.";
    const HINTS: Hints = Hints {
        read_only: true,
        idempotent: true,
        open_world: true,
        destructive: false,
    };
    fn call(a: ApiArgs) -> Result<ToolResult, ToolError> {
        let base = config::get("base_url").ok_or_else(|| {
            ToolError::Denied("this plugin has no `base_url` in its policy config".into())
        })?;
        let path = a.path.trim().trim_start_matches('/');
        if path.contains("..") || path.contains("://") || path.contains('#') || path.contains('\\')
        {
            return Err(ToolError::InvalidArguments(format!(
                "path: `{path}` must be a relative path without `..`, `://`, `#` or `\\`"
            )));
        }
        let url = format!("{}/{}", base.trim_end_matches('/'), path);
        let resp = http::get(&url)?;
        if !(200..300).contains(&resp.status) {
            let snippet: String = String::from_utf8_lossy(&resp.body)
                .chars()
                .take(300)
                .collect();
            return Err(ToolError::Failed(format!(
                "GET {url}: HTTP {}: {snippet}",
                resp.status
            )));
        }
        let value: serde_json::Value = serde_json::from_slice(&resp.body).map_err(|e| {
            ToolError::Failed(format!(
                "GET {url}: the answer is not JSON ({}): {e}",
                resp.content_type.as_deref().unwrap_or("no content type")
            ))
        })?;
        let selected = match a.pointer.as_deref() {
            None | Some("") => value,
            Some(p) => value.pointer(p).cloned().ok_or_else(|| {
                ToolError::Failed(format!("JSON Pointer `{p}` selects nothing in the answer"))
            })?,
        };
        let pretty = serde_json::to_string_pretty(&selected).map_err(ToolError::failed)?;
        let max = a.max_chars.unwrap_or(8000).max(100) as usize;
        let total = pretty.chars().count();
        let mut text: String = pretty.chars().take(max).collect();
        if total > max {
            text.push_str(&format!(
                "\n… ({total} characters in all; use `pointer` to select a part)"
            ));
        }
        Ok(ToolResult::text(text).with_structured(selected))
    }
}

sibyl_plugin_sdk::plugin!(ApiGet);
