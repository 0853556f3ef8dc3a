//! What a chat clause says, for the REST `add` (SPEC §7): messages split
//! into clauses, chatter told from facts, and each fact read for what it
//! does to memory — the slot it fills ([`slot`]), and its cues: a
//! correction ("actually", 其实, 実は), a restatement ("like I
//! mentioned"), an addition ("too", 也, も), a cessation ("not anymore",
//! 不再, もう…ない), a switch ("from Vim to Helix", 换成, 乗り換え) or a
//! substitution ("GitLab, not GitHub").
//!
//! The wording lives in `lexicon/chat.txt` (cues), `lexicon/slots.tsv`
//! (slot patterns) and `lexicon/slot_values.tsv` (pets, diets, tool
//! categories, attribute synonyms).
//!
//! **Invariant:** reading a clause never stores anything and never fails:
//! text the patterns do not know is a fact with no slot, never an error.

pub(crate) mod slot;

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

pub(crate) use slot::{Slot, Subject};

/// The script family a clause is read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lang {
    En = 0,
    Zh = 1,
    Ja = 2,
}

pub(crate) fn lang_of(text: &str) -> Lang {
    match crate::text::detect_language(text) {
        "ja" => Lang::Ja,
        "zh" => Lang::Zh,
        _ => Lang::En,
    }
}

impl Lang {
    fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
            Lang::Ja => "ja",
        }
    }
}

/// `lexicon/chat.txt`, by `(kind, lang)`; phrases longest first.
struct Chat {
    phrases: HashMap<(String, String), Vec<String>>,
    patterns: HashMap<(String, String), Vec<Regex>>,
}

/// Sections whose lines are regular expressions.
const PATTERN_KINDS: &[&str] = &["cessation", "switch", "substitute"];

static CHAT: LazyLock<Chat> = LazyLock::new(|| {
    let mut chat = Chat { phrases: HashMap::new(), patterns: HashMap::new() };
    let mut section = (String::new(), String::new());
    for line in include_str!("../../lexicon/chat.txt").lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(name) = trimmed.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let mut parts = name.split_whitespace();
            section = (parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("").to_owned());
            continue;
        }
        if PATTERN_KINDS.contains(&section.0.as_str()) {
            match Regex::new(&format!("(?i){trimmed}")) {
                Ok(regex) => chat.patterns.entry(section.clone()).or_default().push(regex),
                Err(error) => tracing::error!(%error, pattern = trimmed, "lexicon/chat.txt: a pattern does not compile; skipped"),
            }
        } else {
            chat.phrases.entry(section.clone()).or_default().push(trimmed.to_lowercase());
        }
    }
    for list in chat.phrases.values_mut() {
        list.sort_by_key(|p| std::cmp::Reverse(p.chars().count()));
    }
    chat
});

fn phrases(kind: &str, lang: Lang) -> &'static [String] {
    CHAT.phrases.get(&(kind.to_owned(), lang.code().to_owned())).map_or(&[], Vec::as_slice)
}

fn patterns(kind: &str, lang: Lang) -> &'static [Regex] {
    CHAT.patterns.get(&(kind.to_owned(), lang.code().to_owned())).map_or(&[], Vec::as_slice)
}

/// Punctuation that may follow an opener ("Big news:", "Actually,", 实は、).
fn is_separator(c: char) -> bool {
    // Control characters too: a NUL after "Please remember that" began
    // the stored fact.
    matches!(c, ',' | ':' | ';' | '!' | '-' | '—' | '–' | '，' | '：' | '、' | '！' | '…' | '~' | '～')
        || c.is_whitespace()
        || c.is_control()
}

/// `text` without the leading `phrase` (case-insensitive; English on a word
/// boundary), or `None`.
fn strip_phrase<'t>(text: &'t str, phrase: &str, lang: Lang) -> Option<&'t str> {
    let head = text.get(..phrase.len())?;
    if !head.eq_ignore_ascii_case(phrase) && head.to_lowercase() != phrase {
        return None;
    }
    let rest = &text[phrase.len()..];
    if lang == Lang::En && rest.chars().next().is_some_and(|c| c.is_alphanumeric() || c == '\'') {
        return None;
    }
    Some(rest.trim_start_matches(is_separator))
}

/// Whether `text` contains the English `phrase` as whole words, or the CJK
/// one as a substring.
fn contains_phrase(text: &str, phrase: &str, lang: Lang) -> bool {
    let lower = text.to_lowercase();
    if lang != Lang::En {
        return lower.contains(phrase);
    }
    let mut from = 0;
    while let Some(found) = lower[from..].find(phrase) {
        let start = from + found;
        let end = start + phrase.len();
        let before = lower[..start].chars().next_back();
        let after = lower[end..].chars().next();
        if !before.is_some_and(|c| c.is_alphanumeric() || c == '\'') && !after.is_some_and(|c| c.is_alphanumeric() || c == '\'') {
            return true;
        }
        from = start + phrase.len().max(1);
    }
    false
}

