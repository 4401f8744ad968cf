//! The `calc` plugin: arithmetic expressions (evalexpr), unit conversion and calendar
//! arithmetic — the kind of exact computation a model should not do in its head.

use sibyl_plugin_sdk::{Hints, Tool, ToolError, ToolResult, schemars, serde, serde_json};

const PURE: Hints = Hints {
    read_only: true,
    idempotent: true,
    open_world: false,
    destructive: false,
};

/// Arguments of `calc`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalcArgs {
    /// An expression (real arithmetic: `7 / 2` is 3.5) such as `2^10 / 3`, `math::sqrt(2) * 3`, `(1 + 0.05)^12`.
    /// Operators: + - * / % ^, comparisons, parentheses; functions: math::sqrt, math::ln,
    /// math::log10, math::sin, math::cos, math::abs, min, max, floor, round, ceil.
    pub expression: String,
}

/// Rewrites integer literals as float literals (`6/4` -> `6.0/4.0`), so that division is
/// real division; digits inside names (`log10`) and numbers already with `.`/`e` are kept.
fn floats(expr: &str) -> String {
    let b = expr.as_bytes();
    let mut out = String::with_capacity(expr.len() + 8);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let prev_ident =
            i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b'.');
        if c.is_ascii_digit() && !prev_ident {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            out.push_str(&expr[start..i]);
            let next = b.get(i).copied();
            if !matches!(next, Some(b'.' | b'e' | b'E'))
                && !next.is_some_and(|n| n.is_ascii_alphabetic() || n == b'_')
            {
                out.push_str(".0");
            }
            continue;
        }
        let ch_len = expr[i..].chars().next().map(char::len_utf8).unwrap_or(1);
        out.push_str(&expr[i..i + ch_len]);
        i += ch_len;
    }
    out
}

/// Evaluates an arithmetic expression.
pub struct Calc;
impl Tool for Calc {
    type Args = CalcArgs;
    const NAME: &'static str = "calc";
    const DESCRIPTION: &'static str = "Evaluates an arithmetic expression exactly as written (real arithmetic, `^` is power, math::sqrt, math::ln, min, max, round...). Returns the value.";
    const HINTS: Hints = PURE;
    fn call(a: CalcArgs) -> Result<ToolResult, ToolError> {
        if a.expression.len() > 10_000 {
            return Err(ToolError::InvalidArguments(
                "expression: longer than 10000 characters".into(),
            ));
        }
        let v = evalexpr::eval(&floats(&a.expression))
            .map_err(|e| ToolError::Failed(format!("cannot evaluate `{}`: {e}", a.expression)))?;
        let json = match &v {
            evalexpr::Value::Int(i) => serde_json::json!(i),
            evalexpr::Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                let i = *f as i64;
                return Ok(ToolResult::text(i.to_string())
                    .with_structured(serde_json::json!({ "value": i })));
            }
            evalexpr::Value::Float(f) => serde_json::json!(f),
            evalexpr::Value::Boolean(b) => serde_json::json!(b),
            other => serde_json::json!(other.to_string()),
        };
        Ok(ToolResult::text(v.to_string()).with_structured(serde_json::json!({ "value": json })))
    }
}

/// Arguments of `convert_units`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConvertArgs {
    /// The quantity.
    pub value: f64,
    /// Unit of `value`, e.g. `mi`, `kg`, `degF`, `GiB`, `km/h`.
    pub from: String,
    /// Unit to convert to (same dimension).
    pub to: String,
}

