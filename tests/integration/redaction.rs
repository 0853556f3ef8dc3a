//! The redaction corpus: every real-format secret is removed before
//! anything is stored, and look-alike non-secrets survive untouched.

use hmg::{Effect, ExportFormat, MemorizeRequest};

use super::{caller, memory};

fn corpus() -> Vec<(String, String)> {
    include_str!("../data/secrets.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (secret, text) = l.split_once('\t').expect("secret<TAB>text");
            (secret.to_owned(), text.replace("\\n", "\n"))
        })
        .collect()
}

#[test]
fn at_least_forty_secrets_are_all_redacted_before_storage() {
    let secrets = corpus();
    assert!(secrets.len() >= 40, "corpus has {}", secrets.len());
    let m = memory();
    let c = caller("hmg");
    let mut failures = Vec::new();
    for (secret, text) in &secrets {
        let redacted = hmg::text::redact(text);
        if redacted.text.contains(secret.as_str()) || !redacted.changed() {
            failures.push(format!("{text:?} -> {:?}", redacted.text));
        }
        let outcome = m.memorize(&c, MemorizeRequest::new(text.as_str())).unwrap();
        assert_ne!(outcome.effect, Effect::NoOp);
    }
    assert!(failures.is_empty(), "not redacted:\n{}", failures.join("\n"));
    let mut exported = Vec::new();
    m.export(&c, ExportFormat::NQuads, true, &mut exported).unwrap();
    let exported = String::from_utf8(exported).unwrap();
    for (secret, _) in &secrets {
        assert!(!exported.contains(secret.as_str()), "{secret} reached the store");
    }
    assert!(exported.contains("[REDACTED:"));
}

#[test]
fn look_alikes_survive() {
    let safe: Vec<&str> = include_str!("../data/not_secrets.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert!(safe.len() >= 20);
    let mut damaged = Vec::new();
    for text in safe {
        let redacted = hmg::text::redact(text);
        if redacted.text != text {
            damaged.push(format!("{text:?} -> {:?}", redacted.text));
        }
    }
    assert!(damaged.is_empty(), "non-secrets were changed:\n{}", damaged.join("\n"));
}
