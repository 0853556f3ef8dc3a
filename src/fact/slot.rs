//! What a fact is about: a subject (the speaker, a third party, or a
//! pronoun standing for one), an attribute (home, job, favourite food,
//! the editor…) with its qualifier, and the value — from the patterns in
//! `lexicon/slots.tsv` and the words in `lexicon/slot_values.tsv`.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;
use unicode_normalization::UnicodeNormalization;

use super::{Lang, clean_value};

/// Whom a fact is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    /// The speaker.
    User,
    /// A third party, as named ("sister", 女儿).
    Other(String),
    /// She, he, 她, 彼女: some third party said before.
    Pronoun(String),
}

/// The slot a fact fills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    /// `home`, `job`, `favourite`, `use`, … (slots.tsv).
    pub(crate) attribute: String,
    /// Values accumulate (allergies, likes) instead of replacing.
    pub(crate) many: bool,
    pub(crate) subject: Subject,
    /// What the attribute is of or for, canonical ("editor", "food").
    pub(crate) qualifier: Option<String>,
    /// The value as compared (lowercase, canonical where known).
    pub(crate) value: String,
    /// The value as written.
    pub(crate) value_text: String,
}

impl Slot {
    /// "home of the speaker", "favourite food", for logs and history.
    pub(crate) fn describe(&self) -> String {
        let subject = match &self.subject {
            Subject::User => "speaker".to_owned(),
            Subject::Other(who) => who.clone(),
            Subject::Pronoun(p) => format!("{p} (a third party)"),
        };
        match &self.qualifier {
            Some(q) => format!("{}[{q}] of {subject} = {}", self.attribute, self.value_text),
            None => format!("{} of {subject} = {}", self.attribute, self.value_text),
        }
    }

    /// Same subject, attribute and qualifier: the same slot.
    pub(crate) fn same_slot(&self, other: &Slot) -> bool {
        self.attribute == other.attribute && self.qualifier == other.qualifier && same_subject(&self.subject, &other.subject)
    }
}

fn same_subject(a: &Subject, b: &Subject) -> bool {
    match (a, b) {
        (Subject::User, Subject::User) => true,
        (Subject::Other(x), Subject::Other(y)) => x == y,
        (Subject::Pronoun(_), Subject::Other(_) | Subject::Pronoun(_)) | (Subject::Other(_), Subject::Pronoun(_)) => true,
        _ => false,
    }
}

/// One `slot_values.tsv` entry.
struct Entry {
    canonical: String,
    synonyms: Vec<String>,
}

/// `slot_values.tsv` by kind.
static VALUES: LazyLock<HashMap<String, Vec<Entry>>> = LazyLock::new(|| {
    let mut values: HashMap<String, Vec<Entry>> = HashMap::new();
    for line in include_str!("../../lexicon/slot_values.tsv").lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split('\t');
        let (Some(kind), Some(canonical), Some(synonyms)) = (fields.next(), fields.next(), fields.next()) else {
            tracing::error!(line, "lexicon/slot_values.tsv: a line without three fields; skipped");
            continue;
        };
        let mut synonyms: Vec<String> = synonyms.split('|').map(|s| s.trim().to_lowercase()).filter(|s| !s.is_empty()).collect();
        synonyms.sort_by_key(|s| std::cmp::Reverse(s.chars().count()));
        values.entry(kind.to_owned()).or_default().push(Entry { canonical: canonical.to_owned(), synonyms });
    }
    values
});

fn entries(kind: &str) -> &'static [Entry] {
    VALUES.get(kind).map_or(&[], Vec::as_slice)
}

fn is_cjk_text(text: &str) -> bool {
    text.chars().any(|c| matches!(c as u32, 0x3040..=0x30FF | 0x4E00..=0x9FFF | 0x3400..=0x4DBF))
}

/// Whether `text` holds `word` (whole words for Latin script).
fn holds(text: &str, word: &str) -> bool {
    if is_cjk_text(word) {
        return text.contains(word);
    }
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric()) && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// The canonical entry of `kind` that `text` names, if any.
pub(crate) fn lookup(kind: &str, text: &str) -> Option<&'static str> {
    let lower = text.to_lowercase();
    entries(kind).iter().find(|e| e.synonyms.iter().any(|s| holds(&lower, s))).map(|e| e.canonical.as_str())
}

/// The category of a tool or product a value names ("Helix" → editor).
pub(crate) fn category(text: &str) -> Option<&'static str> {
    lookup("category", text)
}