/// What a clause's wording says about the memory it touches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Cues {
    /// Corrects something said before.
    pub(crate) correction: bool,
    /// Repeats something said before.
    pub(crate) restatement: bool,
    /// Adds to what is known ("too").
    pub(crate) additive: bool,
    /// Says a fact stopped being true ("not anymore").
    pub(crate) cessation: bool,
}

/// "from A to B" (`from` may be unknown: "switched to B").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Switch {
    pub(crate) from: Option<String>,
    pub(crate) to: String,
}

/// One clause, read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Clause {
    /// The clause without its openers and cue words at the start.
    pub(crate) body: String,
    pub(crate) lang: Lang,
    pub(crate) cues: Cues,
    pub(crate) slot: Option<Slot>,
    pub(crate) switch: Option<Switch>,
    /// A correction naming the wrong value: (wrong, right).
    pub(crate) substitution: Option<(String, String)>,
}

/// Strips openers (and correction/restatement cues, noted in `cues`) from
/// the start of a clause.
fn strip_openers(text: &str, lang: Lang, cues: &mut Cues, keep_cues: bool) -> String {
    let mut rest = text.trim().trim_start_matches(is_separator).to_owned();
    'again: loop {
        // An ask to remember first: "remember that" is no restatement's
        // "remember" followed by a "that" to keep.
        for (kind, flag) in [("memo", 2), ("correct", 0), ("restate", 1), ("prefix", 2)] {
            for phrase in phrases(kind, lang) {
                if let Some(after) = strip_phrase(&rest, phrase, lang) {
                    if after.is_empty() {
                        continue;
                    }
                    match flag {
                        0 => cues.correction = true,
                        1 => cues.restatement = true,
                        _ => {}
                    }
                    if keep_cues && flag < 2 {
                        return rest;
                    }
                    rest = after.to_owned();
                    continue 'again;
                }
            }
        }
        return rest;
    }
}

/// The kinds of `lexicon/chat.txt` that open a clause.
const OPENER_KINDS: [&str; 4] = ["memo", "correct", "restate", "prefix"];

/// Whether `text` is nothing but openers ("Like I mentioned", "実は").
fn opener_only(text: &str, lang: Lang) -> bool {
    let whole = text.trim_matches(is_separator).to_lowercase();
    if OPENER_KINDS.iter().any(|kind| phrases(kind, lang).contains(&whole)) {
        return true;
    }
    let mut cues = Cues::default();
    let rest = strip_openers(text, lang, &mut cues, false);
    let rest = rest.trim_matches(is_separator).to_lowercase();
    !rest.is_empty() && OPENER_KINDS.iter().any(|kind| phrases(kind, lang).contains(&rest))
}

/// Trailing words that only colour a clause ("though", "too", 了).
fn strip_trailers(text: &str, lang: Lang) -> String {
    // A question reaches here only as an ask to remember ("Can you
    // remember that …?", [`is_question`]): its mark goes too.
    let mut s = text.trim().trim_end_matches(['.', '。', '!', '！', '~', '～', '…', '?', '？']).trim().to_owned();
    if lang == Lang::Ja {
        // An ask to remember at the end, and the particle quoting what it
        // asks: 誕生日は5月3日だと覚えておいてください → 誕生日は5月3日.
        if let Some(memo) = phrases("memo", lang).iter().find(|m| s.ends_with(m.as_str())) {
            s.truncate(s.len() - memo.len());
            s = s.trim_end_matches(is_separator).to_owned();
            if let Some(quote) = phrases("quote", lang).iter().find(|q| s.ends_with(q.as_str()) && s.len() > q.len()) {
                s.truncate(s.len() - quote.len());
            }
        }
    }
    if lang == Lang::En {
        for tail in [", though", " though", ", too", " too", " as well", ", lol", " lol", " haha"] {
            // ASCII folding keeps byte offsets (a full lowercase may not).
            if s.to_ascii_lowercase().ends_with(tail) {
                s.truncate(s.len() - tail.len());
            }
        }
    }
    s.trim().trim_end_matches([',', '，', '、']).trim().to_owned()
}

impl Clause {
    /// Reads one clause (a fact from the extractor or an endpoint, or a
    /// stored memory).
    pub(crate) fn read(text: &str) -> Clause {
        let lang = lang_of(text);
        let mut cues = Cues::default();
        let body = strip_trailers(&strip_openers(text, lang, &mut cues, false), lang);
        cues.additive = phrases("additive", lang).iter().any(|p| contains_phrase(text, p, lang));
        cues.cessation = patterns("cessation", lang).iter().any(|r| r.is_match(&body));
        let switch = patterns("switch", lang).iter().find_map(|r| {
            let captures = r.captures(&body)?;
            let to = clean_value(captures.name("to")?.as_str());
            let from = captures.name("from").map(|m| clean_value(m.as_str())).filter(|f| !f.is_empty());
            (!to.is_empty()).then_some(Switch { from, to })
        });
        let substitution = if cues.correction {
            patterns("substitute", lang).iter().find_map(|r| {
                let captures = r.captures(&body)?;
                let wrong = clean_value(captures.name("from")?.as_str());
                let right = clean_value(captures.name("to")?.as_str());
                (!wrong.is_empty() && !right.is_empty()).then_some((wrong, right))
            })
        } else {
            None
        };
        let slot = slot::find(&body, lang);
        Clause { body, lang, cues, slot, switch, substitution }
    }

