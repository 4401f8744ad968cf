//! A test plugin: a trivial `echo` (for benchmarks and reload tests) and tools that misbehave
//! on purpose, and a counter that shows whether an instance is kept, so the host's limits and denials can be tested on a real component.

use sibyl_plugin_sdk::{Tool, ToolError, ToolResult, schemars, serde};

/// Arguments of `echo`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EchoArgs {
    /// Text returned unchanged.
    pub text: String,
    /// Times to repeat it (default 1).
    #[serde(default)]
    pub times: Option<u32>,
}

/// Returns its text.
pub struct Echo;
impl Tool for Echo {
    type Args = EchoArgs;
    const NAME: &'static str = "testkit_echo";
    const DESCRIPTION: &'static str = "Returns the text it is given (a trivial tool for tests).";
    fn call(a: EchoArgs) -> Result<ToolResult, ToolError> {
        Ok(ToolResult::text(
            a.text.repeat(a.times.unwrap_or(1).min(1000) as usize),
        ))
    }
}

/// No arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Loops forever.
pub struct Spin;
impl Tool for Spin {
    type Args = NoArgs;
    const NAME: &'static str = "testkit_spin";
    const DESCRIPTION: &'static str = "Loops forever (tests the time limit).";
    fn call(_: NoArgs) -> Result<ToolResult, ToolError> {
        let mut x: u64 = 0;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}

/// Allocates without bound.
pub struct Hog;
impl Tool for Hog {
    type Args = NoArgs;
    const NAME: &'static str = "testkit_hog";
    const DESCRIPTION: &'static str = "Allocates memory without bound (tests the memory limit).";
    fn call(_: NoArgs) -> Result<ToolResult, ToolError> {
        let mut v: Vec<Vec<u8>> = Vec::new();
        loop {
            v.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&v);
        }
    }
}

/// Panics (a trap).
pub struct Trap;
impl Tool for Trap {
    type Args = NoArgs;
    const NAME: &'static str = "testkit_trap";
    const DESCRIPTION: &'static str = "Panics (tests trap handling).";
    fn call(_: NoArgs) -> Result<ToolResult, ToolError> {
        panic!("testkit_trap panicked on purpose")
    }
}

/// A path or URL.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// The path to read, or the URL to get.
    pub target: String,
}

/// Reads a file.
pub struct ReadFile;
impl Tool for ReadFile {
    type Args = Target;
    const NAME: &'static str = "testkit_read";
    const DESCRIPTION: &'static str = "Reads a file with std::fs (tests path grants).";
    fn call(a: Target) -> Result<ToolResult, ToolError> {
        std::fs::read_to_string(&a.target)
            .map(ToolResult::text)
            .map_err(|e| ToolError::Denied(format!("cannot read {}: {e}", a.target)))
    }
}

/// Writes a file.
pub struct WriteFile;
impl Tool for WriteFile {
    type Args = Target;
    const NAME: &'static str = "testkit_write";
    const DESCRIPTION: &'static str = "Writes `hello` to a file with std::fs (tests path grants).";
    fn call(a: Target) -> Result<ToolResult, ToolError> {
        std::fs::write(&a.target, "hello")
            .map(|_| ToolResult::text("written"))
            .map_err(|e| ToolError::Denied(format!("cannot write {}: {e}", a.target)))
    }
}

/// GETs a URL.
pub struct Fetch;
impl Tool for Fetch {
    type Args = Target;
    const NAME: &'static str = "testkit_fetch";
    const DESCRIPTION: &'static str = "GETs a URL through the host (tests host grants).";
    fn call(a: Target) -> Result<ToolResult, ToolError> {
        let r = sibyl_plugin_sdk::http::get(&a.target)?;
        Ok(ToolResult::text(format!(
            "{} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        )))
    }
}

/// Calls of `testkit_count` this instance has seen.
static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts its calls in instance memory.
pub struct Count;
impl Tool for Count {
    type Args = NoArgs;
    const NAME: &'static str = "testkit_count";
    const DESCRIPTION: &'static str =
        "Returns how many times it was called in this instance (tests per-session state).";
    fn call(_: NoArgs) -> Result<ToolResult, ToolError> {
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        Ok(ToolResult::text(n.to_string()))
    }
}

sibyl_plugin_sdk::plugin!(Echo, Spin, Hog, Trap, ReadFile, WriteFile, Fetch, Count);
