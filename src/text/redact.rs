//! Redaction of structured secrets before anything is stored: connection
//! strings with credentials, `password=…`-style pairs, Bearer tokens,
//! private-key blocks and well-known token formats. Patterns live in
//! `lexicon/secrets.tsv`.
//!
//! Natural-language descriptions of secrets are not detected (the seeds say
//! so); callers must avoid them.

use std::sync::LazyLock;

use regex::Regex;

struct Pattern {
    name: String,
    regex: Regex,
}

static PATTERNS: LazyLock<Vec<Pattern>> = LazyLock::new(|| {
    include_str!("../../lexicon/secrets.tsv")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|line| {
            let (name, pattern) = line.split_once('\t')?;
            // The file is compiled in and covered by tests, so a bad pattern
            // is a build defect; it is skipped rather than crashing a write.
            let regex = Regex::new(pattern.trim()).ok()?;
            Some(Pattern { name: name.trim().to_owned(), regex })
        })
        .collect()
});

/// Words that only introduce a secret; alone they are not a memory.
static SECRET_LABELS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:password|passwd|pwd|passphrase|secret|client[_-]?secret|secret[_-]?key|api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|aws_secret_access_key|aws_access_key_id|access[_-]?token|auth[_-]?token|refresh[_-]?token|token|private[_-]?key|authorization|bearer|basic|key)\b|密码|口令|密钥|秘钥|令牌|パスワード|秘密鍵|アクセスキー|トークン")
        .expect("static regex")
});

/// The result of redacting a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redaction {
    /// The text with every secret replaced by `[REDACTED:<kind>]`.
    pub text: String,
    /// Kinds of secret found, in order, one entry per replacement.
    pub kinds: Vec<String>,
}

impl Redaction {
    /// Whether anything was replaced.
    pub fn changed(&self) -> bool {
        !self.kinds.is_empty()
    }

    /// Whether anything is left besides redaction markers, the labels that
    /// introduced the secrets (`password=`, `Bearer`, 密码：…), spaces and
    /// punctuation.
    pub fn has_substance(&self) -> bool {
        if !self.changed() {
            // Nothing was removed: any text stays (";)" is a memory too).
            return !self.text.trim().is_empty();
        }
        let mut rest = self.text.clone();
        for kind in &self.kinds {
            rest = rest.replace(&format!("[REDACTED:{kind}]"), " ");
        }
        let rest = SECRET_LABELS.replace_all(&rest, " ");
        rest.chars().any(char::is_alphanumeric)
    }
}

/// Replaces every structured secret in `text`.
pub fn redact(text: &str) -> Redaction {
    let mut current = text.to_owned();
    let mut kinds = Vec::new();
    for pattern in PATTERNS.iter() {
        if !pattern.regex.is_match(&current) {
            continue;
        }
        let marker = format!("[REDACTED:{}]", pattern.name);
        let mut out = String::with_capacity(current.len());
        let mut last = 0;
        for caps in pattern.regex.captures_iter(&current) {
            let span = caps.name("secret").or_else(|| caps.name("secret2")).or_else(|| caps.get(0));
            let Some(span) = span else { continue };
            if span.as_str().starts_with("[REDACTED:") {
                continue;
            }
            out.push_str(&current[last..span.start()]);
            out.push_str(&marker);
            last = span.end();
            kinds.push(pattern.name.clone());
        }
        out.push_str(&current[last..]);
        current = out;
    }
    Redaction { text: current, kinds }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        let lines = include_str!("../../lexicon/secrets.tsv")
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count();
        assert_eq!(PATTERNS.len(), lines, "a pattern in lexicon/secrets.tsv does not compile");
    }

    #[test]
    fn replaces_only_the_secret_part_of_a_connection_string() {
        let r = redact("DB is postgres://app:s3cr3t-pw@db.internal:5432/main");
        assert_eq!(r.text, "DB is postgres://app:[REDACTED:connection_string]@db.internal:5432/main");
        assert!(r.has_substance());
    }

    #[test]
    fn nothing_left_is_detected() {
        let r = redact("AKIAIOSFODNN7EXAMPLE");
        assert!(r.changed());
        assert!(!r.has_substance());
        assert!(redact(";)").has_substance(), "text without secrets is never 'nothing left'");
    }
}