    /// Reads a stored memory: its canonical third-person form ("Lives in
    /// Portland", "Name is Priya") is read back as the speaker's words.
    pub(crate) fn read_memory(content: &str) -> Clause {
        let clause = Clause::read(content);
        // 自己的 / 自分の stored for the speaker's 我的 / 私の
        // ([`CJK_POSSESSIVES`]) are the speaker's again.
        let back: Vec<(&str, &str)> = CJK_POSSESSIVES.iter().map(|(mine, own)| (*own, *mine)).collect();
        let spoken = swap_cjk_possessives(&clause.body, &back);
        if spoken != clause.body {
            let again = Clause::read(&spoken);
            if again.slot.is_some() {
                return Clause { body: clause.body, ..again };
            }
        }
        if clause.slot.is_some() {
            return clause;
        }
        let readings = match clause.lang {
            Lang::En => first_person_readings(&clause.body),
            Lang::Zh => vec![format!("我的{spoken}"), format!("我{spoken}")],
            Lang::Ja => vec![format!("私の{spoken}"), format!("私は{spoken}です")],
        };
        for restored in readings {
            let again = Clause::read(&restored);
            if again.slot.is_some() {
                return Clause { body: clause.body, ..again };
            }
        }
        clause
    }
}

/// A value as compared: no articles, quotes or trailing punctuation.
pub(crate) fn clean_value(text: &str) -> String {
    let s = text.trim().trim_matches(|c: char| is_separator(c) || "\"'“”「」『』。.".contains(c));
    let lower = s.to_lowercase();
    for article in ["a ", "an ", "the "] {
        if lower.starts_with(article) {
            return s[article.len()..].trim().to_owned();
        }
    }
    s.to_owned()
}

/// English readings of a canonical memory as the speaker's own words.
fn first_person_readings(body: &str) -> Vec<String> {
    // "Keeps their bike …" was "I keep my bike …" ([`third_person`]).
    let back: Vec<(&str, &str)> = POSSESSIVES.iter().map(|(mine, theirs)| (*theirs, *mine)).collect();
    let body = &swap_possessives(body, &back);
    let mut words = body.split_whitespace();
    let Some(first) = words.next() else { return Vec::new() };
    let rest: Vec<&str> = words.collect();
    let rest = rest.join(" ");
    let lower = first.to_lowercase();
    let mut readings = Vec::new();
    let verb = match lower.as_str() {
        "is" => "am".to_owned(),
        "has" => "have".to_owned(),
        "does" => "do".to_owned(),
        "was" | "got" | "had" | "did" => lower.clone(),
        _ => base_form(&lower),
    };
    readings.push(format!("I {verb} {rest}").trim().to_owned());
    if let Some((adverb, tail)) = rest.split_once(' ') {
        readings.push(format!("I {lower} {} {}", base_form(adverb), tail).trim().to_owned());
    }
    readings.push(format!("my {body}"));
    readings
}

/// "lives" → "live", "studies" → "study", "watches" → "watch".
fn base_form(verb: &str) -> String {
    if let Some(stem) = verb.strip_suffix("ies") {
        return format!("{stem}y");
    }
    for ending in ["ches", "shes", "sses", "xes", "zes", "oes"] {
        if verb.ends_with(ending) {
            return verb[..verb.len() - 2].to_owned();
        }
    }
    match verb.strip_suffix('s') {
        Some(stem) if !verb.ends_with("ss") && stem.len() > 1 => stem.to_owned(),
        _ => verb.to_owned(),
    }
}

/// Whether a sentence is a question.
pub(crate) fn is_question(sentence: &str) -> bool {
    let s = sentence.trim_end();
    if asks_to_remember(s) {
        return false;
    }
    s.ends_with('?')
        || s.ends_with('？')
        || s.ends_with("ですか")
        || s.ends_with("ますか")
        || s.ends_with('吗')
        || s.ends_with("吗。")
        || s.ends_with('呢')
        || s.ends_with("かな")
}

/// Whether `sentence` opens with an ask to remember worded as a request
/// (a `memo` phrase that itself opens with a `request` one: "Can you
/// remember that my locker code is 4412?"): what follows is to be kept,
/// not a question asked.
fn asks_to_remember(sentence: &str) -> bool {
    let lang = lang_of(sentence);
    phrases("memo", lang).iter().any(|memo| {
        strip_phrase(sentence, memo, lang).is_some_and(|rest| !rest.is_empty())
            && phrases("request", lang).iter().any(|request| strip_phrase(memo, request, lang).is_some())
    })
}

