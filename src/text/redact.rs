//! Redaction of secrets before anything is stored.
//!
//! Two rulesets, both data files compiled in:
//! - `lexicon/gitleaks.toml`: the default configuration of gitleaks
//!   (MIT, Zachary Rice; see `lexicon/README.md` for its provenance and
//!   `scripts/update-secret-rules.sh` to refresh it): about two hundred
//!   provider formats, each with its keywords (a prefilter), its secret
//!   group, a minimum entropy and allowlists, applied as gitleaks applies
//!   them.
//! - `lexicon/secrets.tsv`: what a memory of a conversation holds that a
//!   source-code scanner does not look for: credentials inside connection
//!   strings, `password=` / `api_key:` pairs, `.env` and shell assignments
//!   of `*PASS*` / `*SECRET*` / `*TOKEN*` / `*KEY*` names, secrets on command
//!   lines (`mysql -pX`, `sshpass -p X`, `curl -u user:pass`, `docker login
//!   -p X`, `--password X`), credential labels in Chinese (simplified and
//!   traditional), Japanese and Korean, secrets stated in prose ("the aws
//!   secret is X"), HMG's own access tokens and a few formats gitleaks only
//!   finds next to a provider's name. They run first.
//!
//! Then every value found is removed wherever else it occurs in the same
//! text ("the same value elsewhere"). Kinds are reported, never values.
//!
//! **Invariant:** every free-text field HMG stores passes through [`redact`]
//! before anything else sees it (entity extraction, embedding, indexing).

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

/// How a rule's match locates the secret.
#[derive(Debug, Clone, Copy)]
enum Group {
    /// HMG rules: the named group `secret` (or `secret2`), else the match.
    Named,
    /// gitleaks: this group, else the first non-empty group, else the match.
    Index(usize),
    /// gitleaks without `secretGroup`: the first non-empty group, else the match.
    FirstNonEmpty,
}

/// What an allowlist regex is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Target {
    #[default]
    Secret,
    Match,
    Line,
}

/// Findings that are not secrets (gitleaks' allowlists, minus file paths).
#[derive(Debug, Default)]
struct Allow {
    regexes: Vec<Regex>,
    target: Target,
    stopwords: Vec<String>,
    /// Every condition must hold (`condition = "AND"`).
    all: bool,
}

impl Allow {
    fn allows(&self, secret: &str, whole: &str, line: &str) -> bool {
        let lower = secret.to_lowercase();
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => whole,
            Target::Line => line,
        };
        let by_regex = (!self.regexes.is_empty()).then(|| self.regexes.iter().any(|r| r.is_match(target)));
        let by_stopword = (!self.stopwords.is_empty()).then(|| self.stopwords.iter().any(|w| lower.contains(w.as_str())));
        let checks: Vec<bool> = [by_regex, by_stopword].into_iter().flatten().collect();
        if checks.is_empty() {
            return false;
        }
        if self.all { checks.iter().all(|c| *c) } else { checks.iter().any(|c| *c) }
    }
}

/// One detection rule.
struct Rule {
    name: String,
    regex: Regex,
    group: Group,
    /// Lowercase words one of which must occur in the text (none: always run).
    keywords: Vec<String>,
    /// Minimum Shannon entropy of the secret (0: none).
    entropy: f64,
    /// A pattern the secret must also match (HMG rules' fourth column).
    shape: Option<Regex>,
    allow: Vec<Allow>,
}

/// A ruleset: its rules, and the global allowlist.
struct Ruleset {
    rules: Vec<Rule>,
    global: Allow,
    /// Rules that could not be loaded (a test checks the list).
    #[cfg_attr(not(test), allow(dead_code))]
    skipped: Vec<String>,
}

