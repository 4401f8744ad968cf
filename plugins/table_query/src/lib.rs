//! The `table_query` plugin: filters, sorts, projects and aggregates a CSV or JSON table that
//! lives in the session's scratch directory (`/scratch`, where the browser's downloads and
//! the code runners' files go), so an agent can query data without loading it into context.

use std::cmp::Ordering;

use sibyl_plugin_sdk::{Hints, Tool, ToolError, ToolResult, schemars, serde, serde_json};

/// A comparison.
#[derive(serde::Deserialize, schemars::JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Equal (numbers compare as numbers).
    Eq,
    /// Not equal.
    Ne,
    /// Less than.
    Lt,
    /// Less than or equal.
    Le,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Ge,
    /// Contains the text (case-insensitive).
    Contains,
}

/// One filter condition.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// Column name.
    pub column: String,
    /// Comparison.
    pub op: Op,
    /// Value to compare with (numbers compare numerically when both sides are numbers).
    pub value: String,
}

/// An aggregate function.
#[derive(serde::Deserialize, schemars::JsonSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
pub enum Agg {
    /// Number of matching rows.
    Count,
    /// Sum of the column.
    Sum,
    /// Mean of the column.
    Mean,
    /// Smallest value.
    Min,
    /// Largest value.
    Max,
}

/// Arguments of `table_query`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryArgs {
    /// File in the session scratch directory: `.csv` (header row) or `.json` (an array of
    /// objects), e.g. `sales.csv`.
    pub file: String,
    /// Columns to show (default: all).
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    /// Conditions that must all hold.
    #[serde(default, rename = "where")]
    pub conditions: Vec<Condition>,
    /// Column to sort by.
    #[serde(default)]
    pub sort_by: Option<String>,
    /// Sort from largest to smallest.
    #[serde(default)]
    pub descending: bool,
    /// Rows shown (default 50, at most 1000).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Aggregate over the matching rows instead of listing them.
    #[serde(default)]
    pub aggregate: Option<Agg>,
    /// Column the aggregate applies to (not needed for `count`).
    #[serde(default)]
    pub aggregate_column: Option<String>,
}

type Row = Vec<String>;

fn load(file: &str) -> Result<(Vec<String>, Vec<Row>), ToolError> {
    if file.is_empty() || file.contains('/') || file.contains('\\') || file.starts_with('.') {
        return Err(ToolError::InvalidArguments(format!(
            "file: `{file}` must be a plain file name in the session scratch directory"
        )));
    }
    let path = format!("/scratch/{file}");
    let bytes = std::fs::read(&path).map_err(|e| {
        ToolError::Failed(format!(
            "cannot read {path}: {e} (is the file in this session's scratch directory, and is `scratch` granted?)"
        ))
    })?;
    if file.to_ascii_lowercase().ends_with(".json") {
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| ToolError::Failed(format!("{file} is not JSON: {e}")))?;
        let arr = v
            .as_array()
            .ok_or_else(|| ToolError::Failed(format!("{file}: expected an array of objects")))?;
        let mut header: Vec<String> = Vec::new();
        for item in arr {
            if let Some(o) = item.as_object() {
                for k in o.keys() {
                    if !header.contains(k) {
                        header.push(k.clone());
                    }
                }
            }
        }
        let rows = arr
            .iter()
            .map(|item| {
                header
                    .iter()
                    .map(|k| match item.get(k) {
                        None | Some(serde_json::Value::Null) => String::new(),
                        Some(serde_json::Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                    })
                    .collect()
            })
            .collect();
        Ok((header, rows))
    } else {
        let mut rdr = csv::ReaderBuilder::new()
            .flexible(true)
            .from_reader(bytes.as_slice());
        let header: Vec<String> = rdr
            .headers()
            .map_err(|e| ToolError::Failed(format!("{file}: bad CSV header: {e}")))?
            .iter()
            .map(str::to_string)
            .collect();
        let mut rows = Vec::new();
        for (i, rec) in rdr.records().enumerate() {
            let rec = rec.map_err(|e| ToolError::Failed(format!("{file}: row {}: {e}", i + 2)))?;
            let mut row: Row = rec.iter().map(str::to_string).collect();
            row.resize(header.len(), String::new());
            rows.push(row);
        }
        Ok((header, rows))
    }
}

fn col(header: &[String], name: &str, field: &str) -> Result<usize, ToolError> {
    header.iter().position(|h| h == name).ok_or_else(|| {
        ToolError::InvalidArguments(format!(
            "{field}: no column `{name}`; columns: {}",
            header.join(", ")
        ))
    })
}