static FILLER: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut list: Vec<String> = include_str!("../../lexicon/filler.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_lowercase)
        .collect();
    list.sort_by_key(|p| std::cmp::Reverse(p.chars().count()));
    list
});

/// Words that make an English clause the speaker's own.
const FIRST_PERSON_EN: &[&str] =
    &["i", "i'm", "i've", "i'd", "i'll", "im", "me", "my", "mine", "myself", "we", "we're", "we've", "our", "us", "ours"];

fn speaks_of_self(text: &str, lang: Lang) -> bool {
    match lang {
        Lang::En => text
            .to_lowercase()
            .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
            .any(|w| FIRST_PERSON_EN.contains(&w.replace('’', "'").as_str())),
        Lang::Zh => ["我", "咱", "俺", "本人"].iter().any(|w| text.contains(w)),
        Lang::Ja => true,
    }
}

/// Filler, chatter, social and opener phrases of each language, longest
/// first (built once; every clause is checked against them).
/// Longest first; English ones between spaces (they match whole words).
static CHATTER: LazyLock<[Vec<String>; 3]> = LazyLock::new(|| {
    [Lang::En, Lang::Zh, Lang::Ja].map(|lang| {
        let mut all: Vec<String> =
            FILLER.iter().chain(["chatter", "social", "prefix", "memo"].iter().flat_map(|kind| phrases(kind, lang))).cloned().collect();
        all.sort_by_key(|p| std::cmp::Reverse(p.chars().count()));
        if lang == Lang::En {
            all = all.into_iter().map(|phrase| format!(" {phrase} ")).collect();
        }
        all
    })
});

/// Whether nothing (no letters) is left of `text` once every filler,
/// chatter and social phrase is taken out: the clause says nothing.
fn is_only_chatter(text: &str, lang: Lang) -> bool {
    !beyond_chatter(text, lang).chars().any(char::is_alphanumeric)
}

/// What is left of `text` once every filler, chatter and social phrase is
/// taken out.
fn beyond_chatter(text: &str, lang: Lang) -> String {
    let all = &CHATTER[lang as usize];
    let mut rest = text.to_lowercase();
    if lang == Lang::En {
        // Words only: punctuation (but the apostrophe) is a word break.
        rest = rest.replace(|c: char| c.is_ascii_punctuation() && c != '\'', " ");
        rest = format!(" {} ", rest.split_whitespace().collect::<Vec<_>>().join(" "));
        // A phrase not there changes nothing: the text stays as it was
        // spaced (rebuilding it for each of the lexicons' phrases was 0.8 ms
        // of a ten-message REST add).
        for pattern in all {
            if !rest.contains(pattern.as_str()) {
                continue;
            }
            while let Some(at) = rest.find(pattern.as_str()) {
                rest.replace_range(at..at + pattern.len(), "  ");
            }
            rest = format!(" {} ", rest.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    } else {
        for phrase in all {
            if rest.contains(phrase.as_str()) {
                rest = rest.replace(phrase.as_str(), " ");
            }
        }
    }
    rest
}

/// Whether a clause of a user's message carries no fact: greetings, thanks,
/// apologies, filler, short remarks about nothing of the speaker's.
pub(crate) fn is_chatter(clause: &str, inherited_self: bool) -> bool {
    let lang = lang_of(clause);
    let mut cues = Cues::default();
    let body = strip_trailers(&strip_openers(clause, lang, &mut cues, false), lang);
    if body.is_empty() || is_only_chatter(&body, lang) {
        return true;
    }
    // A request to the assistant ("tell me more", 帮我…, 教えて) is no fact.
    let asks = |p: &String| match lang {
        Lang::Ja => body.ends_with(p.as_str()) || body.ends_with(&format!("{p}ください")) || body.ends_with(&format!("{p}下さい")),
        _ => strip_phrase(&body, p, lang).is_some(),
    };
    if phrases("request", lang).iter().any(asks) {
        return true;
    }
    // A Japanese remark ("東京は暑いですね") shares a feeling, not a fact.
    if lang == Lang::Ja && (body.ends_with('ね') || body.ends_with("よね")) {
        return true;
    }
    let own = speaks_of_self(clause, lang) || inherited_self;
    let starts_social = phrases("social", lang).iter().any(|p| strip_phrase(&body, p, lang).is_some());
    if starts_social && !speaks_of_self(&body, lang) {
        return true;
    }
    if own || cues.correction || cues.restatement || unsaid_speaker(&body, lang) || slot::find(&body, lang).is_some() {
        return false;
    }
    // Nothing of the speaker's and short: a remark ("Wild finish").
    let size = match lang {
        Lang::En => body.split_whitespace().count(),
        _ => body.chars().filter(|c| c.is_alphanumeric()).count() / 2,
    };
    size <= 4
}

/// Whether a clause is a predicate of the speaker left unsaid, as Chinese
/// does (不吃辣, 在学吉他, 最近在学日语, 刚换了新工作: after an optional
/// time word, `when` in `lexicon/chat.txt`, it opens with an `unsaid`
/// word, and two characters or more are left beside chatter: 不知道也没事
/// is a remark) and English diary style does ("Learning Rust these days":
/// an `unsaid` activity verb and an object that is no bare pronoun).
fn unsaid_speaker(body: &str, lang: Lang) -> bool {
    match lang {
        Lang::Zh if beyond_chatter(body, lang).chars().filter(|c| c.is_alphanumeric()).count() >= 2 => {
            let after_when = phrases("when", lang).iter().find_map(|when| strip_phrase(body, when, lang)).unwrap_or(body);
            phrases("unsaid", lang).iter().any(|word| strip_phrase(after_when, word, lang).is_some_and(|rest| !rest.is_empty()))
        }
        // "Learning Rust these days", "Loving the new keyboard"; not
        // "Loving it" or "Reading this" (a remark on something at hand).
        Lang::En => phrases("unsaid", lang).iter().any(|word| {
            strip_phrase(body, word, lang).is_some_and(|rest| {
                let words: Vec<String> =
                    rest.split_whitespace().map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase()).collect();
                words.first().is_some_and(|first| !BARE_OBJECTS.contains(&first.as_str()))
            })
        }),
        _ => false,
    }
}

/// Objects that leave an English clause about something at hand, not a
/// fact of the speaker's ("Loving it", "Reading this now").
const BARE_OBJECTS: &[&str] =
    &["it", "this", "that", "these", "those", "there", "here", "them", "out", "up", "on", "around", "now", "soon", "again"];

/// Sentences of a message: split after `.` `!` `?` (followed by a space or
/// the end), `。` `！` `？` and line breaks.
pub(crate) fn sentences(text: &str) -> Vec<String> {
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

/// Words an English clause starts with when it is a new statement.
const NEW_STATEMENT_EN: &[&str] =
    &["i", "i'm", "i've", "i'd", "i'll", "im", "my", "we", "we're", "we've", "our", "she", "he", "they", "she's", "he's", "they're"];

/// "… and I …": a new statement after "and"/"but" (group 1: what comes
/// before, from the last comma; group 2: the subject).
static AND_NEW_STATEMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)([^,;]*?)\s+(?:and|but)\s+((?:i|i'm|i've|i'd|my|we|we're|our|she|he|they)\s)").expect("static regex")
});