const NUMBERS_EN: &[&str] = &[
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

/// A number written in words or CJK numerals, as digits ("seven", 七 → 7).
fn as_number(text: &str) -> Option<u32> {
    let t = text.trim().to_lowercase();
    if let Ok(n) = t.parse() {
        return Some(n);
    }
    if let Some(n) = NUMBERS_EN.iter().position(|w| *w == t) {
        return u32::try_from(n).ok();
    }
    let digit = |c: char| "零一二三四五六七八九".chars().position(|d| d == c).or_else(|| (c == '两').then_some(2));
    let chars: Vec<char> = t.chars().collect();
    match chars.as_slice() {
        [c] if *c == '十' => Some(10),
        [c] => digit(*c).and_then(|d| u32::try_from(d).ok()),
        ['十', c] => digit(*c).and_then(|d| u32::try_from(d + 10).ok()),
        [c, '十'] => digit(*c).and_then(|d| u32::try_from(d * 10).ok()),
        [a, '十', b] => digit(*a).zip(digit(*b)).and_then(|(a, b)| u32::try_from(a * 10 + b).ok()),
        _ => None,
    }
}

struct Pattern {
    attribute: String,
    many: bool,
    regex: Regex,
}

fn alternation(kind: &str) -> String {
    let mut words: Vec<&str> = entries(kind).iter().flat_map(|e| e.synonyms.iter().map(String::as_str)).collect();
    words.sort_by_key(|w| std::cmp::Reverse(w.chars().count()));
    format!("(?:{})", words.iter().map(|w| regex::escape(w)).collect::<Vec<_>>().join("|"))
}

static PATTERNS: LazyLock<Vec<Pattern>> = LazyLock::new(|| {
    let numbers = format!("(?:\\d+|{})", NUMBERS_EN.join("|"));
    let mut patterns = Vec::new();
    for line in include_str!("../../lexicon/slots.tsv").lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.splitn(3, '\t');
        let (Some(attribute), Some(cardinality), Some(pattern)) = (fields.next(), fields.next(), fields.next()) else {
            tracing::error!(line, "lexicon/slots.tsv: a line without three fields; skipped");
            continue;
        };
        let pattern = pattern.replace("{pet}", &alternation("pet")).replace("{diet}", &alternation("diet")).replace("{num}", &numbers);
        match Regex::new(&format!("(?i){pattern}")) {
            Ok(regex) => patterns.push(Pattern { attribute: attribute.to_owned(), many: cardinality == "many", regex }),
            Err(error) => tracing::error!(%error, line, "lexicon/slots.tsv: a pattern does not compile; skipped"),
        }
    }
    patterns
});

/// English contractions spelt out, so patterns need one form.
const CONTRACTIONS: &[(&str, &str)] = &[
    ("i'm", "i am"),
    ("im", "i am"),
    ("i've", "i have"),
    ("i'd", "i would"),
    ("i'll", "i will"),
    ("we're", "we are"),
    ("we've", "we have"),
    ("we'd", "we would"),
    ("they're", "they are"),
    ("she's", "she is"),
    ("he's", "he is"),
    ("it's", "it is"),
    ("that's", "that is"),
    ("don't", "do not"),
    ("doesn't", "does not"),
    ("didn't", "did not"),
    ("haven't", "have not"),
    ("hasn't", "has not"),
    ("can't", "cannot"),
    ("won't", "will not"),
    ("isn't", "is not"),
    ("aren't", "are not"),
    ("name's", "name is"),
    ("birthday's", "birthday is"),
    ("job's", "job is"),
];

/// Adverbs that only colour an English statement; left out when matching.
const COLOUR_WORDS: &[&str] = &[
    "also",
    "really",
    "still",
    "just",
    "currently",
    "actually",
    "honestly",
    "definitely",
    "totally",
    "basically",
    "too",
    "now",
    "recently",
    "finally",
    "officially",
    "lately",
    "nowadays",
];

/// Chinese and Japanese time words, left out when matching ("我上个月搬到苏州了").
const TIME_WORDS_CJK: &[&str] = &[
    "上个月",
    "上星期",
    "上周",
    "这个月",
    "这周",
    "本周",
    "下个月",
    "下周",
    "去年",
    "今年",
    "明年",
    "前几天",
    "前段时间",
    "最近",
    "昨天",
    "今天",
    "刚刚",
    "这几天",
    "这些天",
    "如今",
    "先月",
    "先週",
    "今月から",
    "来月から",
    "来年から",
    "今年から",
    "最近は",
    "今は",
    "昨日",
    "この前",
    "このごろ",
    "近頃",
];

