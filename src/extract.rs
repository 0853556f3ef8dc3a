//! Fact extraction for the mem0-style `add` (SPEC §7): an [`Extractor`]
//! turns chat messages into self-contained fact sentences. [`RuleExtractor`]
//! is the built-in one: deterministic, no model, English, Chinese and
//! Japanese.
//!
//! **Invariant:** extraction never stores anything; it proposes sentences,
//! and the caller's merge decides what each does to memory.

use serde::{Deserialize, Serialize};

/// One chat message (the chat-completions shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Message {
    /// `user`, `assistant` or `system`.
    #[schemars(extend("enum" = ["user", "assistant", "system"]))]
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
    /// The extraction endpoint is configured wrongly (`HMG_EXTRACT_*`).
    #[error("extraction endpoint configuration: {0}")]
    Config(String),
}

impl crate::fault::Classified for ExtractError {
    fn fault(&self) -> crate::fault::Fault {
        match self {
            ExtractError::Invalid(_) => crate::fault::Fault::Invalid,
            ExtractError::Endpoint(_) => crate::fault::Fault::Unavailable,
            ExtractError::Config(_) => crate::fault::Fault::Internal,
        }
    }

    fn field(&self) -> Option<&str> {
        matches!(self, ExtractError::Invalid(_)).then_some("messages")
    }
}

/// Turns messages into fact sentences.
pub trait Extractor: Send + Sync {
    /// A name for logs and warnings.
    fn name(&self) -> &str;
    /// The facts the messages state, in order, without duplicates.
    fn extract(&self, messages: &[Message]) -> Result<Vec<String>, ExtractError>;
}

/// The built-in extractor: the user's messages (or, when there are none,
/// the assistant's — caching an answer) split into clauses; greetings,
/// thanks, apologies, questions and chatter dropped; openers ("btw", "Big
/// news:") stripped; a correction inside a message applied ("Leeds — sorry,
/// I meant Bath" → Bath). Facts stay in the speaker's words, with the cues
/// the merge reads ("Actually, …", "… anymore"); the merge stores them in
/// the third person. See [`crate::fact`].
#[derive(Debug, Default, Clone, Copy)]
pub struct RuleExtractor;

impl Extractor for RuleExtractor {
    fn name(&self) -> &str {
        "built-in"
    }