/// Applies a correction inside one sentence ("Leeds — sorry, I meant
/// Bath"): what follows the cue replaces the value just said.
fn inline_correction(sentence: &str, lang: Lang) -> String {
    // ASCII folding keeps byte offsets in `sentence` valid.
    let lower = sentence.to_ascii_lowercase();
    for cue in phrases("inline", lang) {
        let Some(at) = lower.find(cue.as_str()) else { continue };
        if at == 0 {
            continue;
        }
        let before = sentence[..at].trim().trim_end_matches(is_separator).trim();
        let after = strip_trailers(sentence[at + cue.len()..].trim_start_matches(is_separator), lang);
        let after = after.strip_suffix("です").unwrap_or(&after).trim().to_owned();
        let mut cues = Cues::default();
        if before.is_empty()
            || after.is_empty()
            || strip_openers(before, lang, &mut cues, false).is_empty()
            || opener_only(before, lang)
            || is_only_chatter(before, lang)
        {
            continue;
        }
        let value = slot::find(before, lang).map(|s| s.value_text);
        let corrected = match value.filter(|v| before.contains(v.as_str())) {
            Some(value) => {
                let at = before.rfind(value.as_str()).unwrap_or(0);
                format!("{}{}{}", &before[..at], after, &before[at + value.len()..])
            }
            None if lang == Lang::En => match before.rsplit_once(' ') {
                Some((head, _)) => format!("{head} {after}"),
                None => after.clone(),
            },
            None => after.clone(),
        };
        return corrected;
    }
    sentence.to_owned()
}