/// [`TIME_WORDS_CJK`], longest first ("最近は" before "最近").
static TIME_WORDS_LONGEST_FIRST: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut times = TIME_WORDS_CJK.to_vec();
    times.sort_by_key(|t| std::cmp::Reverse(t.chars().count()));
    times
});

/// The clause as the patterns see it.
fn for_matching(text: &str, lang: Lang) -> String {
    let text: String = text.nfkc().collect::<String>().replace(['’', '‘'], "'");
    if lang != Lang::En {
        let mut text = text.trim().trim_end_matches(['。', '！', '!', '.']).to_owned();
        // When it happened says nothing about which slot it fills.
        for time in TIME_WORDS_LONGEST_FIRST.iter() {
            text = text.replace(time, "");
        }
        let text = text.trim_start_matches(['、', '，', ',', ' ', '：', ':']);
        // Adverbs after the subject ("我还养了", "我也喜欢") and the
        // explanatory ending ("苦手なんです") say nothing about the slot.
        return match lang {
            Lang::Zh => {
                let (head, rest) = text.strip_prefix('我').map_or(("", text), |rest| ("我", rest));
                let rest = rest.trim_start_matches(['还', '也', '又', '都']);
                let rest = rest.strip_prefix("另外").unwrap_or(rest).trim_start_matches(['还', '也', '又']);
                format!("{head}{rest}")
            }
            _ => text.replace("なんです", "です").replace("なのです", "です").replace("んです", "です"),
        };
    }
    let mut words = Vec::new();
    for word in text.split_whitespace() {
        let lower = word.to_lowercase();
        let bare = lower.trim_matches(|c: char| c.is_ascii_punctuation() && c != '\'');
        if COLOUR_WORDS.contains(&bare) && bare.len() == lower.trim_end_matches([',', '.', '!']).len() {
            continue;
        }
        match CONTRACTIONS.iter().find(|(short, _)| *short == bare) {
            Some((_, long)) => words.push((*long).to_owned()),
            None => words.push(word.to_owned()),
        }
    }
    words.join(" ").trim_end_matches(['.', '!', ',']).to_owned()
}