fn compare(a: &str, b: &str) -> Ordering {
    match (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
        (Ok(x), Ok(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        _ => a.cmp(b),
    }
}

fn holds(v: &str, op: Op, w: &str) -> bool {
    let o = compare(v, w);
    match op {
        Op::Eq => o == Ordering::Equal,
        Op::Ne => o != Ordering::Equal,
        Op::Lt => o == Ordering::Less,
        Op::Le => o != Ordering::Greater,
        Op::Gt => o == Ordering::Greater,
        Op::Ge => o != Ordering::Less,
        Op::Contains => v.to_lowercase().contains(&w.to_lowercase()),
    }
}

/// Queries a table in the scratch directory.
pub struct TableQuery;
impl Tool for TableQuery {
    type Args = QueryArgs;
    const NAME: &'static str = "table_query";
    const DESCRIPTION: &'static str = "Queries a CSV or JSON table in the session's scratch directory: filter rows (where), sort, choose columns, limit, or aggregate (count, sum, mean, min, max). Returns a Markdown table.";
    const HINTS: Hints = Hints {
        read_only: true,
        idempotent: true,
        open_world: false,
        destructive: false,
    };
    fn call(a: QueryArgs) -> Result<ToolResult, ToolError> {
        let (header, rows) = load(&a.file)?;
        let mut conds = Vec::new();
        for (i, c) in a.conditions.iter().enumerate() {
            conds.push((col(&header, &c.column, &format!("where[{i}].column"))?, c));
        }
        let mut matched: Vec<&Row> = rows
            .iter()
            .filter(|r| conds.iter().all(|(i, c)| holds(&r[*i], c.op, &c.value)))
            .collect();
        if let Some(agg) = a.aggregate {
            let n = matched.len();
            let value = match agg {
                Agg::Count => serde_json::json!(n),
                _ => {
                    let name = a.aggregate_column.as_deref().ok_or_else(|| {
                        ToolError::InvalidArguments(
                            "aggregate_column: required for this aggregate".into(),
                        )
                    })?;
                    let i = col(&header, name, "aggregate_column")?;
                    let nums: Vec<f64> = matched
                        .iter()
                        .filter_map(|r| r[i].trim().parse::<f64>().ok())
                        .collect();
                    if nums.is_empty() {
                        return Err(ToolError::Failed(format!(
                            "no numeric values in column `{name}` among {n} matching rows"
                        )));
                    }
                    let sum: f64 = nums.iter().sum();
                    match agg {
                        Agg::Sum => serde_json::json!(sum),
                        Agg::Mean => serde_json::json!(sum / nums.len() as f64),
                        Agg::Min => {
                            serde_json::json!(nums.iter().copied().fold(f64::INFINITY, f64::min))
                        }
                        _ => serde_json::json!(
                            nums.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                        ),
                    }
                }
            };
            return Ok(ToolResult::text(format!("{value} ({n} matching rows)"))
                .with_structured(serde_json::json!({ "value": value, "rows": n })));
        }
        if let Some(s) = &a.sort_by {
            let i = col(&header, s, "sort_by")?;
            matched.sort_by(|x, y| {
                let o = compare(&x[i], &y[i]);
                if a.descending { o.reverse() } else { o }
            });
        }
        let shown: Vec<usize> = match &a.columns {
            None => (0..header.len()).collect(),
            Some(cs) => cs
                .iter()
                .enumerate()
                .map(|(k, c)| col(&header, c, &format!("columns[{k}]")))
                .collect::<Result<_, _>>()?,
        };
        let limit = a.limit.unwrap_or(50).min(1000) as usize;
        let total = matched.len();
        let esc = |s: &str| s.replace('|', "\\|").replace('\n', " ");
        let mut text = String::new();
        text.push_str(&format!(
            "| {} |\n|{}\n",
            shown
                .iter()
                .map(|&i| esc(&header[i]))
                .collect::<Vec<_>>()
                .join(" | "),
            " --- |".repeat(shown.len())
        ));
        let mut out_rows = Vec::new();
        for r in matched.iter().take(limit) {
            text.push_str(&format!(
                "| {} |\n",
                shown
                    .iter()
                    .map(|&i| esc(&r[i]))
                    .collect::<Vec<_>>()
                    .join(" | ")
            ));
            let obj: serde_json::Map<String, serde_json::Value> = shown
                .iter()
                .map(|&i| (header[i].clone(), serde_json::Value::String(r[i].clone())))
                .collect();
            out_rows.push(serde_json::Value::Object(obj));
        }
        text.push_str(&format!(
            "\n{} of {total} matching rows shown ({} rows in {}).",
            total.min(limit),
            rows.len(),
            a.file
        ));
        Ok(ToolResult::text(text)
            .with_structured(serde_json::json!({ "rows": out_rows, "matching": total })))
    }
}

sibyl_plugin_sdk::plugin!(TableQuery);
