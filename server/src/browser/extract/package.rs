//! ZIP containers (OOXML, EPUB, plain ZIP) read under decompression caps, and OOXML
//! relationships resolved inside the package only.
//!
//! Every member is read through a shared byte budget (`browser.extract.max_unpacked_bytes`)
//! and the entry count is capped (`browser.extract.max_archive_entries`), so a ZIP bomb is
//! refused with [`ExtractError::TooLarge`] instead of filling memory. Relationships with
//! `TargetMode="External"` or a target outside the package are never followed (the
//! markitdown CVE-2025-11849 class: `rlink.docx` reading a local file through an external
//! image link).

use std::io::{Cursor, Read};

use super::xml::{self, Element};
use super::{ExtractError, ExtractPolicy};

/// An opened ZIP with a decompression budget.
pub struct Package<'a> {
    zip: zip::ZipArchive<Cursor<&'a [u8]>>,
    budget: u64,
    limit: u64,
    what: &'static str,
}

/// One relationship of an OOXML part.
#[derive(Debug, Clone)]
pub struct Rel {
    /// `Id`, e.g. `rId4`.
    pub id: String,
    /// The relationship type's last path segment, e.g. `image`, `notesSlide`, `hyperlink`.
    pub kind: String,
    /// For internal targets: the member path inside the package (normalised, no leading
    /// `/`). For external ones: the raw target, which is never opened.
    pub target: String,
    /// `TargetMode="External"` (or a target that would leave the package).
    pub external: bool,
}

