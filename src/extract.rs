//! Fact extraction for the mem0-style `add` (SPEC §7): an [`Extractor`]
//! turns chat messages into self-contained fact sentences. [`RuleExtractor`]
//! is the built-in one: deterministic, no model, English, Chinese and
//! Japanese.
//!
//! **Invariant:** extraction never stores anything; it proposes sentences,
//! and the caller's merge decides what each does to memory.

use std::collections::HashSet;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

/// One chat message (the chat-completions shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// Why extraction failed.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// The messages cannot be used.
    #[error("invalid messages: {0}")]
    Invalid(String),
    /// A model endpoint failed.
    #[error("extraction endpoint failed: {0}")]
    Endpoint(String),
}

/// Turns messages into fact sentences.
pub trait Extractor: Send + Sync {
    /// A name for logs and warnings.
    fn name(&self) -> &str;
    /// The facts the messages state, in order, without duplicates.
    fn extract(&self, messages: &[Message]) -> Result<Vec<String>, ExtractError>;
}

static FILLER: LazyLock<HashSet<String>> = LazyLock::new(|| {
    include_str!("../lexicon/filler.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_lowercase)
        .collect()
});

/// The built-in extractor: the user's messages (or, when there are none,
/// the assistant's — caching an answer) split into sentences; greetings,
/// acknowledgements and questions dropped; first-person statements turned
/// into facts ("I prefer X" → "Prefers X", "我喜欢X" → "喜欢X",
/// "私はXが好きです" → "Xが好き").
#[derive(Debug, Default, Clone, Copy)]
pub struct RuleExtractor;

impl Extractor for RuleExtractor {
    fn name(&self) -> &str {
        "built-in"
    }

    fn extract(&self, messages: &[Message]) -> Result<Vec<String>, ExtractError> {
        if messages.is_empty() {
            return Err(ExtractError::Invalid("no messages".to_owned()));
        }
        for m in messages {
            if !matches!(m.role.as_str(), "user" | "assistant" | "system") {
                return Err(ExtractError::Invalid(format!("unknown role '{}': expected user, assistant or system", m.role)));
            }
        }
        let has_user = messages.iter().any(|m| m.role == "user");
        let wanted = if has_user { "user" } else { "assistant" };
        let mut facts: Vec<String> = Vec::new();
        for message in messages.iter().filter(|m| m.role == wanted) {
            for sentence in sentences(&message.content) {
                if is_filler(&sentence) || is_question(&sentence) {
                    continue;
                }
                let fact = if wanted == "user" { third_person(&sentence) } else { sentence.clone() };
                let fact = fact.trim().trim_end_matches(['.', '。', '!', '！']).trim().to_owned();
                if fact.chars().filter(|c| c.is_alphanumeric()).count() < 3 {
                    continue;
                }
                if !facts.iter().any(|f| f.eq_ignore_ascii_case(&fact)) {
                    facts.push(fact);
                }
            }
        }
        Ok(facts)
    }
}

/// Sentences of a message: split after `.` `!` `?` (followed by a space or
/// the end), `。` `！` `？` and line breaks.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        current.push(*c);
        let latin_end = matches!(c, '.' | '!' | '?') && chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        if latin_end || matches!(c, '。' | '！' | '？' | '\n') {
            let s = current.trim().to_owned();
            if !s.is_empty() {
                out.push(s);
            }
            current.clear();
        }
    }
    let s = current.trim().to_owned();
    if !s.is_empty() {
        out.push(s);
    }
    out
}

fn is_filler(sentence: &str) -> bool {
    let bare = sentence.trim().trim_end_matches(|c: char| c.is_ascii_punctuation() || "。！？、～~".contains(c)).trim().to_lowercase();
    bare.is_empty() || FILLER.contains(&bare)
}

fn is_question(sentence: &str) -> bool {
    let s = sentence.trim_end();
    s.ends_with('?') || s.ends_with('？') || s.ends_with("ですか") || s.ends_with("ますか") || s.ends_with('吗') || s.ends_with("吗。")
}

