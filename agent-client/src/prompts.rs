//! The prompts of the Sibyl pipeline, following Appendix C of the Sibyl paper (Wang et al.,
//! 2024: tool planner, code improvement, external information acquisition channel, answer
//! formatter) and the jury of its released code (an Actor and a Critic). The fixed tool
//! section of the paper is replaced by the tool list rendered from the server's ListTools
//! ([`render_tools`]), so the same prompts work with any tool set.
//!
//! Every function returns the text of one user message: each model call is a stateless
//! question over (question, global workspace, input).

use crate::tools::ToolSpec;

/// The system message of the planner, channel, code improver and formatter.
pub const ASSISTANT_SYSTEM: &str = "You are a helpful AI assistant.";

/// The word that ends the jury's debate when the Critic finds no flaw.
pub const TERMINATE: &str = "TERMINATE";

/// The Actor's system message (it answers and weighs criticism).
pub const ACTOR_SYSTEM: &str = "You are the Actor of a jury. Answer the question, explaining \
your thought process step by step before giving the answer. When the Critic points out \
problems in your answer, consider carefully whether they are right: adopt the correction if \
it is, defend your answer if it is not. End every reply with a line `Answer: <answer>`.
If you are unable to solve the question, make a well-informed EDUCATED GUESS based on the \
information provided. Your EDUCATED GUESS should be a number OR as few words as possible OR a \
comma separated list of numbers and/or strings. DO NOT OUTPUT 'I don't know', 'Unable to \
determine', etc.";

/// The Critic's system message (it looks for flaws and says TERMINATE when there are none).
pub const CRITIC_SYSTEM: &str = "You are the Critic of a jury. Your job is to spot logical or \
intellectual errors in the Actor's reasoning and answer, checking them against the question \
and the information gathered. Point out each flaw you find and what the answer should be. \
When and only when you cannot find any flaw in the Actor's latest answer, reply with the \
single word TERMINATE to end the debate.";

/// Renders the tool list, one Python-style signature per tool with its description and
/// argument descriptions, as the paper's planner prompt lists the browser and terminal.
#[must_use]
pub fn render_tools(tools: &[ToolSpec]) -> String {
    let mut out = String::from(
        "All tools share one session: the browser's current page and viewport persist between \
         calls. Every browser function returns the text of the current viewport after the \
         action; for pages longer than one viewport use page_down/page_up or \
         find_on_page_ctrl_f to see the rest. Pages are converted to text, so forms cannot \
         be submitted.\n",
    );
    for t in tools {
        let props = t
            .input_schema
            .get("properties")
            .and_then(|p| p.as_object())
            .cloned()
            .unwrap_or_default();
        let required: Vec<&str> = t
            .input_schema
            .get("required")
            .and_then(|r| r.as_array())
            .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        let args: Vec<String> = props
            .iter()
            .map(|(name, schema)| {
                let ty = schema_type(schema);
                if required.contains(&name.as_str()) {
                    format!("{name}: {ty}")
                } else {
                    format!("{name}: {ty} = None")
                }
            })
            .collect();
        out.push_str(&format!("- {}({}) -> str:\n", t.name, args.join(", ")));
        out.push_str(&format!("    {}\n", one_line(&t.description)));
        for (name, schema) in &props {
            if let Some(d) = schema.get("description").and_then(|d| d.as_str()) {
                out.push_str(&format!("    {name}: {}\n", one_line(d)));
            }
        }
    }
    out
}