/// (unit, dimension, factor to the base unit, offset) — value_base = value * factor + offset.
const UNITS: &[(&str, &str, f64, f64)] = &[
    ("m", "length", 1.0, 0.0),
    ("km", "length", 1000.0, 0.0),
    ("cm", "length", 0.01, 0.0),
    ("mm", "length", 0.001, 0.0),
    ("um", "length", 1e-6, 0.0),
    ("nm", "length", 1e-9, 0.0),
    ("mi", "length", 1609.344, 0.0),
    ("yd", "length", 0.9144, 0.0),
    ("ft", "length", 0.3048, 0.0),
    ("in", "length", 0.0254, 0.0),
    ("nmi", "length", 1852.0, 0.0),
    ("au", "length", 149_597_870_700.0, 0.0),
    ("ly", "length", 9_460_730_472_580_800.0, 0.0),
    ("kg", "mass", 1.0, 0.0),
    ("g", "mass", 0.001, 0.0),
    ("mg", "mass", 1e-6, 0.0),
    ("t", "mass", 1000.0, 0.0),
    ("lb", "mass", 0.453_592_37, 0.0),
    ("oz", "mass", 0.028_349_523_125, 0.0),
    ("st", "mass", 6.350_293_18, 0.0),
    ("s", "time", 1.0, 0.0),
    ("ms", "time", 0.001, 0.0),
    ("min", "time", 60.0, 0.0),
    ("h", "time", 3600.0, 0.0),
    ("d", "time", 86400.0, 0.0),
    ("wk", "time", 604_800.0, 0.0),
    ("yr", "time", 31_557_600.0, 0.0),
    ("l", "volume", 0.001, 0.0),
    ("ml", "volume", 1e-6, 0.0),
    ("m3", "volume", 1.0, 0.0),
    ("gal", "volume", 0.003_785_411_784, 0.0),
    ("qt", "volume", 0.000_946_352_946, 0.0),
    ("cup", "volume", 0.000_236_588_236_5, 0.0),
    ("floz", "volume", 0.000_029_573_529_562_5, 0.0),
    ("degC", "temperature", 1.0, 273.15),
    ("degF", "temperature", 5.0 / 9.0, 273.15 - 32.0 * 5.0 / 9.0),
    ("K", "temperature", 1.0, 0.0),
    ("B", "data", 1.0, 0.0),
    ("KB", "data", 1e3, 0.0),
    ("MB", "data", 1e6, 0.0),
    ("GB", "data", 1e9, 0.0),
    ("TB", "data", 1e12, 0.0),
    ("KiB", "data", 1024.0, 0.0),
    ("MiB", "data", 1_048_576.0, 0.0),
    ("GiB", "data", 1_073_741_824.0, 0.0),
    ("m/s", "speed", 1.0, 0.0),
    ("km/h", "speed", 1.0 / 3.6, 0.0),
    ("mph", "speed", 0.447_04, 0.0),
    ("kn", "speed", 1852.0 / 3600.0, 0.0),
    ("m2", "area", 1.0, 0.0),
    ("km2", "area", 1e6, 0.0),
    ("ha", "area", 1e4, 0.0),
    ("acre", "area", 4_046.856_422_4, 0.0),
    ("ft2", "area", 0.092_903_04, 0.0),
];

fn unit(name: &str) -> Result<(&'static str, &'static str, f64, f64), ToolError> {
    UNITS
        .iter()
        .find(|u| u.0 == name)
        .or_else(|| UNITS.iter().find(|u| u.0.eq_ignore_ascii_case(name)))
        .copied()
        .ok_or_else(|| {
            let known: Vec<&str> = UNITS.iter().map(|u| u.0).collect();
            ToolError::InvalidArguments(format!(
                "unknown unit `{name}`; known units: {}",
                known.join(", ")
            ))
        })
}

/// Converts between units.
pub struct Convert;
impl Tool for Convert {
    type Args = ConvertArgs;
    const NAME: &'static str = "convert_units";
    const DESCRIPTION: &'static str = "Converts a value between units of length, mass, time, volume, temperature (degC, degF, K), data size, speed and area.";
    const HINTS: Hints = PURE;
    fn call(a: ConvertArgs) -> Result<ToolResult, ToolError> {
        let from = unit(&a.from)?;
        let to = unit(&a.to)?;
        if from.1 != to.1 {
            return Err(ToolError::InvalidArguments(format!(
                "to: `{}` is a {} unit but `{}` is a {} unit",
                to.0, to.1, from.0, from.1
            )));
        }
        let base = a.value * from.2 + from.3;
        let out = (base - to.3) / to.2;
        Ok(
            ToolResult::text(format!("{} {} = {} {}", a.value, from.0, out, to.0))
                .with_structured(serde_json::json!({ "value": out, "unit": to.0 })),
        )
    }
}

