//! Text understanding shared by every write: normalization for dedup,
//! language detection, epistemic/polarity inference from cue lexicons,
//! entity extraction and secret redaction. English, Chinese and Japanese.
//!
//! **Architecture invariant:** the wording data lives in `lexicon/` and is
//! compiled in with `include_str!`; this module holds only the matching logic.

pub mod analyze;
mod entity;
mod lexicon;
mod redact;

pub use entity::{Entity, EntityKind, extract_entities};
pub use lexicon::{Emotion, infer_emotion, infer_epistemic, infer_polarity};
pub use redact::{Redaction, redact};

use unicode_normalization::UnicodeNormalization;

/// Normal form used for exact dedup and content hashes: NFKC, lowercase,
/// whitespace collapsed, trailing sentence punctuation removed.
pub fn normalize(content: &str) -> String {
    let folded: String = content.nfkc().collect::<String>().to_lowercase();
    let collapsed = folded.split_whitespace().collect::<Vec<_>>().join(" ");
    collapsed.trim_end_matches(['.', '。', '!', '！', '?', '？', '…', ' ']).to_owned()
}

/// Hex sha256 of the normalized content.
pub fn content_hash(content: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(normalize(content).as_bytes()))
}

/// Whether `c` is a Han ideograph (CJK unified, extensions, compatibility).
pub fn is_han(c: char) -> bool {
    matches!(c as u32,
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F | 0x3005 | 0x3007)
}

/// Whether `c` is hiragana or katakana (including the prolonged sound mark).
pub fn is_kana(c: char) -> bool {
    is_hiragana(c) || is_katakana(c)
}

/// Whether `c` is hiragana (Japanese particles and endings are written in it).
pub fn is_hiragana(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x309F)
}

/// Whether `c` is katakana.
pub fn is_katakana(c: char) -> bool {
    matches!(c as u32, 0x30A0..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9F)
}

/// Whether `c` is Hangul.
pub fn is_hangul(c: char) -> bool {
    matches!(c as u32, 0xAC00..=0xD7AF | 0x1100..=0x11FF | 0x3130..=0x318F)
}

/// Whether `c` belongs to a script written without spaces between words.
pub fn is_cjk(c: char) -> bool {
    is_han(c) || is_kana(c) || is_hangul(c)
}

/// Detects the language of `text` from its scripts: any kana → `ja`, Han
/// without kana → `zh`, Hangul → `ko`, Latin letters → `en`, else `und`.
/// Mixed text ("本项目用 PostgreSQL 16") goes to the CJK language, which is
/// the language it was written in.
pub fn detect_language(text: &str) -> &'static str {
    let (mut han, mut kana, mut hangul, mut latin) = (0usize, 0usize, 0usize, 0usize);
    for c in text.chars() {
        if is_kana(c) {
            kana += 1;
        } else if is_han(c) {
            han += 1;
        } else if is_hangul(c) {
            hangul += 1;
        } else if c.is_ascii_alphabetic() || ('\u{00C0}'..='\u{024F}').contains(&c) {
            latin += 1;
        }
    }
    if kana > 0 {
        "ja"
    } else if han > 0 {
        "zh"
    } else if hangul > 0 {
        "ko"
    } else if latin > 0 {
        "en"
    } else {
        "und"
    }
}

/// Decodes `%XX` escapes (and `+` as a space when `plus_is_space`, as in
/// forms); a `%` not followed by two hex digits stays as it is.
pub(crate) fn percent_decode(part: &[u8], plus_is_space: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(part.len());
    let mut i = 0;
    while i < part.len() {
        let escaped = (part[i] == b'%' && i + 3 <= part.len())
            .then(|| std::str::from_utf8(&part[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()))
            .flatten();
        match (part[i], escaped) {
            (_, Some(byte)) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (b'+', None) if plus_is_space => out.push(b' '),
            (byte, None) => out.push(byte),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_folds_width_case_and_space() {
        assert_eq!(normalize("  Use  ＰｏｓｔｇｒｅＳＱＬ 16. "), "use postgresql 16");
        assert_eq!(normalize("主数据库用 PostgreSQL。"), "主数据库用 postgresql");
        assert_eq!(content_hash("A b"), content_hash("a   B."));
    }

    #[test]
    fn languages_are_detected_by_script() {
        assert_eq!(detect_language("We use PostgreSQL 16"), "en");
        assert_eq!(detect_language("本项目用 PostgreSQL 16 做主数据库"), "zh");
        assert_eq!(detect_language("主データベースは PostgreSQL 16 です"), "ja");
        assert_eq!(detect_language("데이터베이스"), "ko");
        assert_eq!(detect_language("12345 !!"), "und");
    }
}