/// HMG's own rules (`lexicon/secrets.tsv`: `name<TAB>regex[<TAB>min
/// entropy[<TAB>shape the secret must match]]`).
static HMG_RULES: LazyLock<Ruleset> = LazyLock::new(|| {
    let mut skipped = Vec::new();
    let rules = include_str!("../../lexicon/secrets.tsv")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|line| {
            let mut columns = line.split('\t');
            let name = columns.next()?.trim().to_owned();
            let pattern = columns.next()?.trim();
            let entropy = columns.next().and_then(|e| e.trim().parse().ok()).unwrap_or(0.0);
            let shape = columns.next().map(|s| Regex::new(s.trim()));
            // Compiled in and covered by tests: a bad pattern is a build
            // defect, skipped (and reported by a test) rather than crashing a write.
            match (Regex::new(pattern), shape.transpose()) {
                (Ok(regex), Ok(shape)) => {
                    Some(Rule { name, regex, group: Group::Named, keywords: Vec::new(), entropy, shape, allow: Vec::new() })
                }
                _ => {
                    skipped.push(name);
                    None
                }
            }
        })
        .collect();
    Ruleset { rules, global: Allow::default(), skipped }
});

#[derive(serde::Deserialize)]
struct GitleaksConfig {
    #[serde(default)]
    allowlist: Option<GitleaksAllow>,
    #[serde(default)]
    rules: Vec<GitleaksRule>,
}

#[derive(serde::Deserialize)]
struct GitleaksRule {
    id: String,
    regex: Option<String>,
    #[serde(rename = "secretGroup")]
    secret_group: Option<usize>,
    entropy: Option<f64>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    allowlists: Vec<GitleaksAllow>,
}

#[derive(serde::Deserialize, Default)]
struct GitleaksAllow {
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(rename = "regexTarget")]
    regex_target: Option<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    condition: Option<String>,
    #[serde(default)]
    paths: Vec<String>,
}

/// A gitleaks pattern (Go RE2) in Rust's syntax with Go's meaning: `\w`,
/// `\d`, `\s` and `\b` are ASCII-only in Go and Unicode-aware in Rust,
/// where they also cost far more to compile (2.3 s for the whole set,
/// against about 0.2 s with the ASCII classes).
fn ascii_classes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 32);
    let mut in_class = false;
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escape @ ('w' | 'W' | 'd' | 'D' | 's' | 'S')) => {
                    let name = match escape.to_ascii_lowercase() {
                        'w' => "word",
                        'd' => "digit",
                        _ => "space",
                    };
                    let not = if escape.is_ascii_uppercase() { "^" } else { "" };
                    if in_class {
                        out.push_str(&format!("[:{not}{name}:]"));
                    } else {
                        out.push_str(&format!("[[:{not}{name}:]]"));
                    }
                }
                Some('b') if !in_class => out.push_str("(?-u:\\b)"),
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            '[' if in_class && chars.peek() == Some(&':') => {
                // A POSIX class inside a class: copy it whole.
                out.push('[');
                for c in chars.by_ref() {
                    out.push(c);
                    if c == ']' {
                        break;
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push(']');
                    chars.next();
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

fn allow_of(toml: &GitleaksAllow) -> Option<Allow> {
    let all = toml.condition.as_deref().is_some_and(|c| c.eq_ignore_ascii_case("and"));
    if all && !toml.paths.is_empty() {
        // Needs a file path to hold: never true for a memory.
        return None;
    }
    let target = match toml.regex_target.as_deref() {
        Some("match") => Target::Match,
        Some("line") => Target::Line,
        _ => Target::Secret,
    };
    Some(Allow {
        regexes: toml.regexes.iter().filter_map(|r| Regex::new(&ascii_classes(r)).ok()).collect(),
        target,
        stopwords: toml.stopwords.iter().map(|w| w.to_lowercase()).collect(),
        all,
    })
}

static GITLEAKS: LazyLock<Ruleset> = LazyLock::new(|| {
    let config: GitleaksConfig = match toml::from_str(include_str!("../../lexicon/gitleaks.toml")) {
        Ok(config) => config,
        Err(error) => {
            tracing::error!(%error, "lexicon/gitleaks.toml does not parse; provider formats are not redacted");
            return Ruleset { rules: Vec::new(), global: Allow::default(), skipped: vec![format!("the whole file: {error}")] };
        }
    };
    let mut skipped = Vec::new();
    let mut rules = Vec::new();
    for rule in config.rules {
        let Some(pattern) = rule.regex.as_deref() else {
            skipped.push(format!("{} (matches file names only)", rule.id));
            continue;
        };
        let regex = match regex::RegexBuilder::new(&ascii_classes(pattern)).size_limit(64 * 1024 * 1024).build() {
            Ok(regex) => regex,
            Err(error) => {
                skipped.push(format!("{} ({error})", rule.id));
                continue;
            }
        };
        let group = match rule.secret_group {
            Some(n) if n > 0 => Group::Index(n),
            _ => Group::FirstNonEmpty,
        };
        rules.push(Rule {
            name: rule.id,
            regex,
            group,
            keywords: rule.keywords.iter().map(|k| k.to_lowercase()).collect(),
            entropy: rule.entropy.unwrap_or(0.0),
            shape: None,
            allow: rule.allowlists.iter().filter_map(allow_of).collect(),
        });
    }
    let global = config.allowlist.as_ref().and_then(allow_of).unwrap_or_default();
    Ruleset { rules, global, skipped }
});

/// Words that only introduce a secret; alone they are not a memory.
static SECRET_LABELS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:password|passwd|pwd|passphrase|secret|client[_-]?secret|secret[_-]?key|api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|aws_secret_access_key|aws_access_key_id|access[_-]?token|auth[_-]?token|refresh[_-]?token|token|private[_-]?key|authorization|bearer|basic|key|export|set|is|the|my|our|for|of)\b|密码|密碼|口令|密钥|密鑰|金鑰|秘钥|令牌|權杖|パスワード|秘密鍵|アクセスキー|トークン|비밀번호|암호|패스워드|토큰|[A-Z][A-Z0-9_]*=")
        .expect("static regex")
});