/// English third person singular of a verb.
fn third_person_verb(verb: &str) -> String {
    let lower = verb.to_lowercase();
    match lower.as_str() {
        "am" | "'m" => return "is".to_owned(),
        "have" | "'ve" => return "has".to_owned(),
        "do" => return "does".to_owned(),
        "go" => return "goes".to_owned(),
        "can" | "will" | "would" | "should" | "could" | "must" | "may" | "might" | "was" | "did" | "had" => return lower,
        _ => {}
    }
    let bytes = lower.as_bytes();
    if lower.ends_with('y') && bytes.len() > 1 && !b"aeiou".contains(&bytes[bytes.len() - 2]) {
        format!("{}ies", &lower[..lower.len() - 1])
    } else if ["s", "sh", "ch", "x", "z", "o"].iter().any(|e| lower.ends_with(e)) {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Turns a first-person statement into a fact about the user.
pub(crate) fn third_person(sentence: &str) -> String {
    let s = sentence.trim();
    // Chinese: 我的X是Y → X是Y; 我X → X (not 我们, "we").
    if let Some(rest) = s.strip_prefix("我的") {
        return rest.to_owned();
    }
    if let Some(rest) = s.strip_prefix('我')
        && !rest.starts_with('们')
    {
        return rest.to_owned();
    }
    // Japanese: 私は/僕は/俺は… and 私の…; the polite copula goes.
    for prefix in ["私は", "わたしは", "僕は", "ぼくは", "俺は", "私の", "僕の"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            let rest = rest.trim_end_matches('。');
            let rest = rest.strip_suffix("です").unwrap_or(rest);
            return rest.to_owned();
        }
    }
    // English.
    let words: Vec<&str> = s.split_whitespace().collect();
    let Some(first) = words.first() else { return s.to_owned() };
    let rest = |from: usize| words[from.min(words.len())..].join(" ");
    match first.to_lowercase().as_str() {
        "my" if words.len() > 1 => capitalize(&rest(1)),
        "i'm" | "im" => format!("Is {}", rest(1)).trim().to_owned(),
        "i've" => format!("Has {}", rest(1)).trim().to_owned(),
        "i" if words.len() > 1 => {
            let second = words[1].to_lowercase();
            match second.as_str() {
                "don't" | "do" if words.get(2).is_some_and(|w| w.eq_ignore_ascii_case("not")) || second == "don't" => {
                    let from = if second == "don't" { 2 } else { 3 };
                    format!("Does not {}", rest(from))
                }
                "can't" | "cannot" => format!("Cannot {}", rest(2)),
                "no" if words.get(2).is_some_and(|w| w.eq_ignore_ascii_case("longer")) => {
                    let verb = words.get(3).map(|v| third_person_verb(v)).unwrap_or_default();
                    format!("No longer {verb} {}", rest(4)).trim().to_owned()
                }
                "always" | "usually" | "often" | "never" | "really" | "also" | "still" | "now" | "mostly" => {
                    let verb = words.get(2).map(|v| third_person_verb(v)).unwrap_or_default();
                    format!("{} {verb} {}", capitalize(&second), rest(3)).trim().to_owned()
                }
                _ => format!("{} {}", capitalize(&third_person_verb(words[1])), rest(2)).trim().to_owned(),
            }
        }
        _ => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Message {
        Message { role: "user".to_owned(), content: text.to_owned() }
    }

    fn assistant(text: &str) -> Message {
        Message { role: "assistant".to_owned(), content: text.to_owned() }
    }

    #[test]
    fn the_seed_example_becomes_one_fact() {
        let facts = RuleExtractor.extract(&[user("I prefer concise Python examples."), assistant("Noted.")]).unwrap();
        assert_eq!(facts, ["Prefers concise Python examples"]);
    }

    #[test]
    fn first_person_statements_become_facts_in_three_languages() {
        let cases = [
            ("Hi! I'm a backend engineer. I use Neovim every day. Can you help me?", vec!["Is a backend engineer", "Uses Neovim every day"]),
            ("My favorite database is PostgreSQL. I don't like ORMs.", vec!["Favorite database is PostgreSQL", "Does not like ORMs"]),
            ("I no longer prefer tabs. I always write tests first.", vec!["No longer prefers tabs", "Always writes tests first"]),
            ("你好！我喜欢简洁的Python示例。我的编辑器是VS Code。", vec!["喜欢简洁的Python示例", "编辑器是VS Code"]),
            ("我们用PostgreSQL 16。谢谢", vec!["我们用PostgreSQL 16"]),
            ("こんにちは。私は簡潔なPythonの例が好きです。私の名前はバートです。", vec!["簡潔なPythonの例が好き", "名前はバート"]),
        ];
        for (text, expected) in cases {
            assert_eq!(RuleExtractor.extract(&[user(text)]).unwrap(), expected, "{text}");
        }
    }

    #[test]
    fn an_assistant_message_alone_is_cached_as_it_is() {
        let facts = RuleExtractor.extract(&[assistant("The staging database runs on port 5433.")]).unwrap();
        assert_eq!(facts, ["The staging database runs on port 5433"]);
    }

    #[test]
    fn greetings_questions_and_bad_roles() {
        assert!(RuleExtractor.extract(&[user("Thanks! OK. 好的。ありがとうございます。What time is it?")]).unwrap().is_empty());
        assert!(RuleExtractor.extract(&[]).is_err());
        assert!(RuleExtractor.extract(&[Message { role: "robot".to_owned(), content: "x".to_owned() }]).is_err());
    }
}