    fn extract(&self, messages: &[Message]) -> Result<Vec<String>, ExtractError> {
        check_messages(messages)?;
        let has_user = messages.iter().any(|m| m.role == "user");
        let wanted = if has_user { "user" } else { "assistant" };
        let mut facts: Vec<String> = Vec::new();
        for message in messages.iter().filter(|m| m.role == wanted) {
            let found = if wanted == "user" {
                crate::fact::user_facts(&message.content)
            } else {
                crate::fact::sentences(&message.content)
                    .into_iter()
                    .filter(|s| !crate::fact::is_question(s) && !crate::fact::is_chatter(s, true))
                    .map(|s| s.trim().trim_end_matches(['.', '。', '!', '！']).trim().to_owned())
                    .collect()
            };
            for fact in found {
                if fact.chars().filter(|c| c.is_alphanumeric()).count() < 2 {
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

/// Checks messages before any extractor sees them.
fn check_messages(messages: &[Message]) -> Result<(), ExtractError> {
    if messages.is_empty() {
        return Err(ExtractError::Invalid("no messages".to_owned()));
    }
    for m in messages {
        if !matches!(m.role.as_str(), "user" | "assistant" | "system") {
            return Err(ExtractError::Invalid(format!("unknown role '{}': expected user, assistant or system", m.role)));
        }
    }
    Ok(())
}

/// Settings of an OpenAI-compatible chat-completions endpoint, from the
/// environment: `HMG_EXTRACT_BASE_URL` (e.g. `http://127.0.0.1:11434/v1`),
/// `HMG_EXTRACT_MODEL`, `HMG_EXTRACT_API_KEY` (optional), and
/// `HMG_EXTRACT_TIMEOUT_SECS` (default 20).
#[derive(Clone)]
pub struct EndpointConfig {
    /// Base URL; `/chat/completions` is appended.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// Bearer key, if the endpoint needs one.
    pub api_key: Option<String>,
    /// Whole-request timeout.
    pub timeout: std::time::Duration,
}

impl std::fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[set]"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl EndpointConfig {
    /// The endpoint configured in the environment, if any. A base URL
    /// without a model (or a bad timeout) is an error, not silence.
    pub fn from_env() -> Result<Option<EndpointConfig>, ExtractError> {
        let var = |name: &str| std::env::var(name).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let Some(base_url) = var("HMG_EXTRACT_BASE_URL") else { return Ok(None) };
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(ExtractError::Config(format!("HMG_EXTRACT_BASE_URL '{base_url}' must start with http:// or https://")));
        }
        let model = var("HMG_EXTRACT_MODEL")
            .ok_or_else(|| ExtractError::Config("HMG_EXTRACT_BASE_URL is set but HMG_EXTRACT_MODEL is not".to_owned()))?;
        let timeout = match var("HMG_EXTRACT_TIMEOUT_SECS") {
            None => 20.0,
            Some(text) => text
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .ok_or_else(|| ExtractError::Config(format!("HMG_EXTRACT_TIMEOUT_SECS '{text}' is not a positive number")))?,
        };
        Ok(Some(EndpointConfig {
            base_url,
            model,
            api_key: var("HMG_EXTRACT_API_KEY"),
            timeout: std::time::Duration::from_secs_f64(timeout),
        }))
    }
}

const EXTRACT_PROMPT: &str = "You extract durable facts about the user from a conversation, for a long-term memory.\n\
Return only JSON: {\"facts\": [\"...\"]}. Each fact is one short self-contained sentence in the language of the conversation, \
written about the user without a subject pronoun (\"Prefers concise Python examples\", \"喜欢喝咖啡\", \"コーヒーが好き\"). \
Skip greetings, small talk and questions. If the user says something is no longer true, state it negatively (\"No longer drinks coffee\"). \
If there is no user message, keep the assistant's answer as one fact. Return {\"facts\": []} when there is nothing to keep.";

/// An OpenAI-compatible chat-completions extractor.
#[derive(Debug)]
pub struct OpenAiExtractor {
    config: EndpointConfig,
    agent: ureq::Agent,
}

impl OpenAiExtractor {
    /// An extractor for `config`.
    pub fn new(config: EndpointConfig) -> OpenAiExtractor {
        let agent = ureq::Agent::config_builder().timeout_global(Some(config.timeout)).http_status_as_error(false).build().new_agent();
        OpenAiExtractor { config, agent }
    }
}

/// The facts in a model's answer: `{"facts": [...]}`, a bare array, or
/// either inside a fenced block or surrounding prose.
fn facts_from_answer(answer: &str) -> Option<Vec<String>> {
    let start = answer.find(['{', '['])?;
    let end = answer.rfind(['}', ']'])?;
    let value: serde_json::Value = serde_json::from_str(answer.get(start..=end)?).ok()?;
    let list = match &value {
        serde_json::Value::Array(items) => items,
        serde_json::Value::Object(map) => map.get("facts")?.as_array()?,
        _ => return None,
    };
    Some(list.iter().filter_map(|f| f.as_str()).map(|f| f.trim().to_owned()).filter(|f| !f.is_empty()).collect())
}

impl Extractor for OpenAiExtractor {
    fn name(&self) -> &str {
        "openai-compatible"
    }

    fn extract(&self, messages: &[Message]) -> Result<Vec<String>, ExtractError> {
        check_messages(messages)?;
        let conversation: Vec<String> = messages.iter().map(|m| format!("{}: {}", m.role, m.content)).collect();
        let body = serde_json::json!({
            "model": self.config.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": EXTRACT_PROMPT},
                {"role": "user", "content": conversation.join("\n")},
            ],
        });
        let url = format!("{}/chat/completions", self.config.base_url.trim_end_matches('/'));
        let mut request = self.agent.post(&url).header("Content-Type", "application/json");
        if let Some(key) = &self.config.api_key {
            request = request.header("Authorization", &format!("Bearer {key}"));
        }
        let span = tracing::info_span!("extract_endpoint", url = %url, model = %self.config.model);
        let _entered = span.enter();
        let mut response = request.send(body.to_string().as_bytes()).map_err(|e| ExtractError::Endpoint(format!("{url}: {e}")))?;
        let status = response.status();
        let text = response
            .body_mut()
            .with_config()
            .limit(4 * 1024 * 1024)
            .read_to_string()
            .map_err(|e| ExtractError::Endpoint(format!("{url}: reading the answer: {e}")))?;
        if !status.is_success() {
            let excerpt: String = text.chars().take(300).collect();
            return Err(ExtractError::Endpoint(format!("{url} answered {status}: {excerpt}")));
        }
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ExtractError::Endpoint(format!("{url}: the answer is not JSON: {e}")))?;
        let content = value
            .pointer("/choices/0/message/content")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| ExtractError::Endpoint(format!("{url}: no choices[0].message.content in the answer")))?;
        let facts = facts_from_answer(content).ok_or_else(|| {
            ExtractError::Endpoint(format!(
                "the model did not answer with a list of facts: {}",
                content.chars().take(200).collect::<String>()
            ))
        })?;
        let mut unique: Vec<String> = Vec::new();
        for fact in facts {
            if !unique.iter().any(|f| f.eq_ignore_ascii_case(&fact)) {
                unique.push(fact);
            }
        }
        Ok(unique)
    }
}