impl<'a> Package<'a> {
    /// Opens `bytes` as a ZIP named `what` (e.g. `DOCX`) for error messages.
    ///
    /// # Errors
    /// [`ExtractError::Corrupt`] if it is not a readable ZIP; [`ExtractError::TooLarge`] if
    /// it has more entries than allowed.
    pub fn open(
        bytes: &'a [u8],
        policy: &ExtractPolicy,
        what: &'static str,
    ) -> Result<Self, ExtractError> {
        let zip = zip::ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| ExtractError::Corrupt(format!("{what}: not a readable ZIP: {e}")))?;
        if zip.len() > policy.max_archive_entries {
            return Err(ExtractError::TooLarge(format!(
                "{what}: {} entries, more than browser.extract.max_archive_entries = {}",
                zip.len(),
                policy.max_archive_entries
            )));
        }
        Ok(Self {
            zip,
            budget: policy.max_unpacked_bytes as u64,
            limit: policy.max_unpacked_bytes as u64,
            what,
        })
    }

    /// Member names in archive order (directories included, ending in `/`).
    pub fn names(&self) -> Vec<String> {
        self.zip
            .file_names()
            .filter_map(|n| n.ok().map(|n| n.into_owned()))
            .collect()
    }

    /// Uncompressed size claimed by the member at `index`, and its name.
    pub fn entry(&mut self, index: usize) -> Option<(String, u64)> {
        let f = self.zip.by_index_raw(index).ok()?;
        Some((f.name().ok()?.into_owned(), f.size()))
    }

    /// Decompression budget left, in bytes.
    pub fn remaining(&self) -> u64 {
        self.budget
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.zip.len()
    }

    /// Whether the archive is empty.
    pub fn is_empty(&self) -> bool {
        self.zip.is_empty()
    }

    /// Decompresses every member into nothing, counting bytes against the budget: a bomb
    /// check for formats whose parser reads the ZIP itself (calamine for XLSX). Declared
    /// sizes are not trusted.
    ///
    /// # Errors
    /// [`ExtractError::TooLarge`] past the cap; [`ExtractError::Corrupt`] on a damaged
    /// member.
    pub fn check_unpacked_size(&mut self) -> Result<(), ExtractError> {
        let what = self.what;
        for i in 0..self.zip.len() {
            let f = self
                .zip
                .by_index(i)
                .map_err(|e| ExtractError::Corrupt(format!("{what}: member {i}: {e}")))?;
            let n = std::io::copy(&mut f.take(self.budget + 1), &mut std::io::sink())
                .map_err(|e| ExtractError::Corrupt(format!("{what}: member {i}: {e}")))?;
            if n > self.budget {
                return Err(ExtractError::TooLarge(format!(
                    "{what}: decompressed contents exceed browser.extract.max_unpacked_bytes = {} bytes",
                    self.limit
                )));
            }
            self.budget -= n;
        }
        Ok(())
    }

    /// Reads member `name` (decompressed), or `None` if there is no such member.
    ///
    /// # Errors
    /// [`ExtractError::TooLarge`] when the package's decompression budget runs out;
    /// [`ExtractError::Corrupt`] on a damaged member.
    pub fn read(&mut self, name: &str) -> Result<Option<Vec<u8>>, ExtractError> {
        let what = self.what;
        let f = match self.zip.by_name(name) {
            Ok(f) => f,
            Err(zip::result::ZipError::FileNotFound) => return Ok(None),
            Err(e) => {
                return Err(ExtractError::Corrupt(format!(
                    "{what}: member `{name}`: {e}"
                )));
            }
        };
        let mut out = Vec::new();
        let n = f
            .take(self.budget + 1)
            .read_to_end(&mut out)
            .map_err(|e| ExtractError::Corrupt(format!("{what}: member `{name}`: {e}")))?;
        if n as u64 > self.budget {
            return Err(ExtractError::TooLarge(format!(
                "{what}: decompressed contents exceed browser.extract.max_unpacked_bytes = {} bytes (at member `{name}`)",
                self.limit
            )));
        }
        self.budget -= n as u64;
        Ok(Some(out))
    }

    /// Reads and parses member `name` as XML, or `None` if missing.
    ///
    /// # Errors
    /// As [`Package::read`], and [`ExtractError::Corrupt`] for malformed XML.
    pub fn xml(&mut self, name: &str) -> Result<Option<Element>, ExtractError> {
        match self.read(name)? {
            Some(b) => Ok(Some(xml::parse(&b, &format!("{} {name}", self.what))?)),
            None => Ok(None),
        }
    }

    /// The relationships of part `part` (from `dir/_rels/file.rels`); empty if none.
    ///
    /// # Errors
    /// As [`Package::xml`].
    pub fn rels(&mut self, part: &str) -> Result<Vec<Rel>, ExtractError> {
        let (dir, file) = match part.rfind('/') {
            Some(i) => (&part[..i], &part[i + 1..]),
            None => ("", part),
        };
        let rels_name = if dir.is_empty() {
            format!("_rels/{file}.rels")
        } else {
            format!("{dir}/_rels/{file}.rels")
        };
        let Some(doc) = self.xml(&rels_name)? else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        doc.find_all("Relationship", &mut found);
        Ok(found
            .into_iter()
            .filter_map(|r| {
                let id = r.attr("Id")?.to_string();
                let kind = r
                    .attr("Type")
                    .and_then(|t| t.rsplit('/').next())
                    .unwrap_or("")
                    .to_string();
                let raw = r.attr("Target")?.to_string();
                let external_mode = r
                    .attr("TargetMode")
                    .is_some_and(|m| m.eq_ignore_ascii_case("external"));
                let (target, external) = if external_mode {
                    (raw, true)
                } else {
                    match resolve(dir, &raw) {
                        Some(t) => (t, false),
                        None => (raw, true),
                    }
                };
                Some(Rel {
                    id,
                    kind,
                    target,
                    external,
                })
            })
            .collect())
    }
}

/// Resolves a package-relative `target` against directory `dir`; `None` if it would leave
/// the package or looks like a URL.
pub fn resolve(dir: &str, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("file:") || target.contains('\\') {
        return None;
    }
    let target = target.split('#').next().unwrap_or("");
    let mut parts: Vec<&str> = if let Some(abs) = target.strip_prefix('/') {
        return normalise(abs.split('/').collect());
    } else if dir.is_empty() {
        Vec::new()
    } else {
        dir.split('/').collect()
    };
    parts.extend(target.split('/'));
    normalise(parts)
}

fn normalise(parts: Vec<&str>) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for p in parts {
        match p {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            p => out.push(p),
        }
    }
    (!out.is_empty()).then(|| out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_stay_inside() {
        assert_eq!(
            resolve("ppt/slides", "../notesSlides/n1.xml").as_deref(),
            Some("ppt/notesSlides/n1.xml")
        );
        assert_eq!(
            resolve("word", "/word/media/a.png").as_deref(),
            Some("word/media/a.png")
        );
        assert_eq!(resolve("word", "../../../etc/passwd"), None);
        assert_eq!(resolve("word", "file:///etc/passwd"), None);
        assert_eq!(resolve("word", "http://x/y"), None);
    }
}
