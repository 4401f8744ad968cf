//! Find-in-page with AutoGen's matching rules, over the whole page.
//!
//! AutoGen's `find_on_page_ctrl_f` lower-cases the query and the page, splits both on `\W+`
//! and joins the words with single spaces (so case, punctuation and markup do not matter),
//! and lets `*` stand for any run of text. Like a browser's Ctrl+F, the query's first word
//! may match the end of a word and its last word the start of one (`zeal` finds
//! `Zealand`, `hat means` finds `that means`); words inside the query match whole words. It searched viewport by
//! viewport, which missed every match that straddles two viewports; here the search runs
//! once over the whole page's words and each match is mapped back to the viewport holding
//! its start. Link targets (the hidden ranges of [`Rendered`](super::convert::Rendered)) are
//! not part of the searchable words, so a sentence containing a link is found by its text.

use std::ops::Range;

use regex::Regex;

/// Longest query accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 1000;

/// Why a query cannot be searched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// No word characters in the query.
    #[error("the search string has no words to find")]
    Empty,
    /// Longer than [`MAX_QUERY_CHARS`].
    #[error("the search string is longer than {MAX_QUERY_CHARS} characters")]
    TooLong,
    /// The compiled pattern exceeded the regex engine's size limit.
    #[error("the search string is too complex: {0}")]
    TooComplex(String),
}

/// The searchable words of a page: lower-cased, joined by single spaces, with a map back to
/// byte offsets in the page text.
#[derive(Debug, Clone, Default)]
pub struct WordIndex {
    /// `" w1 w2 … wn "`: every word lower-cased, single spaces between and around.
    norm: String,
    /// Start of each word in `norm`.
    norm_starts: Vec<usize>,
    /// Byte range of each word in the page text.
    spans: Vec<Range<usize>>,
}

fn word_regex() -> &'static Regex {
    static WORD: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    WORD.get_or_init(|| match Regex::new(r"\w+") {
        Ok(r) => r,
        Err(e) => unreachable!("constant regex: {e}"),
    })
}

impl WordIndex {
    /// Indexes `text`, skipping words that start inside the sorted `hidden` ranges.
    pub fn new(text: &str, hidden: &[Range<usize>]) -> Self {
        let mut norm = String::with_capacity(text.len() + 2);
        norm.push(' ');
        let mut norm_starts = Vec::new();
        let mut spans = Vec::new();
        let mut h = 0;
        for m in word_regex().find_iter(text) {
            while h < hidden.len() && hidden[h].end <= m.start() {
                h += 1;
            }
            if h < hidden.len() && hidden[h].start <= m.start() {
                continue;
            }
            norm_starts.push(norm.len());
            for c in m.as_str().chars() {
                norm.extend(c.to_lowercase());
            }
            norm.push(' ');
            spans.push(m.range());
        }
        Self {
            norm,
            norm_starts,
            spans,
        }
    }

    /// Every non-overlapping match of `query`, as byte ranges of the page text, in order.
    ///
    /// # Errors
    /// [`QueryError`] for an empty, over-long or too complex query.
    pub fn find_all(&self, query: &str) -> Result<Vec<Range<usize>>, QueryError> {
        Ok(self.find_compiled(&compile_query(query)?))
    }

    /// Every non-overlapping match of a query compiled with [`compile_query`].
    pub fn find_compiled(&self, re: &Regex) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        for m in re.find_iter(&self.norm) {
            let (Some(first), Some(last)) = (self.word_at(m.start()), self.word_at(m.end() - 1))
            else {
                continue;
            };
            out.push(self.spans[first].start..self.spans[last].end);
        }
        out
    }

    /// Index of the word whose normalized text contains `norm_offset` (or the word before a
    /// separating space).
    fn word_at(&self, norm_offset: usize) -> Option<usize> {
        let i = self.norm_starts.partition_point(|&s| s <= norm_offset);
        // A match starts at a word (after `\b`); a separator offset maps to the next word.
        if i == 0 {
            (!self.norm_starts.is_empty()).then_some(0)
        } else {
            Some(i - 1)
        }
    }
}