/// What an extraction produced, and any warning to pass on.
#[derive(Debug, Clone, PartialEq)]
pub struct Extraction {
    /// The facts.
    pub facts: Vec<String>,
    /// Set when the configured endpoint failed and the built-in extractor
    /// answered instead.
    pub warning: Option<String>,
}

/// The configured endpoint when there is one, else the built-in extractor;
/// an endpoint failure falls back to the built-in result with a warning, so
/// an add is never lost to a model outage.
pub fn extract_with_fallback(endpoint: Option<&dyn Extractor>, messages: &[Message]) -> Result<Extraction, ExtractError> {
    check_messages(messages)?;
    let Some(endpoint) = endpoint else {
        return Ok(Extraction { facts: RuleExtractor.extract(messages)?, warning: None });
    };
    match endpoint.extract(messages) {
        Ok(facts) => Ok(Extraction { facts, warning: None }),
        Err(ExtractError::Invalid(message)) => Err(ExtractError::Invalid(message)),
        Err(error) => {
            tracing::warn!(%error, extractor = endpoint.name(), "extraction endpoint failed; using the built-in extractor");
            Ok(Extraction {
                facts: RuleExtractor.extract(messages)?,
                warning: Some(format!("{error}; the built-in extractor was used instead")),
            })
        }
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
        assert_eq!(facts, ["I prefer concise Python examples"]);
    }

    #[test]
    fn statements_become_facts_in_the_speakers_words_in_three_languages() {
        let cases = [
            (
                "Hi! I'm a backend engineer. I use Neovim every day. Can you help me?",
                vec!["I'm a backend engineer", "I use Neovim every day"],
            ),
            ("My favorite database is PostgreSQL. I don't like ORMs.", vec!["My favorite database is PostgreSQL", "I don't like ORMs"]),
            ("I no longer prefer tabs. I always write tests first.", vec!["I no longer prefer tabs", "I always write tests first"]),
            ("你好！我喜欢简洁的Python示例。我的编辑器是VS Code。", vec!["我喜欢简洁的Python示例", "我的编辑器是VS Code"]),
            ("我们用PostgreSQL 16。谢谢", vec!["我们用PostgreSQL 16"]),
            (
                "こんにちは。私は簡潔なPythonの例が好きです。私の名前はバートです。",
                vec!["私は簡潔なPythonの例が好きです", "私の名前はバートです"],
            ),
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
