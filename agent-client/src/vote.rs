//! Majority vote over the answers of N independent runs (the Sibyl paper, §2.4; the
//! released code lacks it).
//!
//! Answers are normalised before counting, after GAIA's scorer: a number ignores `$`, `%`,
//! thousands commas and spaces (`1,000` = `1000.0`); a list (`,` or `;` separated) is
//! compared element by element; a string ignores case, a leading article, whitespace and
//! punctuation (`The Hague.` = `hague`).
//!
//! Ties between equally large groups are broken by the jury's confidence — the highest
//! [`Ballot::confidence`] in each group (a jury that agreed, i.e. whose Critic said
//! TERMINATE, in fewer rounds is more confident) — and then by the earliest run. The
//! winning answer is printed as the earliest run of the winning group wrote it.

use serde::{Deserialize, Serialize};

/// One run's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ballot {
    /// The formatted answer.
    pub answer: String,
    /// The jury's confidence in 0..=1: `1 / rounds` when the Critic agreed, else 0.
    pub confidence: f64,
}

/// The result of a vote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VoteOutcome {
    /// The winning answer (as its earliest run wrote it).
    pub answer: String,
    /// Index of the run whose answer is printed.
    pub winner_run: usize,
    /// How many runs gave the winning (normalised) answer.
    pub votes: usize,
    /// How many runs voted.
    pub of: usize,
    /// How a tie was broken: `none`, `jury_confidence` or `first_run`.
    pub tie_break: String,
}

/// Normalises an answer for counting (see the module docs).
#[must_use]
pub fn normalize(answer: &str) -> String {
    let a = answer.trim().trim_end_matches('.').trim();
    if let Some(n) = as_number(a) {
        return n;
    }
    if a.contains(',') || a.contains(';') {
        return a
            .split([',', ';'])
            .map(|e| as_number(e.trim()).unwrap_or_else(|| normalize_str(e)))
            .collect::<Vec<_>>()
            .join(",");
    }
    normalize_str(a)
}

fn as_number(s: &str) -> Option<String> {
    let cleaned: String = s
        .chars()
        .filter(|c| !matches!(c, '$' | '%' | ',' | ' ' | '€' | '£'))
        .collect();
    if cleaned.is_empty() || !cleaned.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: f64 = cleaned.parse().ok()?;
    v.is_finite().then(|| format!("{v}"))
}

fn normalize_str(s: &str) -> String {
    let lower = s.trim().to_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    let words = match words.first() {
        Some(&("the" | "a" | "an")) if words.len() > 1 => &words[1..],
        _ => &words[..],
    };
    words
        .concat()
        .chars()
        .filter(|c| c.is_alphanumeric())
        .collect()
}

/// Chooses the majority answer; `None` when there are no ballots.
#[must_use]
pub fn majority(ballots: &[Ballot]) -> Option<VoteOutcome> {
    // Groups in order of first appearance: (key, first run, count, best confidence).
    let mut groups: Vec<(String, usize, usize, f64)> = Vec::new();
    for (i, b) in ballots.iter().enumerate() {
        let key = normalize(&b.answer);
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => {
                g.2 += 1;
                g.3 = g.3.max(b.confidence);
            }
            None => groups.push((key, i, 1, b.confidence)),
        }
    }
    let top = groups.iter().map(|g| g.2).max()?;
    let tied: Vec<&(String, usize, usize, f64)> = groups.iter().filter(|g| g.2 == top).collect();
    let (winner, tie_break) = if tied.len() == 1 {
        (tied[0], "none")
    } else {
        let best = tied.iter().map(|g| g.3).fold(f64::MIN, f64::max);
        let by_conf: Vec<_> = tied.iter().filter(|g| g.3 == best).collect();
        if by_conf.len() == 1 {
            (*by_conf[0], "jury_confidence")
        } else {
            // Groups are in order of first appearance: the first is the earliest run's.
            (*by_conf[0], "first_run")
        }
    };
    Some(VoteOutcome {
        answer: ballots[winner.1].answer.clone(),
        winner_run: winner.1,
        votes: winner.2,
        of: ballots.len(),
        tie_break: tie_break.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(answer: &str, confidence: f64) -> Ballot {
        Ballot {
            answer: answer.into(),
            confidence,
        }
    }

    #[test]
    fn normalises_like_gaia() {
        assert_eq!(normalize("1,000"), normalize("1000.0"));
        assert_eq!(normalize("$12"), "12");
        assert_eq!(normalize("The Hague."), normalize("hague"));
        assert_eq!(normalize("a, b;c"), normalize("A, B, C"));
        assert_ne!(normalize("Paris"), normalize("Lyon"));
    }

    #[test]
    fn majority_wins_and_earliest_spelling_is_kept() {
        let v = majority(&[b("41", 1.0), b("42", 0.0), b("42.0", 0.0)]).expect("vote");
        assert_eq!(
            (v.answer.as_str(), v.winner_run, v.votes, v.of),
            ("42", 1, 2, 3)
        );
        assert_eq!(v.tie_break, "none");
    }

    #[test]
    fn ties_go_to_the_more_confident_jury_then_the_first_run() {
        let v = majority(&[b("Paris", 0.0), b("Lyon", 0.5)]).expect("vote");
        assert_eq!(
            (v.answer.as_str(), v.tie_break.as_str()),
            ("Lyon", "jury_confidence")
        );
        let v = majority(&[b("Paris", 0.5), b("Lyon", 0.5), b("Nice", 0.25)]).expect("vote");
        assert_eq!(
            (v.answer.as_str(), v.tie_break.as_str()),
            ("Paris", "first_run")
        );
        assert_eq!(majority(&[]), None);
    }
}
