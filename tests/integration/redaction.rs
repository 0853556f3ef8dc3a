//! The redaction corpus: every real-format secret is removed before
//! anything is stored, and look-alike non-secrets survive untouched.

use hmg::{Effect, ExportFormat, MemorizeRequest};

use super::{caller, memory};

/// Every secret of the corpora: `secrets.tsv` (the first 50, realistic
/// sentences) and `secrets_formats.tsv` (one line per format: about 190
/// gitleaks provider formats and 40 conversation formats gitleaks does not
/// target), as (secret, text).
pub(crate) fn corpus() -> Vec<(String, String)> {
    [include_str!("../data/secrets.tsv"), include_str!("../data/secrets_formats.tsv")]
        .into_iter()
        .flat_map(str::lines)
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut columns = l.split('\t');
            let secret = columns.next().expect("secret<TAB>text");
            let text = columns.next().expect("secret<TAB>text");
            (secret.to_owned(), text.replace("\\n", "\n"))
        })
        .collect()
}

#[test]
fn the_formats_corpus_covers_at_least_150_formats() {
    let formats: std::collections::BTreeSet<&str> =
        include_str!("../data/secrets_formats.tsv").lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split('\t').nth(2)).collect();
    assert!(formats.len() >= 150, "{} formats", formats.len());
}

#[test]
fn every_secret_of_the_corpora_is_redacted_before_storage() {
    let secrets = corpus();
    assert!(secrets.len() >= 200, "corpus has {}", secrets.len());
    let m = memory();
    let c = caller("hmg");
    let mut failures = Vec::new();
    let mut applied = 0;
    for (secret, text) in &secrets {
        let redacted = hmg::text::redact(text);
        if redacted.text.contains(secret.as_str()) || !redacted.changed() {
            failures.push(format!("{text:?} -> {:?}", redacted.text));
        }
        // Two secrets of one kind in one template redact to the same text: a no_op then.
        let outcome = m.memorize(&c, MemorizeRequest::new(text.as_str())).unwrap();
        if outcome.effect == Effect::Applied {
            applied += 1;
        }
    }
    assert!(failures.is_empty(), "not redacted:\n{}", failures.join("\n"));
    assert!(applied >= 150, "{applied} of {} were stored", secrets.len());
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
    let safe: Vec<&str> = include_str!("../data/not_secrets.txt").lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    assert!(safe.len() >= 50, "{} look-alikes", safe.len());
    let mut damaged = Vec::new();
    for text in safe {
        let redacted = hmg::text::redact(text);
        if redacted.text != text {
            damaged.push(format!("{text:?} -> {:?}", redacted.text));
        }
    }
    assert!(damaged.is_empty(), "non-secrets were changed:\n{}", damaged.join("\n"));
}