/// A value as compared: lowercase, NFKC, no particles or copulas at the end.
pub(crate) fn comparable(value: &str) -> String {
    let mut v: String = clean_value(value).nfkc().collect::<String>().to_lowercase();
    for tail in ["了", "的", "啊", "呢", "哦", "です", "でした", "だ", "now", "too", "though", "anymore"] {
        if v.ends_with(tail) && v.len() > tail.len() {
            v.truncate(v.len() - tail.len());
            v = v.trim().to_owned();
        }
    }
    v.chars().filter(|c| c.is_alphanumeric() || c.is_whitespace()).collect::<String>().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a `new` value says nothing the `known` one does not: equal, or
/// held in it ("Seattle" in "Seattle, WA"; not "spaces" → "two spaces",
/// which refines it).
pub(crate) fn same_value(known: &str, new: &str) -> bool {
    let (long, short) = (comparable(known), comparable(new));
    if long == short {
        return true;
    }
    let numeric = |s: &str| s.chars().all(|c| c.is_ascii_digit() || c.is_whitespace());
    if long.is_empty() || short.is_empty() || numeric(&long) || numeric(&short) {
        return false;
    }
    if !is_cjk_text(&short) {
        // "peanut" is "peanuts": compared as stemmed words.
        let stems = |s: &str| {
            crate::text::analyze::terms(s, crate::text::analyze::Mode::Query).into_iter().collect::<std::collections::HashSet<_>>()
        };
        let (known_stems, new_stems) = (stems(&long), stems(&short));
        if !new_stems.is_empty() && new_stems.is_subset(&known_stems) {
            return !changes_count(&long.replace(&short, " "));
        }
    }
    if short.chars().count() < 2 || !holds(&long, &short) {
        return false;
    }
    !changes_count(&long.replacen(short.as_str(), " ", 1))
}

/// Whether text left over from a comparison holds a count or a negation
/// ("two spaces" is not "spaces").
fn changes_count(extra: &str) -> bool {
    extra.chars().any(|c| c.is_ascii_digit() || "一二三四五六七八九十两零不没".contains(c))
        || extra
            .split_whitespace()
            .any(|w| NUMBERS_EN.contains(&w) || ["no", "not", "never", "first", "second", "third", "half"].contains(&w))
}

fn canonical_qualifier(attribute: &str, qualifier: Option<&str>, value: &str) -> Option<String> {
    let qualifier = qualifier.map(comparable).filter(|q| !q.is_empty());
    match attribute {
        "pet" => qualifier.as_deref().and_then(|q| lookup("pet", q)).map(str::to_owned).or(qualifier),
        "use" => {
            if let Some(q) = &qualifier {
                if let Some(canonical) = lookup("qual", q) {
                    return Some(canonical.to_owned());
                }
                let singular = q.strip_suffix('s').filter(|s| s.len() > 2).unwrap_or(q);
                return Some(singular.to_owned());
            }
            if let Some(category) = category(value) {
                return Some(category.to_owned());
            }
            // "concise Python examples (with type hints)": what is
            // preferred is examples.
            let value = comparable(value);
            let phrase = value.split(" with ").next().unwrap_or(&value);
            let phrase = [" in ", " on ", " at ", " to ", " from ", " over ", " instead of "]
                .iter()
                .fold(phrase, |p, preposition| p.split(preposition).next().unwrap_or(p));
            let head = phrase.split_whitespace().last().map(str::to_owned)?;
            Some(head.strip_suffix('s').filter(|s| s.len() > 2).map_or(head.clone(), str::to_owned))
        }
        _ => qualifier.map(|q| lookup("qual", &q).map_or(q, str::to_owned)),
    }
}

/// The slot a clause fills, if a pattern knows it. An English clause
/// whose start no pattern knows is tried again from its last "and"
/// ("traded it in and now drive a Tesla").
pub(crate) fn find(text: &str, lang: Lang) -> Option<Slot> {
    let matching = for_matching(text, lang);
    find_in(&matching).or_else(|| {
        let lower = matching.to_ascii_lowercase();
        let at = lower.rfind(" and ").map(|at| at + 5).or_else(|| lower.rfind(", ").map(|at| at + 2)).filter(|_| lang == Lang::En)?;
        let mut tail = matching.get(at..)?.trim();
        for conjunction in ["so ", "and ", "but ", "then "] {
            tail = tail.strip_prefix(conjunction).or_else(|| tail.strip_prefix(&conjunction.to_uppercase())).unwrap_or(tail).trim_start();
        }
        let first = tail.split_whitespace().next()?.to_lowercase();
        let tail = if ["i", "we", "my", "our"].contains(&first.as_str()) { tail.to_owned() } else { format!("I {tail}") };
        find_in(&tail)
    })
}

fn find_in(matching: &str) -> Option<Slot> {
    for pattern in PATTERNS.iter() {
        let Some(captures) = pattern.regex.captures(matching) else { continue };
        let Some(value) = captures.name("value").or_else(|| captures.name("qual")) else { continue };
        let value_text = clean_value(value.as_str());
        if value_text.is_empty() {
            continue;
        }
        let attribute = pattern.attribute.as_str();
        if attribute == "job" && lookup("notjob", &value_text).is_some() {
            continue;
        }
        let subject = match (captures.name("subj"), captures.name("pron")) {
            (Some(who), _) => Subject::Other(comparable(who.as_str())),
            (None, Some(pronoun)) => Subject::Pronoun(pronoun.as_str().to_lowercase()),
            (None, None) => Subject::User,
        };
        let qualifier = canonical_qualifier(attribute, captures.name("qual").map(|q| q.as_str()), &value_text);
        if attribute == "use" && qualifier.is_none() {
            continue;
        }
        let value = match attribute {
            "diet" => lookup("diet", &value_text).map_or_else(|| comparable(&value_text), str::to_owned),
            "age" => as_number(&value_text).map_or_else(|| comparable(&value_text), |n| n.to_string()),
            // A count: "two cats", 三只, "a third cat".
            // One more ("another", 又, もう一匹) is a change whatever the count.
            "pet" | "family" => {
                let whole = captures.get(0).map_or("", |m| m.as_str());
                let more = ["又", "もう", "another", "one more", "a new"].iter().any(|w| whole.to_lowercase().contains(w));
                let count = captures
                    .name("count")
                    .map(|c| as_number(c.as_str()).map_or_else(|| comparable(c.as_str()), |n| n.to_string()))
                    .unwrap_or_else(|| comparable(whole));
                if more { format!("one more than {count}") } else { count }
            }
            _ => comparable(&value_text),
        };
        return Some(Slot { attribute: attribute.to_owned(), many: pattern.many, subject, qualifier, value, value_text });
    }
    None
}