/// Redaction markers, which later rules and the second pass leave alone.
static MARKER: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\[REDACTED:[A-Za-z0-9_\-]+\]").expect("static regex"));

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
        let rest = MARKER.replace_all(&self.text, " ");
        let rest = SECRET_LABELS.replace_all(&rest, " ");
        rest.chars().any(char::is_alphanumeric)
    }
}

/// Shannon entropy of `text`'s bytes, in bits.
fn entropy(text: &str) -> f64 {
    let mut counts: HashMap<u8, usize> = HashMap::new();
    for byte in text.bytes() {
        *counts.entry(byte).or_default() += 1;
    }
    let n = text.len() as f64;
    counts.values().map(|c| *c as f64 / n).map(|p| -p * p.log2()).sum()
}

/// The line of `text` around `at`.
fn line_at(text: &str, at: usize) -> &str {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    &text[start..end]
}

/// The secret's span in one match of `rule`.
fn secret_span<'t>(rule: &Rule, caps: &regex::Captures<'t>) -> Option<regex::Match<'t>> {
    let first_non_empty = || (1..caps.len()).filter_map(|i| caps.get(i)).find(|m| !m.as_str().is_empty());
    match rule.group {
        Group::Named => caps.name("secret").or_else(|| caps.name("secret2")).or_else(|| caps.name("secret3")).or_else(|| caps.get(0)),
        Group::Index(n) => caps.get(n).filter(|m| !m.as_str().is_empty()).or_else(first_non_empty).or_else(|| caps.get(0)),
        Group::FirstNonEmpty => first_non_empty().or_else(|| caps.get(0)),
    }
}

/// Characters tokens are made of.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+' | '/' | '=' | '~' | '%')
}

