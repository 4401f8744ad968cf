//! The global workspace: the ordered list of step notes (the channel's
//! `Facts / Explanation / Plan` after each tool call), shared by the planner, the channel,
//! the code improver and the jury. It is the only memory carried between model calls.

use serde::{Deserialize, Serialize};

/// One step's note.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepNote {
    /// 1-based step number.
    pub step: usize,
    /// The tool called.
    pub tool: String,
    /// Its arguments.
    pub args: serde_json::Value,
    /// The channel's `Facts / Explanation / Plan` text.
    pub note: String,
}

/// The ordered step notes of one run.
#[derive(Clone, Debug, Default)]
pub struct Workspace {
    notes: Vec<StepNote>,
}

impl Workspace {
    /// An empty workspace.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a step note.
    pub fn push(&mut self, note: StepNote) {
        self.notes.push(note);
    }

    /// The notes in order.
    #[must_use]
    pub fn notes(&self) -> &[StepNote] {
        &self.notes
    }

    /// The step history as the prompts show it (the released code's format):
    /// `Step:N\nTool: NAME, Args: JSON\nNOTE`, blocks separated by a blank line; empty
    /// when no step was taken.
    #[must_use]
    pub fn render(&self) -> String {
        self.notes
            .iter()
            .map(|n| {
                format!(
                    "Step:{}\nTool: {}, Args: {}\n{}\n",
                    n.step,
                    n.tool,
                    n.args,
                    n.note.trim_end()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_steps_in_order() {
        let mut w = Workspace::new();
        assert_eq!(w.render(), "");
        w.push(StepNote {
            step: 1,
            tool: "visit_page".into(),
            args: serde_json::json!({"url": "http://a"}),
            note: "Facts:\n  1. x\n".into(),
        });
        w.push(StepNote {
            step: 2,
            tool: "page_down".into(),
            args: serde_json::json!({}),
            note: "Facts:\n  2. y".into(),
        });
        assert_eq!(
            w.render(),
            "Step:1\nTool: visit_page, Args: {\"url\":\"http://a\"}\nFacts:\n  1. x\n\nStep:2\nTool: page_down, Args: {}\nFacts:\n  2. y\n"
        );
    }
}
