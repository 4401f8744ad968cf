//! The tool planner's answer: JSON `{reason, tool, tool_args}` (the released Sibyl code's
//! `ToolChoice`), checked against the server's tool list. A reply that is not such an
//! object, names an unknown tool, or lacks a required argument is rejected with a message
//! the planner is re-asked with ([`crate::prompts::planner_reask`]).

use serde_json::Value;

use crate::tools::ToolSpec;

/// What the planner chose.
#[derive(Clone, Debug, PartialEq)]
pub enum Choice {
    /// Call `tool` with `args` (a JSON object).
    Tool {
        /// The planner's reasoning.
        reason: String,
        /// A tool name from ListTools.
        tool: String,
        /// Its arguments.
        args: Value,
    },
    /// Tool `None`: no further tool is needed; the loop ends.
    Done {
        /// The planner's reasoning.
        reason: String,
    },
}

/// Finds the JSON object in a model reply: the whole reply, a fenced ```json block, or
/// the text from the first `{` to the last `}`.
///
/// # Errors
/// A message saying why no JSON object could be read.
pub fn extract_json_object(reply: &str) -> Result<serde_json::Map<String, Value>, String> {
    let trimmed = reply.trim();
    let mut candidates: Vec<&str> = vec![trimmed];
    if let Some(start) = trimmed.find("```") {
        let after = &trimmed[start + 3..];
        let after = after.strip_prefix("json").unwrap_or(after);
        if let Some(end) = after.find("```") {
            candidates.push(after[..end].trim());
        }
    }
    if let (Some(a), Some(b)) = (trimmed.find('{'), trimmed.rfind('}'))
        && a < b
    {
        candidates.push(&trimmed[a..=b]);
    }
    let mut first_error = None;
    for c in candidates {
        match serde_json::from_str::<Value>(c) {
            Ok(Value::Object(m)) => return Ok(m),
            Ok(other) => {
                first_error
                    .get_or_insert_with(|| format!("expected a JSON object, got {}", kind(&other)));
            }
            Err(e) => {
                first_error.get_or_insert_with(|| format!("not valid JSON: {e}"));
            }
        }
    }
    Err(first_error.unwrap_or_else(|| "empty reply".to_string()))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses and checks a planner reply against `tools`.
///
/// # Errors
/// A message for the re-ask: invalid JSON, missing `tool`, unknown tool, `tool_args` not
/// an object, or a required argument missing.
pub fn parse_choice(reply: &str, tools: &[ToolSpec]) -> Result<Choice, String> {
    let obj = extract_json_object(reply)?;
    let reason = match obj.get("reason") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let tool = match obj.get("tool") {
        Some(Value::String(s)) => s.trim().to_string(),
        Some(Value::Null) => return Ok(Choice::Done { reason }),
        Some(other) => {
            return Err(format!(
                "`tool` must be a string (a tool name or \"None\"), got {}",
                kind(other)
            ));
        }
        None => return Err("the object has no `tool` field".to_string()),
    };
    if tool.is_empty() || tool.eq_ignore_ascii_case("none") {
        return Ok(Choice::Done { reason });
    }
    let Some(spec) = tools.iter().find(|t| t.name == tool) else {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        return Err(format!(
            "unknown tool `{}`; the tools are: {}, or None",
            truncate(&tool, 100),
            names.join(", ")
        ));
    };
    let args = match obj.get("tool_args") {
        None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
        Some(Value::Object(m)) => Value::Object(m.clone()),
        Some(other) => {
            return Err(format!(
                "`tool_args` must be a JSON object of {tool}'s arguments, got {}",
                kind(other)
            ));
        }
    };
    if let Some(required) = spec.input_schema.get("required").and_then(|r| r.as_array()) {
        for name in required.iter().filter_map(|v| v.as_str()) {
            if args.get(name).is_none_or(Value::is_null) {
                return Err(format!(
                    "`tool_args` of {tool} lacks the required argument `{name}`"
                ));
            }
        }
    }
    Ok(Choice::Tool { reason, tool, args })
}

fn truncate(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "visit_page".into(),
            description: String::new(),
            input_schema: serde_json::json!({"properties": {"url": {"type": "string"}}, "required": ["url"]}),
        }]
    }

    #[test]
    fn reads_plain_fenced_and_embedded_json() {
        let want = Choice::Tool {
            reason: "r".into(),
            tool: "visit_page".into(),
            args: serde_json::json!({"url": "http://x"}),
        };
        let plain = r#"{"reason": "r", "tool": "visit_page", "tool_args": {"url": "http://x"}}"#;
        assert_eq!(parse_choice(plain, &tools()), Ok(want.clone()));
        let fenced = format!("Sure:\n```json\n{plain}\n```\n");
        assert_eq!(parse_choice(&fenced, &tools()), Ok(want.clone()));
        let embedded = format!("I will visit it. {plain} Done.");
        assert_eq!(parse_choice(&embedded, &tools()), Ok(want));
    }

    #[test]
    fn none_ends_the_loop() {
        for r in [
            r#"{"reason": "done", "tool": "None", "tool_args": {}}"#,
            r#"{"reason": "done", "tool": null}"#,
            r#"{"reason": "done", "tool": "none"}"#,
        ] {
            assert_eq!(
                parse_choice(r, &tools()),
                Ok(Choice::Done {
                    reason: "done".into()
                })
            );
        }
    }

    #[test]
    fn rejections_say_why() {
        let e = parse_choice("I think we should browse", &tools()).expect_err("no json");
        assert!(e.contains("not valid JSON"), "{e}");
        let e = parse_choice(r#"{"tool": "google"}"#, &tools()).expect_err("unknown");
        assert!(
            e.contains("unknown tool `google`") && e.contains("visit_page"),
            "{e}"
        );
        let e = parse_choice(r#"{"tool": "visit_page", "tool_args": {}}"#, &tools())
            .expect_err("missing url");
        assert!(e.contains("`url`"), "{e}");
        let e = parse_choice(r#"{"tool": "visit_page", "tool_args": "x"}"#, &tools())
            .expect_err("args not object");
        assert!(e.contains("JSON object"), "{e}");
        let e = parse_choice("[1, 2]", &tools()).expect_err("array");
        assert!(e.contains("JSON object"), "{e}");
        assert!(parse_choice(r#"{"reason": "x"}"#, &tools()).is_err());
    }
}