/// The end of the secret `start..end`, extended to the end of the token
/// run it stops inside. A run does not continue past a final `.` (the end
/// of a sentence).
fn token_end(text: &str, start: usize, end: usize) -> usize {
    let secret = &text[start..end];
    let inside = secret.chars().last().is_some_and(is_token_char) && secret.chars().all(|c| !c.is_whitespace());
    if !inside {
        return end;
    }
    let mut extended = end;
    for (offset, c) in text[end..].char_indices() {
        if !is_token_char(c) {
            break;
        }
        extended = end + offset + c.len_utf8();
    }
    // What the run ends with beyond the match is sentence punctuation, not token.
    end + text[end..extended].trim_end_matches(['.', '-', '/', '+', '~', '%']).len()
}

/// Applies one rule to `text`; records each secret's kind and value.
fn apply(rule: &Rule, global: &Allow, text: &str, found: &mut Vec<(String, String)>) -> Option<String> {
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for caps in rule.regex.captures_iter(text) {
        let (Some(secret), Some(whole)) = (secret_span(rule, &caps), caps.get(0)) else { continue };
        let value = secret.as_str();
        if value.trim().is_empty() || value.contains("[REDACTED:") {
            continue;
        }
        if rule.entropy > 0.0 && entropy(value) <= rule.entropy {
            continue;
        }
        if rule.shape.as_ref().is_some_and(|shape| !shape.is_match(value)) {
            continue;
        }
        let line = line_at(text, secret.start());
        if global.allows(value, whole.as_str(), line) || rule.allow.iter().any(|a| a.allows(value, whole.as_str(), line)) {
            continue;
        }
        // A match that stops inside a run of token characters (a shorter
        // rule matching the start of a longer token, `glrt-…` before its
        // routable form) takes the rest of the run: no tail is left behind.
        let end = token_end(text, secret.start(), secret.end());
        if spans.last().is_some_and(|(_, last_end)| secret.start() < *last_end) {
            continue;
        }
        spans.push((secret.start(), end));
        found.push((rule.name.clone(), text[secret.start()..end].to_owned()));
    }
    if spans.is_empty() {
        return None;
    }
    let marker = format!("[REDACTED:{}]", rule.name);
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, end) in spans {
        out.push_str(&text[last..start]);
        out.push_str(&marker);
        last = end;
    }
    out.push_str(&text[last..]);
    Some(out)
}

/// Replaces every secret in `text`.
pub fn redact(text: &str) -> Redaction {
    let mut current = text.to_owned();
    let mut found: Vec<(String, String)> = Vec::new();
    for rule in &HMG_RULES.rules {
        if let Some(next) = apply(rule, &HMG_RULES.global, &current, &mut found) {
            current = next;
        }
    }
    let lower = current.to_lowercase();
    for rule in &GITLEAKS.rules {
        if !rule.keywords.is_empty() && !rule.keywords.iter().any(|k| lower.contains(k.as_str())) {
            continue;
        }
        if let Some(next) = apply(rule, &GITLEAKS.global, &current, &mut found) {
            current = next;
        }
    }
    let mut kinds: Vec<String> = found.iter().map(|(kind, _)| kind.clone()).collect();
    // The same value elsewhere in the text: longest first, outside markers.
    let mut values: Vec<&(String, String)> = found.iter().filter(|(_, v)| v.chars().count() >= 4).collect();
    values.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    for (kind, value) in values {
        if !current.contains(value.as_str()) {
            continue;
        }
        let marker = format!("[REDACTED:{kind}]");
        let mut out = String::with_capacity(current.len());
        let mut last = 0;
        for m in MARKER.find_iter(&current) {
            let (replaced, n) = replace_counting(&current[last..m.start()], value, &marker);
            out.push_str(&replaced);
            kinds.extend(std::iter::repeat_n(kind.clone(), n));
            out.push_str(m.as_str());
            last = m.end();
        }
        let (replaced, n) = replace_counting(&current[last..], value, &marker);
        out.push_str(&replaced);
        kinds.extend(std::iter::repeat_n(kind.clone(), n));
        current = out;
    }
    Redaction { text: current, kinds }
}

