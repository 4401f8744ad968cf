//! The sibyl plugin SDK: write a tool as one Rust type, build it for `wasm32-wasip2`, drop
//! the `.wasm` into the server's plugins directory.
//!
//! ```ignore
//! use sibyl_plugin_sdk::{Tool, ToolResult, ToolError, schemars, serde};
//!
//! /// Arguments: the JSON Schema the model sees is derived from this struct.
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Args {
//!     /// Text to shout.
//!     text: String,
//! }
//!
//! struct Shout;
//! impl Tool for Shout {
//!     type Args = Args;
//!     const NAME: &'static str = "shout";
//!     const DESCRIPTION: &'static str = "Upper-cases text.";
//!     fn call(args: Args) -> Result<ToolResult, ToolError> {
//!         Ok(ToolResult::text(args.text.to_uppercase()))
//!     }
//! }
//!
//! sibyl_plugin_sdk::plugin!(Shout);
//! ```
//!
//! The argument schema is derived from `Args` with schemars and the arguments are parsed into
//! `Args` with serde, so the schema the model sees and the parsing can never disagree; a bad
//! argument comes back to the agent as `INVALID_ARGUMENT` naming the field.
//!
//! Host capabilities ([`http`], [`config`], [`log`]; files through `std::fs` under
//! `/scratch` and granted paths) work only when the server's policy grants them.

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "__export_plugin",
        default_bindings_module: "::sibyl_plugin_sdk::bindings",
    });
}

pub use schemars;
pub use serde;
pub use serde_json;

use bindings::sibyl::tool::types as wit;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

/// Behaviour hints, as MCP tool annotations.
pub type Hints = wit::Hints;

/// A successful result: text for the agent and optional structured JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The text the agent sees.
    pub text: String,
    /// Optional structured result.
    pub structured: Option<serde_json::Value>,
}

impl ToolResult {
    /// A text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            structured: None,
        }
    }

    /// Attaches structured JSON.
    pub fn with_structured(mut self, v: serde_json::Value) -> Self {
        self.structured = Some(v);
        self
    }
}

/// Why a call produced no result (the WIT `tool-error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// Arguments the tool cannot use; name the field. Reaches the agent as INVALID_ARGUMENT.
    InvalidArguments(String),
    /// A capability was not granted.
    Denied(String),
    /// The tool ran and failed.
    Failed(String),
    /// The tool gave up on something slow.
    Timeout(String),
}

impl ToolError {
    /// A failure with a message.
    pub fn failed(m: impl std::fmt::Display) -> Self {
        Self::Failed(m.to_string())
    }
}

/// One tool. Implement it on a unit struct and list the struct in [`plugin!`].
pub trait Tool {
    /// The arguments; the schema is derived from it.
    type Args: DeserializeOwned + JsonSchema;
    /// Tool name: 1-64 of `a-z`, `0-9`, `_`.
    const NAME: &'static str;
    /// What the tool does, written for a model choosing tools.
    const DESCRIPTION: &'static str;
    /// Behaviour hints (default: none claimed).
    const HINTS: Hints = Hints {
        read_only: false,
        idempotent: false,
        open_world: false,
        destructive: false,
    };
    /// Runs the tool.
    ///
    /// # Errors
    /// [`ToolError`] when it cannot produce a result.
    fn call(args: Self::Args) -> Result<ToolResult, ToolError>;
}

/// The JSON Schema of `T` as an object schema without `$schema`/`title`.
pub fn schema_for<T: JsonSchema>() -> serde_json::Value {
    let mut schema = schemars::schema_for!(T).to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
        obj.entry("properties")
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
    }
    schema
}

/// Parses arguments into `T`, naming the bad field (`count: invalid type: ...`).
///
/// # Errors
/// [`ToolError::InvalidArguments`].
pub fn parse_args<T: DeserializeOwned>(json: &str) -> Result<T, ToolError> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." || path.is_empty() {
            ToolError::InvalidArguments(inner)
        } else {
            ToolError::InvalidArguments(format!("{path}: {inner}"))
        }
    })
}

#[doc(hidden)]
pub fn __descriptor<T: Tool>() -> wit::ToolDescriptor {
    wit::ToolDescriptor {
        name: T::NAME.to_string(),
        description: T::DESCRIPTION.to_string(),
        input_schema: schema_for::<T::Args>().to_string(),
        hints: T::HINTS,
    }
}

#[doc(hidden)]
pub fn __run<T: Tool>(args: &str) -> Result<wit::ToolResult, wit::ToolError> {
    let parsed = parse_args::<T::Args>(args).map_err(to_wit)?;
    match T::call(parsed) {
        Ok(r) => Ok(wit::ToolResult {
            text: r.text,
            structured_json: r.structured.map(|v| v.to_string()),
        }),
        Err(e) => Err(to_wit(e)),
    }
}

fn to_wit(e: ToolError) -> wit::ToolError {
    match e {
        ToolError::InvalidArguments(m) => wit::ToolError::InvalidArguments(m),
        ToolError::Denied(m) => wit::ToolError::Denied(m),
        ToolError::Failed(m) => wit::ToolError::Failed(m),
        ToolError::Timeout(m) => wit::ToolError::Timeout(m),
    }
}

#[doc(hidden)]
pub use bindings::Guest as __Guest;
#[doc(hidden)]
pub use bindings::sibyl::tool::types::{
    ToolDescriptor as __WitDescriptor, ToolError as __WitError, ToolResult as __WitResult,
};

/// Exports the listed [`Tool`] types as this component's tools.
#[macro_export]
macro_rules! plugin {
    ($($tool:ty),+ $(,)?) => {
        #[doc(hidden)]
        pub struct __SibylPlugin;
        impl $crate::__Guest for __SibylPlugin {
            fn describe() -> ::std::vec::Vec<$crate::__WitDescriptor> {
                ::std::vec![$($crate::__descriptor::<$tool>()),+]
            }
            fn call(
                tool: ::std::string::String,
                arguments_json: ::std::string::String,
            ) -> ::std::result::Result<$crate::__WitResult, $crate::__WitError> {
                $(
                    if tool == <$tool as $crate::Tool>::NAME {
                        return $crate::__run::<$tool>(&arguments_json);
                    }
                )+
                Err($crate::__WitError::InvalidArguments(::std::format!("unknown tool `{tool}`")))
            }
        }
        $crate::bindings::__export_plugin!(__SibylPlugin with_types_in $crate::bindings);
    };
}

/// Outbound HTTP (only to hosts the policy grants this plugin).
pub mod http {
    pub use crate::bindings::sibyl::tool::http::{HttpError, Response, get};

    impl From<HttpError> for crate::ToolError {
        fn from(e: HttpError) -> Self {
            match e {
                HttpError::Denied(m) => crate::ToolError::Denied(m),
                HttpError::Timeout(m) => crate::ToolError::Timeout(m),
                HttpError::TooLarge(m) => {
                    crate::ToolError::Failed(format!("response too large: {m}"))
                }
                HttpError::Failed(m) => crate::ToolError::Failed(m),
            }
        }
    }
}

/// The plugin's configuration values from the policy.
pub mod config {
    pub use crate::bindings::sibyl::tool::config::get;
}

/// The server's log.
pub mod log {
    pub use crate::bindings::sibyl::tool::log::{Level, log};
}