fn schema_type(schema: &serde_json::Value) -> &'static str {
    let ty = match schema.get("type") {
        Some(serde_json::Value::String(s)) => s.as_str(),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str())
            .find(|s| *s != "null")
            .unwrap_or(""),
        _ => "",
    };
    match ty {
        "string" => "str",
        "integer" => "int",
        "number" => "float",
        "boolean" => "bool",
        "array" => "list",
        "object" => "dict",
        _ => "Any",
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The JSON answer format of the planner (`{reason, tool, tool_args}`).
pub const PLANNER_FORMAT: &str = "Answer with one JSON object and nothing else, of the form\n\
{\"reason\": \"<step by step reasoning>\", \"tool\": \"<the name of one tool above, or None>\", \
\"tool_args\": {<the tool's arguments as a JSON object>}}";

/// The tool planner's prompt (paper, Appendix C, "Prompt Used in Tool Planner").
#[must_use]
pub fn planner(question: &str, steps: &str, tools: &str) -> String {
    format!(
        "I'll give you a question and a set of tools. Tell me which function you would use to \
solve the problem (or if you don't need any tool).

# Step History
{steps}

# Question
```text
{question}
```

# Tools
{tools}
Based on the question and the step history, tell me which function you would use to solve \
the problem in next step. If you don't need any function or the question is very easy to \
answer, function \"None\" is also an option.
Do not change the format and precision of the results (including rounding), as a dedicated \
person will handle the final formatting of the results.
Use JSON format to answer.
{PLANNER_FORMAT}"
    )
}

/// The planner prompt again, with why the previous reply was rejected (bounded re-ask).
#[must_use]
pub fn planner_reask(planner_prompt: &str, rejected: &str, error: &str) -> String {
    format!(
        "{planner_prompt}

# Your previous reply was rejected
```text
{rejected}
```
Error: {error}
Reply again with one valid JSON object naming one of the listed tools (or None)."
    )
}

/// The JSON answer format of the code improver (`{reason, improved_code}`).
pub const IMPROVE_FORMAT: &str = "Answer with one JSON object and nothing else, of the form\n\
{\"reason\": \"<step by step reasoning on how to improve the code>\", \"improved_code\": \"<the improved code>\"}";

/// The code improvement prompt (paper, Appendix C, "Prompt Used for Improve Generated Code").
#[must_use]
pub fn improve_code(question: &str, steps: &str, code: &str) -> String {
    format!(
        "Your ultimate goal is to find the answer to the question below.
```text
{question}
```

# Step History
```text
{steps}
```

The next step is running the following code:
```python
{code}
```

Check this code and help me improve it.
Response in JSON format:
{IMPROVE_FORMAT}"
    )
}

/// The external information acquisition channel's prompt (paper, Appendix C): turns one
/// tool result into `Facts / Explanation / Plan`, recording only new facts.
#[must_use]
pub fn channel(
    question: &str,
    tools: &str,
    steps: &str,
    tool: &str,
    args: &str,
    result: &str,
) -> String {
    format!(
        "Your ultimate goal is to find the answer to the question below.
```text
{question}
```

# Tools
{tools}
# Step History
```text
{steps}
```

# Current Step Tool Result
Tool: {tool}
Args: {args}
{result}

# Instructions
1. Analyze the given tool result to extract relevant information directly contributing to \
answering the question.
2. Verify the information against the original question to ensure accuracy.
3. Record new facts only if they provide unique information not already found in the step \
history.
4. If the current tool result directly answers the question, record the answer and explain \
why no further steps are necessary.
5. If the current tool result is insufficient, plan a follow-up step to gather more data.
6. Choose the next tool and query that efficiently leads to the ultimate goal.
7. Minimize unnecessary steps by focusing on direct and efficient methods to gather required \
information.
8. Explain why you chose the next step and how it contributes to answering the question.
9. Do not change the format and precision of the results, as a dedicated person will handle \
the final formatting.
10. Your reply will be sent to the next agent for further action, so it is necessary to record \
all the information needed by the next agent in the plan (such as the complete URL of the link \
that needs to be clicked).

Response Format:
```text
Facts:
  1. Address: xxxx, Title: xxxx, Viewport position: xxxx
    xxxxx
  2. Address: xxxx, Title: xxxx, Viewport position: xxxx
    xxxxx
Explanation:
  xxxx
Plan:
  xxxx
```"
    )
}

/// The jury's opening: the question and what the steps found (the released code's message
/// to the jury), or the bare question when no step was taken.
#[must_use]
pub fn jury_opening(question: &str, steps: &str) -> String {
    let guess = "If you are unable to solve the question, make a well-informed EDUCATED GUESS \
based on the information we have provided.\nYour EDUCATED GUESS should be a number OR as few \
words as possible OR a comma separated list of numbers and/or strings. DO NOT OUTPUT 'I don't \
know', 'Unable to determine', etc.";
    if steps.trim().is_empty() {
        format!("{question}\n{guess}")
    } else {
        format!(
            "{question}\nTo answer the above question, I did the following:\n{steps}\n\n\
Referring to the information I have obtained (which may not be accurate), what do you think is \
the answer to the question?\n{guess}"
        )
    }
}

/// One jury turn: the opening, the debate so far, and whose turn it is.
#[must_use]
pub fn jury_turn(opening: &str, debate: &[(String, String)], speaker: &str) -> String {
    let mut out = format!("{opening}\n\n# Debate so far\n");
    if debate.is_empty() {
        out.push_str("(nothing yet)\n");
    }
    for (who, text) in debate {
        out.push_str(&format!("\n## {who}\n{text}\n"));
    }
    out.push_str(&format!("\n# Your turn\nYou are the {speaker}. Reply now."));
    out
}

/// The answer formatter's prompt (paper, Appendix C, "Prompt Used for Formatting Answers").
#[must_use]
pub fn format_answer(question: &str, answer: &str) -> String {
    format!(
        "Format the following answer according to these rules:
1. **Numbers**:
   * If the answer contains a relevant number, return the number without commas, units, or \
punctuation.
   * If the number represents thousands, return the number in thousands.
   * Perform necessary unit conversions based on the context provided in the question. For \
example, convert picometers to Angstroms if the question implies this.
   * Retain the original precision of the number unless specific rounding instructions are \
given.
   * Numbers should be written as digits (e.g., 1000000 instead of \"one million\").
2. **Dates**:
   * If the answer contains a date, return it in the same format provided.
3. **Strings**:
   * Exclude articles and abbreviations.
   * Write digits in numeric form unless specified otherwise.
4. **Lists**:
   * If the answer is a comma-separated list, return it as a comma-separated list, applying \
the above rules for numbers and strings.
5. **Sentences**:
   * If the answer is a full sentence and the question expects a detailed explanation, \
preserve the sentence as is.
   * If the answer can be reduced to \"Yes\" or \"No\", do so.
Important:
1. Carefully interpret the question to determine the appropriate format for the answer, \
including any necessary unit conversions.
2. Return only the final formatted answer.
3. The final formatted answer should be as concise as possible, directly addressing the \
question without any additional explanation or restatement.
4. Exclude any additional details beyond the specific information requested.
5. If unable to solve the question, make a well-informed EDUCATED GUESS based on the \
information we have provided. Your EDUCATED GUESS should be a number OR as few words as \
possible OR a comma separated list of numbers and/or strings. DO NOT OUTPUT 'I don't know', \
'Unable to determine', etc.
Here is the question:
{question}
Here is the answer to format:
{answer}
Formatted answer:"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_render_as_signatures() {
        let tools = vec![
            ToolSpec {
                name: "visit_page".into(),
                description: "Visit a page\n  by URL.".into(),
                input_schema: serde_json::json!({
                    "type": "object",
                    "properties": {"url": {"type": "string", "description": "Absolute URL."}},
                    "required": ["url"]
                }),
            },
            ToolSpec {
                name: "page_down".into(),
                description: "Scroll down.".into(),
                input_schema: serde_json::json!({"type": "object"}),
            },
        ];
        let r = render_tools(&tools);
        assert!(
            r.contains(
                "- visit_page(url: str) -> str:\n    Visit a page by URL.\n    url: Absolute URL.\n"
            ),
            "{r}"
        );
        assert!(
            r.contains("- page_down() -> str:\n    Scroll down.\n"),
            "{r}"
        );
    }
}