fn replace_counting(text: &str, value: &str, marker: &str) -> (String, usize) {
    let n = text.matches(value).count();
    if n == 0 { (text.to_owned(), 0) } else { (text.replace(value, marker), n) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_loads() {
        let hmg_lines = include_str!("../../lexicon/secrets.tsv").lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).count();
        assert!(HMG_RULES.skipped.is_empty(), "rules of lexicon/secrets.tsv that do not compile: {:?}", HMG_RULES.skipped);
        assert_eq!(HMG_RULES.rules.len(), hmg_lines);
        // gitleaks defines one rule that only matches file names (pkcs12-file).
        assert_eq!(GITLEAKS.skipped, vec!["pkcs12-file (matches file names only)".to_owned()], "gitleaks rules this engine cannot run");
        assert!(GITLEAKS.rules.len() >= 200, "{} gitleaks rules", GITLEAKS.rules.len());
        assert!(!GITLEAKS.global.regexes.is_empty() && !GITLEAKS.global.stopwords.is_empty());
    }

    #[test]
    fn go_classes_become_ascii_classes() {
        assert_eq!(ascii_classes(r"[\w.-]{0,50}?\b\d+\s"), r"[[:word:].-]{0,50}?(?-u:\b)[[:digit:]]+[[:space:]]");
        assert_eq!(ascii_classes(r"[^\W_][[:alpha:]\d]\\w"), r"[^[:^word:]_][[:alpha:][:digit:]]\\w");
        assert_eq!(ascii_classes(r"[]a\s]"), r"[]a[:space:]]");
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
        assert!(!redact("DB_PASS=hunter2Hunter2").has_substance());
        assert!(redact(";)").has_substance(), "text without secrets is never 'nothing left'");
    }

    #[test]
    fn a_match_inside_a_longer_token_takes_the_whole_token() {
        let r = redact("Use glrt-t1_NxIjA1r5gHavMZrPYRJEK1TEkpBf6OGVWamclo0YUVsm0RUUTv89fww2YgYKyIWjJT4vHrMo8mQ4RXyK.3jcibpf3i for CI.");
        assert!(r.text.starts_with("Use [REDACTED:") && r.text.ends_with("] for CI."), "{}", r.text);
        let r = redact("The token is glpat-kFOhF3y48pofqZe1bg1YGj4lMLV9o0z.0x1pivtiw.");
        assert!(!r.text.contains("0x1pivtiw") && r.text.ends_with("]."), "{}", r.text);
    }

    #[test]
    fn the_same_value_elsewhere_is_redacted_too() {
        let r = redact("postgres://app:Rotate-Me-42x@db/app; the admin UI takes Rotate-Me-42x as well");
        assert!(!r.text.contains("Rotate-Me-42x"), "{}", r.text);
        assert_eq!(r.kinds, vec!["connection_string".to_owned(), "connection_string".to_owned()]);
    }

    #[test]
    fn redaction_is_idempotent_and_reports_kinds_not_values() {
        for line in include_str!("../../tests/data/secrets_formats.tsv").lines().filter(|l| !l.starts_with('#')) {
            let mut columns = line.split('\t');
            let (Some(secret), Some(text)) = (columns.next(), columns.next()) else { continue };
            let once = redact(text);
            assert!(once.changed() && !once.text.contains(secret), "{text:?} -> {:?}", once.text);
            assert!(once.kinds.iter().all(|k| !k.contains(secret)));
            let twice = redact(&once.text);
            assert!(!twice.changed(), "a second pass changed {:?} to {:?}", once.text, twice.text);
        }
    }

    #[test]
    fn placeholders_and_identifiers_survive() {
        for text in [
            "export API_KEY=$API_KEY",
            "token: ${GITHUB_TOKEN}",
            "password=<your-password>",
            "The commit 3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a fixed it",
            "request 123e4567-e89b-12d3-a456-426614174000 failed",
            "atom 01JD8X7K2M3N4P5Q6R7S8T9V0W",
            "Basic authentication is off",
            "パスワードは12文字以上",
            "비밀번호를 잊어버렸어요",
            "use sk-…xxxx in examples",
        ] {
            assert_eq!(redact(text).text, text);
        }
    }
}