/// Arguments of `date_calc`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DateArgs {
    /// A date, `YYYY-MM-DD` (proleptic Gregorian calendar).
    pub date: String,
    /// Days to add (negative to subtract).
    #[serde(default)]
    pub add_days: Option<i64>,
    /// Another date: the answer is the number of days from `date` to it.
    #[serde(default)]
    pub until: Option<String>,
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn parse_date(field: &str, s: &str) -> Result<i64, ToolError> {
    let bad = || ToolError::InvalidArguments(format!("{field}: `{s}` is not a YYYY-MM-DD date"));
    let mut it = s.trim().splitn(3, '-');
    let (y, m, d) = (it.next(), it.next(), it.next());
    let (Some(y), Some(m), Some(d)) = (y, m, d) else {
        return Err(bad());
    };
    let y: i64 = y.parse().map_err(|_| bad())?;
    let m: i64 = m.parse().map_err(|_| bad())?;
    let d: i64 = d.parse().map_err(|_| bad())?;
    if !(1..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    let days = days_from_civil(y, m, d);
    if civil_from_days(days) != (y, m, d) {
        return Err(ToolError::InvalidArguments(format!(
            "{field}: {s} does not exist"
        )));
    }
    Ok(days)
}

fn fmt_date(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    const WD: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let wd = WD[days.rem_euclid(7) as usize];
    format!("{y:04}-{m:02}-{d:02} ({wd})")
}

/// Calendar arithmetic.
pub struct DateCalc;
impl Tool for DateCalc {
    type Args = DateArgs;
    const NAME: &'static str = "date_calc";
    const DESCRIPTION: &'static str = "Calendar arithmetic on YYYY-MM-DD dates: the weekday of a date, the date N days later (add_days), or the number of days until another date (until).";
    const HINTS: Hints = PURE;
    fn call(a: DateArgs) -> Result<ToolResult, ToolError> {
        let start = parse_date("date", &a.date)?;
        let mut lines = vec![format!("date: {}", fmt_date(start))];
        let mut structured = serde_json::json!({ "date": fmt_date(start) });
        if let Some(n) = a.add_days {
            if n.abs() > 3_000_000 {
                return Err(ToolError::InvalidArguments(
                    "add_days: at most 3000000 days".into(),
                ));
            }
            lines.push(format!("{n:+} days: {}", fmt_date(start + n)));
            structured["result"] = serde_json::json!(fmt_date(start + n));
        }
        if let Some(u) = &a.until {
            let end = parse_date("until", u)?;
            lines.push(format!("days until {}: {}", fmt_date(end), end - start));
            structured["days"] = serde_json::json!(end - start);
        }
        Ok(ToolResult::text(lines.join("\n")).with_structured(structured))
    }
}

sibyl_plugin_sdk::plugin!(Calc, Convert, DateCalc);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_weekdays() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(
            fmt_date(days_from_civil(2000, 2, 29)),
            "2000-02-29 (Tuesday)"
        );
        assert!(parse_date("date", "2023-02-29").is_err());
        let r = DateCalc::call(DateArgs {
            date: "2024-01-01".into(),
            add_days: Some(60),
            until: Some("2025-01-01".into()),
        })
        .expect("date");
        assert!(r.text.contains("2024-03-01 (Friday)"), "{}", r.text);
        assert!(r.text.contains(": 366"), "{}", r.text);
    }

    #[test]
    fn units_convert() {
        let r = Convert::call(ConvertArgs {
            value: 212.0,
            from: "degF".into(),
            to: "degC".into(),
        })
        .expect("temp");
        let v = r.structured.expect("structured")["value"]
            .as_f64()
            .expect("f64");
        assert!((v - 100.0).abs() < 1e-9, "{v}");
        assert!(
            Convert::call(ConvertArgs {
                value: 1.0,
                from: "kg".into(),
                to: "m".into()
            })
            .is_err()
        );
    }

    #[test]
    fn calc_evaluates() {
        let r = Calc::call(CalcArgs {
            expression: "2^10 + 6 / 4".into(),
        })
        .expect("calc");
        assert_eq!(r.text, "1025.5");
        let r = Calc::call(CalcArgs {
            expression: "math::log10(1000) + 2^3".into(),
        })
        .expect("calc");
        assert_eq!(r.text, "11");
    }
}
