//! Spreadsheets (XLSX, XLSM, XLS) with calamine: one `## <sheet>` heading and one markdown
//! table per sheet, as Sibyl's pandas converter wrote (first row is the header). Dates come
//! out as ISO dates (calamine's `dates` feature), not serial numbers; formula cells show their
//! cached value. Hidden sheets are included (their data is part of the file).

use std::io::Cursor;

use calamine::{Data, Reader};

use super::{ExtractError, FileKind, markdown_table};

/// Converts a workbook of type `kind` (`Xlsx` or `Xls`).
///
/// # Errors
/// [`ExtractError::Corrupt`] naming the type if calamine cannot open it;
/// [`ExtractError::TooLarge`] past the decompression cap.
pub fn extract(
    bytes: &[u8],
    kind: FileKind,
    policy: &super::ExtractPolicy,
) -> Result<String, ExtractError> {
    let what = kind.name();
    if kind != FileKind::Xls {
        // calamine inflates members itself: check the bomb cap first.
        super::package::Package::open(bytes, policy, "XLSX")?.check_unpacked_size()?;
    }
    let cursor = Cursor::new(bytes);
    let mut book: calamine::Sheets<_> = match kind {
        FileKind::Xls => calamine::Xls::new(cursor)
            .map(calamine::Sheets::Xls)
            .map_err(|e| ExtractError::Corrupt(format!("{what}: {e}")))?,
        _ => calamine::open_workbook_auto_from_rs(cursor)
            .map_err(|e| ExtractError::Corrupt(format!("{what}: {e}")))?,
    };
    let mut out = String::new();
    for name in book.sheet_names() {
        let range = book
            .worksheet_range(&name)
            .map_err(|e| ExtractError::Corrupt(format!("{what}: sheet `{name}`: {e}")))?;
        out.push_str(&format!("## {name}\n\n"));
        let rows: Vec<Vec<String>> = range.rows().map(|r| r.iter().map(show).collect()).collect();
        out.push_str(&markdown_table(&rows));
        out.push('\n');
    }
    Ok(out)
}

fn show(d: &Data) -> String {
    match d {
        Data::Empty => String::new(),
        Data::Float(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", *f as i64),
        Data::DateTime(dt) => match dt.as_datetime() {
            Some(t) => {
                let s = t.to_string();
                s.strip_suffix(" 00:00:00").map(str::to_string).unwrap_or(s)
            }
            None => dt.to_string(),
        },
        Data::Error(e) => format!("#{e:?}"),
        other => other.to_string(),
    }
}