/// Compiles a query by AutoGen's rules: words split on `\W+`, lower-cased, separated by one
/// space; `*` matches any run of text (at the very start or end of the query, the rest of a
/// word). The first and last words may be parts of words, as in a browser's Ctrl+F. Internal `*` is lazy, so matches are as short as possible
/// and can be counted.
///
/// # Errors
/// [`QueryError`].
pub fn compile_query(query: &str) -> Result<Regex, QueryError> {
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(QueryError::TooLong);
    }
    #[derive(PartialEq)]
    enum Piece {
        Word(String, bool), // word, glued to the previous piece
        Star,
    }
    let mut pieces: Vec<Piece> = Vec::new();
    let mut prev_end = 0usize;
    let lowered = query.to_lowercase();
    static TOKEN: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let token = TOKEN.get_or_init(|| match Regex::new(r"\w+|\*") {
        Ok(r) => r,
        Err(e) => unreachable!("constant regex: {e}"),
    });
    for m in token.find_iter(&lowered) {
        let glued = m.start() == prev_end && !pieces.is_empty();
        prev_end = m.end();
        if m.as_str() == "*" {
            if pieces.last() != Some(&Piece::Star) {
                pieces.push(Piece::Star);
            }
        } else {
            pieces.push(Piece::Word(m.as_str().to_string(), glued));
        }
    }
    if !pieces.iter().any(|p| matches!(p, Piece::Word(..))) {
        return Err(QueryError::Empty);
    }
    let n = pieces.len();
    let mut pat = String::new();
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Star if i == 0 || i == n - 1 => pat.push_str(r"\w*"),
            Piece::Star => pat.push_str(".*?"),
            Piece::Word(w, glued) => {
                let after_word = i > 0 && matches!(pieces[i - 1], Piece::Word(..));
                if after_word && !glued {
                    pat.push(' ');
                }
                pat.push_str(&regex::escape(w));
            }
        }
    }
    regex::RegexBuilder::new(&pat)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| QueryError::TooComplex(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(text: &str, q: &str) -> Vec<String> {
        WordIndex::new(text, &[])
            .find_all(q)
            .expect("query")
            .into_iter()
            .map(|r| text[r].to_string())
            .collect()
    }

    #[test]
    fn case_punctuation_and_markup_insensitive() {
        let t = "The **Quick**, brown fox — jumped! Over *the* lazy dog.";
        assert_eq!(find(t, "quick brown"), vec!["Quick**, brown"]);
        assert_eq!(
            find(t, "fox jumped over the"),
            vec!["fox — jumped! Over *the"]
        );
        assert!(find(t, "brown cat").is_empty());
    }

    #[test]
    fn edges_match_parts_of_words_inside_whole_words() {
        assert_eq!(find("New Zealand", "zeal"), vec!["Zealand"]);
        assert_eq!(find("New Zealand", "zeal*"), vec!["Zealand"]);
        assert_eq!(find("New Zealand", "*land"), vec!["Zealand"]);
        assert_eq!(find("so that means", "hat means"), vec!["that means"]);
        assert!(find("New Zealand", "ew zeal").len() == 1);
        assert!(
            find("New Zealand bird", "new zeal bird").is_empty(),
            "inner words are whole"
        );
    }

    #[test]
    fn star_spans_text_lazily_and_counts_matches() {
        let t = "alpha one beta. alpha two beta. alpha three beta.";
        assert_eq!(
            find(t, "alpha * beta"),
            vec!["alpha one beta", "alpha two beta", "alpha three beta"]
        );
        assert_eq!(find(t, "alpha*beta").len(), 3);
        assert_eq!(find(t, "alpha").len(), 3);
    }

    #[test]
    fn hidden_ranges_are_skipped() {
        let text = "see [the docs](https://x.org/docs) for more";
        let start = text.find("https").expect("url");
        let end = text.find(')').expect("paren");
        let hidden: Vec<Range<usize>> = std::iter::once(start..end).collect();
        let idx = WordIndex::new(text, &hidden);
        let m = idx.find_all("the docs for more").expect("q");
        assert_eq!(m.len(), 1);
        assert_eq!(
            &text[m[0].clone()],
            "the docs](https://x.org/docs) for more"
        );
        assert!(idx.find_all("x org").expect("q").is_empty());
    }

    #[test]
    fn unicode_words() {
        assert_eq!(find("Große Straße in Köln", "STRASSE").len(), 0);
        assert_eq!(
            find("Große Straße in Köln", "straße in köln"),
            vec!["Straße in Köln"]
        );
    }

    #[test]
    fn bad_queries() {
        assert_eq!(compile_query("  ,.; ").err(), Some(QueryError::Empty));
        assert_eq!(compile_query("*").err(), Some(QueryError::Empty));
        assert_eq!(
            compile_query(&"a ".repeat(600)).err(),
            Some(QueryError::TooLong)
        );
        // Regex metacharacters are literal.
        assert!(compile_query("a+b (c) [d] $").is_ok());
    }
}
