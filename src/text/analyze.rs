//! The one analyzer for keyword search in every language: Latin-script
//! words NFKC-folded, lowercased, stop-listed and stemmed (English Snowball);
//! Chinese, Japanese and Korean runs as overlapping character bigrams, plus
//! unigrams in the index so one-character queries match.

use std::collections::HashSet;
use std::sync::LazyLock;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::UnicodeNormalization;

use super::is_cjk;

/// Whether terms are produced for the index or for a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Bigrams and unigrams of CJK runs.
    Index,
    /// Bigrams of CJK runs; a one-character run becomes its unigram.
    Query,
}

static STOPWORDS: LazyLock<HashSet<&'static str>> = LazyLock::new(|| {
    include_str!("../../lexicon/stopwords_en.txt").lines().filter(|l| !l.starts_with('#')).flat_map(str::split_whitespace).collect()
});

thread_local! {
    static STEMMER: Stemmer = Stemmer::create(Algorithm::English);
}

/// One term with the byte range of the (normalized) text it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The term.
    pub text: String,
    /// Byte offset where it starts.
    pub from: usize,
    /// Byte offset where it ends.
    pub to: usize,
}

/// The terms of `text`.
pub fn analyze(text: &str, mode: Mode) -> Vec<Term> {
    let normalized: String = text.nfkc().collect::<String>().to_lowercase();
    let mut terms = Vec::new();
    let mut run_start = None;
    let mut run_kind_cjk = false;
    let chars: Vec<(usize, char)> = normalized.char_indices().collect();
    let flush = |start: usize, end: usize, cjk: bool, terms: &mut Vec<Term>| {
        let run = &normalized[start..end];
        if cjk {
            cjk_terms(run, start, mode, terms);
        } else {
            latin_term(run, start, end, terms);
        }
    };
    for &(offset, c) in &chars {
        let word_char = c.is_alphanumeric();
        let cjk = is_cjk(c);
        if let Some(start) = run_start {
            if word_char && cjk == run_kind_cjk {
                continue;
            }
            flush(start, offset, run_kind_cjk, &mut terms);
            run_start = None;
        }
        if word_char {
            run_start = Some(offset);
            run_kind_cjk = cjk;
        }
    }
    if let Some(start) = run_start {
        flush(start, normalized.len(), run_kind_cjk, &mut terms);
    }
    terms
}

/// Just the term texts.
pub fn terms(text: &str, mode: Mode) -> Vec<String> {
    analyze(text, mode).into_iter().map(|t| t.text).collect()
}

fn latin_term(word: &str, from: usize, to: usize, terms: &mut Vec<Term>) {
    if STOPWORDS.contains(word) {
        return;
    }
    let text = if word.chars().all(|c| c.is_ascii_alphabetic()) && word.len() > 2 {
        STEMMER.with(|stemmer| stemmer.stem(word).into_owned())
    } else {
        word.to_owned()
    };
    terms.push(Term { text, from, to });
}

fn cjk_terms(run: &str, start: usize, mode: Mode, terms: &mut Vec<Term>) {
    let chars: Vec<(usize, char)> = run.char_indices().collect();
    let end_of = |i: usize| chars.get(i + 1).map(|(o, _)| *o).unwrap_or(run.len());
    if chars.len() == 1 || mode == Mode::Index {
        for (i, &(offset, c)) in chars.iter().enumerate() {
            terms.push(Term { text: c.to_string(), from: start + offset, to: start + end_of(i) });
        }
    }
    for i in 0..chars.len().saturating_sub(1) {
        let (offset, first) = chars[i];
        let second = chars[i + 1].1;
        terms.push(Term { text: format!("{first}{second}"), from: start + offset, to: start + end_of(i + 1) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_is_lowercased_stemmed_and_stoplisted() {
        assert_eq!(terms("The Caroline went HIKING with friends", Mode::Query), ["carolin", "went", "hike", "friend"]);
        assert_eq!(terms("Ｐｏｓｔｇｒｅｓ 16", Mode::Query), ["postgr", "16"]);
    }

    #[test]
    fn chinese_becomes_bigrams_with_unigrams_in_the_index() {
        assert_eq!(terms("数据库", Mode::Query), ["数据", "据库"]);
        assert_eq!(terms("数据库", Mode::Index), ["数", "据", "库", "数据", "据库"]);
        assert_eq!(terms("用 Redis 缓存", Mode::Query), ["用", "redi", "缓存"]);
    }

    #[test]
    fn japanese_katakana_and_mixed_scripts() {
        assert_eq!(terms("キャッシュサーバー", Mode::Query).len(), 8);
        assert!(terms("データベースを設定", Mode::Query).contains(&"ベー".to_owned()));
        assert_eq!(terms("東京", Mode::Query), ["東京"]);
        assert_eq!(terms("東", Mode::Query), ["東"]);
    }

    #[test]
    fn offsets_point_into_the_normalized_text() {
        let text = "abc 数据";
        for term in analyze(text, Mode::Index) {
            assert!(term.from < term.to && term.to <= text.len());
        }
    }
}