/// Splits one sentence into clauses: "I'm Marco, I'm a landscape architect,
/// and I live in Turin" → three; 我叫李静，是个前端工程师 → two;
/// 看護師をしていて、福岡に住んでいます → two. Openers that stand alone
/// ("実は、", "对，") stay with the clause they open.
fn clauses(sentence: &str, lang: Lang) -> Vec<String> {
    let sentence = inline_correction(sentence, lang);
    match lang {
        Lang::En => {
            let sentence = AND_NEW_STATEMENT.replace_all(&sentence, |c: &regex::Captures<'_>| {
                let before = &c[1];
                let pronoun_first = before.split_whitespace().next().is_some_and(|w| {
                    ["i", "i'm", "i've", "we", "we're", "she", "he", "they"].contains(&w.to_lowercase().replace('’', "'").as_str())
                });
                if before.split_whitespace().count() >= 3 || pronoun_first { format!("{before}, {}", &c[2]) } else { c[0].to_owned() }
            });
            let mut out: Vec<String> = Vec::new();
            let mut current = String::new();
            let mut opener = String::new();
            let pieces: Vec<&str> = sentence.split_inclusive([',', ';', '—', '–']).collect();
            for piece in pieces {
                let trimmed = piece.trim();
                // "Like I mentioned, …", "Actually, …": the opener stays
                // with the clause it opens.
                if opener_only(trimmed, lang) {
                    if !current.is_empty() {
                        out.push(std::mem::take(&mut current));
                    }
                    opener.push_str(trimmed);
                    opener.push(' ');
                    continue;
                }
                let piece =
                    &if opener.is_empty() { piece.to_owned() } else { format!("{}{}", std::mem::take(&mut opener), piece.trim_start()) };
                let trimmed = piece.trim();
                let lead = trimmed.trim_start_matches(is_separator);
                let lead = ["and ", "but ", "so ", "plus ", "also "]
                    .iter()
                    .find_map(|c| lead.strip_prefix(c).or_else(|| lead.strip_prefix(&c.to_uppercase())))
                    .unwrap_or(lead);
                let first = lead.split_whitespace().next().unwrap_or("").to_lowercase().replace('’', "'");
                let starts_new = NEW_STATEMENT_EN.contains(&first.as_str());
                let chatter = is_only_chatter(trimmed.trim_end_matches([',', ';', '.', '!']), lang);
                // A bare event ("I got promoted,") introduces the clause after it.
                let bare_event = current.split_whitespace().count() <= 3
                    && current.trim_end().ends_with(',')
                    && current
                        .split_whitespace()
                        .nth(1)
                        .is_some_and(|verb| verb.ends_with("ed") || ["got", "became", "went"].contains(&verb))
                    && !current.split_whitespace().last().is_some_and(|w| w.chars().next().is_some_and(char::is_uppercase));
                if !current.is_empty() && (starts_new && !bare_event || chatter) {
                    out.push(std::mem::take(&mut current));
                }
                if chatter {
                    continue;
                }
                current.push_str(if current.is_empty() { lead } else { piece });
            }
            if !current.trim().is_empty() {
                out.push(current);
            }
            out.into_iter().map(|c| c.trim().trim_end_matches([',', ';', '—', '–']).trim().to_owned()).filter(|c| !c.is_empty()).collect()
        }
        Lang::Zh | Lang::Ja => {
            let separators: &[char] = if lang == Lang::Zh { &['，', ',', '；', ';'] } else { &['、', '，', ',', '；'] };
            let mut out: Vec<String> = Vec::new();
            let mut pending = String::new();
            for piece in sentence.split_inclusive(separators) {
                let text = piece.trim_end_matches(separators).trim();
                if text.is_empty() {
                    continue;
                }
                if opener_only(text, lang) {
                    pending.push_str(piece);
                    continue;
                }
                let piece = format!("{}{piece}", std::mem::take(&mut pending));
                // Japanese: a clause ends at a te-form ("していて、") or
                // after chatter; other commas join ("東京の、渋谷に…").
                // Chinese: a piece that names no one and fills no slot of
                // its own continues the clause before ("…一只猫，现在有三只了").
                let continues = match lang {
                    Lang::Ja => out.last().is_some_and(|last| !ends_clause(last)),
                    _ => {
                        out.last().is_some_and(|last| !is_only_chatter(last.trim_end_matches(separators), lang))
                            && !speaks_of_self(text, lang)
                            && !["她", "他", "它"].iter().any(|p| text.contains(p))
                            && !is_only_chatter(text, lang)
                            && slot::find(text, lang).is_none()
                    }
                };
                match out.last_mut() {
                    Some(last) if continues => last.push_str(&piece),
                    _ => out.push(piece),
                }
            }
            if !pending.is_empty() {
                out.push(pending);
            }
            out.into_iter().map(|c| c.trim().trim_end_matches(separators).trim().to_owned()).filter(|c| !c.is_empty()).collect()
        }
    }
}

/// Whether a Japanese clause so far is complete (ends in a te-form or is
/// chatter), so the next piece starts a new one.
fn ends_clause(clause: &str) -> bool {
    let text = clause.trim_end_matches(['、', '，', ',', '；']).trim();
    text.ends_with('て') || text.ends_with('で') || is_only_chatter(text, Lang::Ja)
}

/// The fact clauses of one user message, in order: sentences split into
/// clauses; greetings, thanks, questions and chatter dropped; openers
/// stripped (correction and restatement cues kept: the merge reads them).
pub(crate) fn user_facts(text: &str) -> Vec<String> {
    let mut facts = Vec::new();
    for sentence in sentences(text) {
        if is_question(&sentence) {
            continue;
        }
        let lang = lang_of(&sentence);
        let mut inherited = false;
        for clause in clauses(&sentence, lang) {
            if is_chatter(&clause, inherited) {
                continue;
            }
            inherited |= speaks_of_self(&clause, lang);
            let mut cues = Cues::default();
            let kept = strip_trailers(&strip_openers(&clause, lang, &mut cues, true), lang);
            if kept.chars().filter(|c| c.is_alphanumeric()).count() >= 2 {
                facts.push(kept);
            }
        }
    }
    facts
}

/// English third person singular of a verb ("live" → "lives"); past forms
/// and modals stay as they are.
fn third_person_verb(verb: &str) -> String {
    let lower = verb.to_lowercase();
    match lower.as_str() {
        "am" | "'m" => return "is".to_owned(),
        "have" | "'ve" => return "has".to_owned(),
        "do" => return "does".to_owned(),
        "go" => return "goes".to_owned(),
        "can" | "will" | "would" | "should" | "could" | "must" | "may" | "might" | "was" | "did" | "had" | "got" | "went" | "made"
        | "took" | "left" | "bought" | "began" | "became" | "came" | "found" | "gave" | "grew" | "knew" | "lost" | "met" | "quit"
        | "ran" | "said" | "saw" | "sold" | "spent" | "thought" | "told" | "wrote" | "built" | "felt" | "kept" | "paid" | "put"
        | "read" | "set" | "taught" | "won" | "used" => return lower,
        _ => {}
    }
    if lower.ends_with("ed") && lower.len() > 3 {
        return lower;
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

/// "I'm Marco" / "I am Marco": the name.
fn self_introduction(words: &[&str]) -> Option<String> {
    let name = match words {
        [i_am, name] if matches!(i_am.to_lowercase().replace('’', "'").as_str(), "i'm" | "im") => name,
        [i, am, name] if i.eq_ignore_ascii_case("i") && am.eq_ignore_ascii_case("am") => name,
        _ => return None,
    };
    let name = name.trim_end_matches(['.', '!', ',']);
    (name.chars().next().is_some_and(char::is_uppercase) && name.chars().all(|c| c.is_alphabetic() || c == '-' || c == '\''))
        .then(|| name.to_owned())
}

/// Adverbs that may sit between "I" and the verb.
const ADVERBS: &[&str] = &[
    "always",
    "usually",
    "often",
    "never",
    "really",
    "also",
    "still",
    "now",
    "mostly",
    "just",
    "recently",
    "finally",
    "sometimes",
    "rarely",
    "currently",
    "mainly",
    "already",
    "actually",
    "generally",
    "normally",
    "typically",
    "even",
];

/// Turns a first-person statement into a fact about the user: "I live in
/// Portland" → "Lives in Portland", "I'm Marco" → "Name is Marco", 我叫李静 →
/// 叫李静, 私は佐藤です → 佐藤. Anything else stays in the speaker's words.
pub(crate) fn third_person(sentence: &str) -> String {
    let s = sentence.trim();
    // Chinese: 我的X是Y → X是Y; 我X → X (not 我们, "we"); the speaker's
    // 我的 after it is 自己的 ([`CJK_POSSESSIVES`]).
    if let Some(rest) = s.strip_prefix("我的") {
        return swap_cjk_possessives(rest, CJK_POSSESSIVES);
    }
    if let Some(rest) = s.strip_prefix('我')
        && !rest.starts_with('们')
        && !rest.is_empty()
    {
        return swap_cjk_possessives(rest, CJK_POSSESSIVES);
    }
    // Japanese: 私は/僕は/俺は… and 私の…; the polite copula goes.
    for prefix in ["私は", "わたしは", "僕は", "ぼくは", "俺は", "私の", "僕の"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            let rest = rest.trim_end_matches('。');
            let rest = rest.strip_suffix("です").unwrap_or(rest);
            return swap_cjk_possessives(rest, CJK_POSSESSIVES);
        }
    }
    // English.
    let words: Vec<&str> = s.split_whitespace().collect();
    let Some(first) = words.first() else { return s.to_owned() };
    let rest = |from: usize| words[from.min(words.len())..].join(" ");
    let first = first.to_lowercase().replace('’', "'");
    if let Some(name) = self_introduction(&words) {
        return format!("Name is {name}");
    }
    let stored = match first.as_str() {
        "my" if words.len() > 1 => capitalize(&rest(1)),
        "i'm" | "im" => format!("Is {}", rest(1)).trim().to_owned(),
        "i've" => format!("Has {}", rest(1)).trim().to_owned(),
        "i'd" => format!("Would {}", rest(1)).trim().to_owned(),
        "i'll" => format!("Will {}", rest(1)).trim().to_owned(),
        "i" if words.len() > 1 => {
            let second = words[1].to_lowercase().replace('’', "'");
            match second.as_str() {
                "am" => format!("Is {}", rest(2)).trim().to_owned(),
                "don't" | "do" if words.get(2).is_some_and(|w| w.eq_ignore_ascii_case("not")) || second == "don't" => {
                    let from = if second == "don't" { 2 } else { 3 };
                    format!("Does not {}", rest(from))
                }
                "didn't" => format!("Did not {}", rest(2)),
                "can't" | "cannot" => format!("Cannot {}", rest(2)),
                "won't" => format!("Will not {}", rest(2)),
                "haven't" => format!("Has not {}", rest(2)),
                "no" if words.get(2).is_some_and(|w| w.eq_ignore_ascii_case("longer")) => {
                    let verb = words.get(3).map(|v| third_person_verb(v)).unwrap_or_default();
                    format!("No longer {verb} {}", rest(4)).trim().to_owned()
                }
                adverb if ADVERBS.contains(&adverb) => {
                    let verb = words.get(2).map(|v| third_person_verb(v)).unwrap_or_default();
                    format!("{} {verb} {}", capitalize(adverb), rest(3)).trim().to_owned()
                }
                _ => format!("{} {}", capitalize(&third_person_verb(words[1])), rest(2)).trim().to_owned(),
            }
        }
        _ => return s.to_owned(),
    };
    swap_subjects(&swap_possessives(&stored, POSSESSIVES))
}

/// The speaker's own pronouns inside a statement already rewritten to the
/// user ("Thinks I'm going to switch to Neovim" → "Thinks they're going to
/// switch to Neovim", "Sister taught me Rust" → "Sister taught them Rust"):
/// left as they were, they read as whoever reads the memory. "they" takes
/// the verb forms "I" does, but for "I am" and "I was". A bare "I" after a
/// capitalized word other than the first ("World War I", "Part I") is a
/// numeral and stays.
fn swap_subjects(text: &str) -> String {
    let words: Vec<&str> = text.split(' ').collect();
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    let mut skip_next = false;
    for (n, word) in words.iter().enumerate() {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        let core = word.trim_matches(|c: char| !c.is_alphanumeric());
        let lower = core.to_lowercase().replace('\u{2019}', "'");
        let to = match lower.as_str() {
            "i'm" => Some("they're".to_owned()),
            "i'll" => Some("they'll".to_owned()),
            "i've" => Some("they've".to_owned()),
            "i'd" => Some("they'd".to_owned()),
            "me" => Some("them".to_owned()),
            // A bare "I" right after a quote mark or bracket stays: the
            // words as someone said them.
            "i" if core == word.trim_end_matches(|c: char| !c.is_alphanumeric()) => {
                let numeral = n > 1 && words[n - 1].chars().next().is_some_and(char::is_uppercase);
                let next = words.get(n + 1).map(|w| w.to_lowercase());
                match next.as_deref() {
                    _ if numeral => None,
                    Some("am") => {
                        skip_next = true;
                        Some("they are".to_owned())
                    }
                    Some("was") => {
                        skip_next = true;
                        Some("they were".to_owned())
                    }
                    Some(next) if next.starts_with(|c: char| c.is_alphabetic()) => Some("they".to_owned()),
                    _ => None,
                }
            }
            _ => None,
        };
        out.push(match to {
            Some(to) => word.replacen(core, &to, 1),
            None => (*word).to_owned(),
        });
    }
    out.join(" ")
}

/// The speaker's possessives and their stored forms: "I keep my bike in
/// the garage" is stored as "Keeps their bike in the garage", not "Keeps my
/// bike …", which read as someone else's words.
const POSSESSIVES: &[(&str, &str)] = &[("my", "their"), ("mine", "theirs"), ("myself", "themselves")];

/// The speaker's possessives inside a Chinese or Japanese fact whose
/// subject (我, 私は) was dropped, and their stored forms: "我想和我的朋友
/// 一起学salsa" is stored as "想和自己的朋友一起学salsa" (自己 and 自分
/// point back at the subject, the user), not "…我的朋友…", which read as
/// whoever reads the memory.
pub(crate) const CJK_POSSESSIVES: &[(&str, &str)] =
    &[("我的", "自己的"), ("私の", "自分の"), ("わたしの", "自分の"), ("僕の", "自分の"), ("ぼくの", "自分の"), ("俺の", "自分の")];

/// `text` with each left side of `pairs` replaced by its right side (CJK
/// has no word boundaries: 我们的, "our", holds no 我的).
fn swap_cjk_possessives(text: &str, pairs: &[(&str, &str)]) -> String {
    pairs.iter().fold(text.to_owned(), |text, (from, to)| text.replace(from, to))
}

/// `text` with each whole word that is a left side of `pairs` (any case,
/// punctuation around it kept) replaced by its right side.
fn swap_possessives(text: &str, pairs: &[(&str, &str)]) -> String {
    let swap = |word: &str| {
        let core = word.trim_matches(|c: char| !c.is_alphanumeric());
        let lower = core.to_lowercase();
        match pairs.iter().find(|(from, _)| *from == lower) {
            Some((_, to)) if !core.is_empty() => word.replacen(core, to, 1),
            _ => word.to_owned(),
        }
    };
    text.split(' ').map(swap).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
