//! Merging extracted facts into memory (the mem0-style `add`, SPEC §7): each
//! fact is read ([`crate::fact::Clause`]: its slot and cues) and compared
//! with the active memories of exactly its scope, read the same way, and
//! becomes ADD (a new atom), UPDATE (a replace: the old atom stays in the
//! evolution chain), DELETE (a negate: the atom stays, marked false) or NONE
//! (already known). Decisions come from slots and cues, not word overlap:
//! a new value in the same slot is an UPDATE, a cessation ("not anymore")
//! a DELETE of the memory it names, the same value a NONE, a different
//! purpose or a many-valued slot (allergies) an ADD. Every decision says
//! why (`why`, logged, and the reason of the correction in `history`).
//!
//! **Invariant:** a merge decision never destroys anything; it only goes
//! through memorize, correct/replace and correct/negate, so every effect is
//! audited like the MCP tools'. A dry run decides and writes nothing.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;

use super::{AtomFilter, Caller, CorrectAction, CorrectRequest, Effect, MemorizeOutcome, MemorizeRequest, Memory, Result};
use crate::atom::Status;
use crate::fact::{Clause, Lang, Subject, third_person};
use crate::index::AheadPassage;
use crate::recent::Recent;
use crate::text::analyze::{Mode, terms};

/// What a fact did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum MergeEvent {
    /// A new memory.
    Add,
    /// Replaced a memory on the same subject.
    Update,
    /// Marked a memory false.
    Delete,
    /// Already known (or rejected by admission, see `reason`).
    None,
}

/// One fact's outcome, in the REST API's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MergeResult {
    /// The atom now holding the fact (ADD, UPDATE: the new one; DELETE,
    /// NONE: the existing one; absent when the fact was rejected, and in a
    /// dry run for what would be new).
    pub id: Option<String>,
    /// The fact's text (DELETE: the memory marked false).
    pub memory: String,
    /// ADD / UPDATE / DELETE / NONE.
    pub event: MergeEvent,
    /// UPDATE: the content replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_memory: Option<String>,
    /// Why nothing was stored (admission), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the merge decided this: the slot the fact fills, the cue it
    /// carries and the memory it matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A decision before it is applied.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    event: MergeEvent,
    /// The memory touched (UPDATE, DELETE, NONE).
    target: Option<(String, String)>,
    /// The text stored (ADD, UPDATE).
    text: String,
    why: String,
}

/// An active memory of the scope, read as a clause; or a fact this merge
/// adds and has not written yet ([`Known::unwritten`]).
#[derive(Clone)]
struct Known {
    id: String,
    content: String,
    read: Arc<Reading>,
    /// Older than the newest page, found by a search for the facts
    /// ([`Memory::add_older`]): kept after the page.
    older: bool,
}

/// What every decision compares of a memory's text: worked out once per
/// text, not once per fact, nor once per add ([`Readings`]).
struct Reading {
    clause: Clause,
    /// [`crate::fact::slot::comparable`] of the content and of the clause's body.
    comparable: String,
    comparable_body: String,
    /// [`topic_terms`] of the content.
    topics: HashSet<String>,
    /// [`numbers`] of the content.
    numbers: Vec<String>,
    /// [`names`] of the content.
    names: Vec<String>,
    /// The content as [`crate::text::normalize`] folds it ([`names_another`]).
    folded: String,
}

impl Reading {
    fn of(content: &str) -> Reading {
        let clause = Clause::read_memory(content);
        let comparable = crate::fact::slot::comparable;
        Reading {
            comparable: comparable(content),
            comparable_body: comparable(&clause.body),
            topics: topic_terms(content),
            numbers: numbers(content),
            names: names(content),
            folded: crate::text::normalize(content),
            clause,
        }
    }
}

/// The readings of the texts merges lately compared, by text (a reading
/// depends on the text and the lexicons only, and an atom's text never
/// changes). Reading the scope's memories again at each add took 12–16 ms
/// of every REST add at 150 memories (about 90 µs a memory), four times
/// the store's answer.
pub(super) struct Readings(Mutex<Recent<Arc<Reading>>>);

/// Readings kept ([`Readings`]); the least recently used half goes when it
/// is full.
const READINGS_KEPT: usize = 4096;

impl Default for Readings {
    fn default() -> Readings {
        Readings(Mutex::new(Recent::new(READINGS_KEPT)))
    }
}

impl Readings {
    fn of(&self, content: &str) -> Arc<Reading> {
        if let Some(reading) = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(content) {
            return reading;
        }
        let reading = Arc::new(Reading::of(content));
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(content.to_owned(), Arc::clone(&reading));
        reading
    }
}

/// How the id of a fact not yet written starts (an atom id is a ULID, which
/// has no colon).
const UNWRITTEN: &str = "unwritten:";

impl Known {
    /// "memory <id>", or what stands for a fact of this call not yet
    /// written (an ADD's `why` is not decided again, so it must not name
    /// an id that does not exist).
    fn named(&self) -> String {
        match self.id.strip_prefix(UNWRITTEN) {
            Some(_) => "a fact added just before".to_owned(),
            None => format!("memory {}", self.id),
        }
    }

    fn new(readings: &Readings, id: String, content: String) -> Known {
        Known { read: readings.of(&content), id, content, older: false }
    }

    /// The `n`-th fact this merge adds, as memorize will store it (trimmed,
    /// secrets redacted), before it is.
    fn unwritten(readings: &Readings, n: usize, text: &str) -> Known {
        Known::new(readings, format!("{UNWRITTEN}{n}"), crate::text::redact(text.trim()).text)
    }
}

/// Puts `entry` first in `known`, keeping the newest page no longer than
/// the store gives ([`Memory::known`]) and the older memories after it.
fn push_newest(known: &mut Vec<Known>, entry: Known) {
    known.insert(0, entry);
    if known.iter().filter(|k| !k.older).count() > super::read::MAX_PAGE
        && let Some(last) = known.iter().rposition(|k| !k.older)
    {
        known.remove(last);
    }
}

/// Words that say nothing about what a statement is about.
const FUNCTION_WORDS: &[&str] = &[
    "i", "me", "my", "we", "our", "us", "is", "am", "are", "was", "be", "been", "have", "has", "had", "do", "does", "did", "doe", "not",
    "no", "don't", "doesn't", "a", "an", "the", "to", "of", "in", "on", "at", "and", "or", "it", "that", "this", "any", "anymor",
    "anymore", "longer", "never", "very", "realli", "really", "haven't", "now", "still", "just", "them", "it",
];

/// Chinese characters that only carry grammar (a bigram holding one says
/// nothing about the subject).
const ZH_FUNCTION: &str = "我你他她它们的了不没已经再也还在是有很都就吗呢吧啊个这那和跟对";

/// What a statement is about, as terms: words without function words and
/// cue words; CJK bigrams without grammar characters or kana.
fn topic_terms(text: &str) -> HashSet<String> {
    terms(text, Mode::Query)
        .into_iter()
        .filter(|t| !FUNCTION_WORDS.contains(&t.as_str()))
        .filter(|t| {
            let cjk = t.chars().any(|c| matches!(c as u32, 0x3040..=0x30FF | 0x4E00..=0x9FFF));
            if !cjk {
                return true;
            }
            !t.chars().any(|c| ZH_FUNCTION.contains(c) || crate::text::is_hiragana(c)) && !SELF_WORDS.contains(&t.as_str())
        })
        .collect()
}

/// "Oneself": the stored form of the speaker's 我的 / 私の
/// ([`crate::fact::CJK_POSSESSIVES`]); as little about the subject as 我.
const SELF_WORDS: &[&str] = &["自己", "自分"];

/// Term overlap of two statements (intersection over union).
pub(super) fn jaccard(a: &HashSet<String>, b: &HashSet<String>) -> f32 {
    // The smaller set looked up in the larger; the union counted, not
    // built (every known memory meets every fact: 0.5 ms of a REST add).
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let shared = small.iter().filter(|term| large.contains(*term)).count();
    let union = a.len() + b.len() - shared;
    if union == 0 { 0.0 } else { shared as f32 / union as f32 }
}

/// The known memory a statement is most about: most shared topic terms
/// (at least one, and a third of the smaller statement's), newest first.
fn most_about<'k>(text: &str, known: &'k [Known]) -> Option<&'k Known> {
    let mine = topic_terms(text);
    let mut best: Option<(&Known, usize)> = None;
    for k in known {
        let theirs = &k.read.topics;
        let shared = mine.intersection(theirs).count();
        let smaller = mine.len().min(theirs.len()).max(1);
        if shared >= 1 && shared * 3 >= smaller && best.is_none_or(|(_, b)| shared > b) {
            best = Some((k, shared));
        }
    }
    best.map(|(k, _)| k)
}

/// `haystack` with the first case-insensitive `needle` replaced.
fn replace_once(haystack: &str, needle: &str, with: &str) -> Option<String> {
    let at = haystack.to_ascii_lowercase().find(&needle.to_ascii_lowercase())?;
    let (before, after) = (haystack.get(..at)?, haystack.get(at + needle.len()..)?);
    Some(format!("{before}{with}{after}"))
}

/// The fact as stored: the speaker's words in the third person, a pronoun
/// replaced by the party it stands for.
fn stored_text(clause: &Clause, party: Option<&str>) -> String {
    let text = third_person(&clause.body);
    let Some(party) = party else { return text };
    let Some(Subject::Pronoun(pronoun)) = clause.slot.as_ref().map(|s| &s.subject) else { return text };
    let Some(rest) = text.get(pronoun.len()..).filter(|_| text.to_ascii_lowercase().starts_with(pronoun.as_str())) else {
        return text;
    };
    match clause.lang {
        Lang::En => {
            let mut chars = party.chars();
            let party: String = chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default();
            format!("{party}{rest}")
        }
        _ => format!("{party}{rest}"),
    }
}

/// The numbers a text names (digits, number words, CJK numerals): a
/// restatement names the same ones. The text is read in NFKC, as the rest
/// of the crate reads it (full-width digits are ASCII ones), and digits
/// count wherever they stand: beside CJK characters (跑1150公里, 第3回) and
/// in "15th", "10am" or "5km" a run of digits is a number of its own;
/// split at every non-alphanumeric character, those were one word that was
/// not all digits, so "runs 1150 km" and "runs 1134 km" in Chinese named no
/// number, and the sentence model called them the same. Number words and
/// CJK numerals are read as the digits they stand for ("ten" and 十 are
/// "10", 二十五 is "25"): "I run ten km" restating "Runs 10 km" named
/// other numbers and was added a second time. Ordinals and "another" stay
/// words.
fn numbers(text: &str) -> Vec<String> {
    const WORDS: &[(&str, u32)] = &[
        ("zero", 0),
        ("one", 1),
        ("two", 2),
        ("three", 3),
        ("four", 4),
        ("five", 5),
        ("six", 6),
        ("seven", 7),
        ("eight", 8),
        ("nine", 9),
        ("ten", 10),
        ("eleven", 11),
        ("twelve", 12),
        ("thirteen", 13),
        ("fourteen", 14),
        ("fifteen", 15),
        ("sixteen", 16),
        ("seventeen", 17),
        ("eighteen", 18),
        ("nineteen", 19),
        ("twenty", 20),
        ("thirty", 30),
        ("forty", 40),
        ("fifty", 50),
        ("sixty", 60),
        ("seventy", 70),
        ("eighty", 80),
        ("ninety", 90),
        ("hundred", 100),
        ("thousand", 1000),
    ];
    const ORDINALS: &[&str] = &["first", "second", "third", "another"];
    let text: String = text.nfkc().collect();
    let mut found: Vec<String> = text.split(|c: char| !c.is_ascii_digit()).filter(|run| !run.is_empty()).map(str::to_owned).collect();
    for word in text.split(|c: char| !c.is_ascii_alphabetic()).map(str::to_ascii_lowercase) {
        if let Some((_, value)) = WORDS.iter().find(|(w, _)| *w == word) {
            found.push(value.to_string());
        } else if ORDINALS.contains(&word.as_str()) {
            found.push(word);
        }
    }
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if cjk_numeral(c).is_some() {
            run.push(c);
        } else if !run.is_empty() {
            // 千万 ("by all means"), 百货 ("department store"): units alone
            // are words.
            if run.chars().any(|c| cjk_numeral(c).is_some_and(|v| v <= 10)) {
                found.push(cjk_number(&run).to_string());
            }
            run.clear();
        }
    }
    found.sort();
    found
}

/// A CJK numeral's digit (0–9) or unit (10, 100, 1,000, 10,000).
fn cjk_numeral(c: char) -> Option<u64> {
    let value = match c {
        '〇' | '零' => 0,
        '一' => 1,
        '二' | '两' => 2,
        '三' => 3,
        '四' => 4,
        '五' => 5,
        '六' => 6,
        '七' => 7,
        '八' => 8,
        '九' => 9,
        '十' => 10,
        '百' => 100,
        '千' => 1000,
        '万' => 10_000,
        _ => return None,
    };
    Some(value)
}

/// The value of a run of CJK numerals: 十五 15, 二十 20, 一百零五 105,
/// 三千 3000, 两万 20000; a unit with no digit before it counts once (十 is
/// 10).
fn cjk_number(run: &str) -> u64 {
    let (mut total, mut section, mut digit) = (0u64, 0u64, None::<u64>);
    for value in run.chars().filter_map(cjk_numeral) {
        match value {
            0..=9 => digit = Some(value),
            10_000 => {
                total = total.saturating_add(section.saturating_add(digit.unwrap_or(0)).max(1).saturating_mul(10_000));
                (section, digit) = (0, None);
            }
            unit => {
                section = section.saturating_add(digit.unwrap_or(1).saturating_mul(unit));
                digit = None;
            }
        }
    }
    total.saturating_add(section).saturating_add(digit.unwrap_or(0))
}

/// The names a text mentions (people, places, products, katakana terms:
/// [`crate::text::extract_entities`]), lowercased; a capitalised name the
/// text starts with is left out: a stored memory starts with its verb
/// ("Grows basil on the balcony"), a sentence with any word ("Honestly, …").
fn names(text: &str) -> Vec<String> {
    let first = text.split_whitespace().next().map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()));
    crate::text::extract_entities(text)
        .into_iter()
        .filter(|e| !(e.kind == crate::text::EntityKind::Name && e.name.split_whitespace().next() == first))
        .map(|e| e.name.to_lowercase())
        .collect()
}

/// Whether a fact (`text` folded by [`crate::text::normalize`], as entity
/// names are, and its [`names`]) and a memory each
/// name something the other does not mention at all: "visit Iceland with
/// Omar" and "visit Norway with Omar", ケンジさん and ユキさん growing basil.
/// The sentence model finds such pairs nearly the same (0.96–0.97), but
/// they are two facts, and a NONE would lose the new one. A name counts as
/// mentioned when its words appear anywhere in the other text, so a
/// capitalised first word ("Someday I'd love…" against "…someday") or a
/// longer form ("Sister Lena" against "Lena, my sister") is no difference.
fn names_another(text: &str, mine: &[String], theirs: &Reading) -> bool {
    mine.iter().any(|name| !theirs.folded.contains(name.as_str())) && theirs.names.iter().any(|name| !text.contains(name.as_str()))
}

/// Whether two statements each name numbers, and not the same ones:
/// "workshop 1050" and "workshop 1078". One naming none ("是医生" beside
/// "是一名医生", 一 an article there) names no other number.
fn other_numbers(mine: &[String], theirs: &[String]) -> bool {
    !mine.is_empty() && !theirs.is_empty() && mine != theirs
}

/// The part of a correction's right value that stands for the wrong one:
/// "the flight is on the 15th" for "the 14th" → "the 15th"; 下周四去上海
/// for 周三 → 周四.
fn aligned(wrong: &str, right: &str, lang: Lang) -> String {
    match lang {
        Lang::En => {
            let width = wrong.split_whitespace().count();
            let words: Vec<&str> = right.split_whitespace().collect();
            if words.len() <= width { right.to_owned() } else { words[words.len() - width..].join(" ") }
        }
        _ => {
            let (w, r): (Vec<char>, Vec<char>) = (wrong.chars().collect(), right.chars().collect());
            if w.is_empty() || r.len() <= w.len() + 1 {
                return right.to_owned();
            }
            let shared = |window: &[char]| window.iter().zip(&w).filter(|(a, b)| a == b).count();
            r.windows(w.len())
                .filter(|window| shared(window) > 0 && shared(window) < w.len())
                .max_by_key(|window| shared(window))
                .map_or_else(|| right.to_owned(), |window| window.iter().collect())
        }
    }
}

/// Whether a clause is only a value ("Kyoto", "10am", 青岛).
fn is_bare_value(body: &str, lang: Lang) -> bool {
    match lang {
        Lang::En => {
            let words: Vec<String> = body.split_whitespace().map(str::to_lowercase).collect();
            words.len() <= 3
                && !words.iter().any(|w| {
                    ["i", "i'm", "my", "we", "is", "am", "are", "was", "have", "has", "it's", "it", "she", "he", "they"]
                        .contains(&w.as_str())
                })
        }
        _ => body.chars().count() <= 8 && !body.chars().any(|c| "我私是はがをに".contains(c)),
    }
}

/// The memory's text with its value replaced by `value`: the slot's value,
/// else (English) its last capitalised word.
fn replace_value(known: &Known, value: &str) -> Option<String> {
    let content = &known.content;
    if let Some(slot) = &known.read.clause.slot
        && let Some(replaced) = replace_once(content, &slot.value_text, value)
    {
        return Some(replaced);
    }
    let last = content.split_whitespace().skip(1).filter(|w| w.chars().next().is_some_and(char::is_uppercase)).last()?;
    let word = last.trim_end_matches(|c: char| !c.is_alphanumeric());
    replace_once(content, word, value)
}

fn the_party(known: &Known) -> Option<String> {
    match known.read.clause.slot.as_ref().map(|s| &s.subject) {
        Some(Subject::Other(who)) => Some(who.clone()),
        _ => None,
    }
}

/// Cosines of a text with others under the sentence model (`None` without one).
type Similarity<'a> = dyn Fn(&str, &[&str]) -> Option<Vec<f32>> + 'a;

/// A fact of one merge as its decisions read it: read once, though it is
/// decided two or three times (the rehearsal of [`rehearse`], the
/// decision, and again after the ADDs it names are written). Reading it
/// at each was 0.9 ms of a REST add of ten facts (perf).
struct Fact {
    /// The fact as given.
    said: String,
    clause: Clause,
    /// The fact as stored ([`stored_text`], no party).
    text: String,
}

impl Fact {
    fn read(fact: &str) -> Fact {
        let clause = Clause::read(fact);
        let text = stored_text(&clause, None);
        Fact { said: fact.to_owned(), clause, text }
    }
}

/// Decides what one fact does, against the scope's active memories
/// (newest first).
fn plan(fact: &Fact, known: &[Known], similarity: &Similarity<'_>) -> Plan {
    let Fact { clause, text, .. } = fact;
    let add = |why: String| Plan { event: MergeEvent::Add, target: None, text: text.clone(), why };
    let none = |k: &Known, why: String| Plan {
        event: MergeEvent::None,
        target: Some((k.id.clone(), k.content.clone())),
        text: k.content.clone(),
        why,
    };
    let update = |k: &Known, new_text: String, why: String| Plan {
        event: MergeEvent::Update,
        target: Some((k.id.clone(), k.content.clone())),
        text: new_text,
        why,
    };
    let comparable = crate::fact::slot::comparable;
    // 1. Said before in the same words.
    if let Some(k) = {
        let (text, body) = (comparable(text), comparable(&clause.body));
        known.iter().find(|k| k.read.comparable == text || k.read.comparable_body == body)
    } {
        return none(k, format!("the same as memory {}", k.id));
    }
    // 2. Stopped being true: the memory it names is marked false.
    if clause.cues.cessation {
        return match most_about(&clause.body, known) {
            Some(k) => Plan {
                event: MergeEvent::Delete,
                target: Some((k.id.clone(), k.content.clone())),
                text: k.content.clone(),
                why: format!("cessation cue: \"{}\" ends memory {} (\"{}\")", clause.body, k.id, k.content),
            },
            None => add("a negative statement with no memory to contradict".to_owned()),
        };
    }
    // 3. "GitLab, not GitHub": the memory naming the wrong value, corrected.
    if let Some((wrong, right)) = &clause.substitution
        && let Some(k) = known.iter().find(|k| replace_once(&k.content, wrong, right).is_some())
        && let Some(corrected) = replace_once(&k.content, wrong, &aligned(wrong, right, clause.lang))
    {
        return update(k, corrected, format!("correction: \"{right}\" instead of \"{wrong}\" in memory {}", k.id));
    }
    // 4. "from Vim to Helix": the memory naming the old value.
    if let Some(switch) = &clause.switch
        && let Some(from) = &switch.from
        && let Some(k) = known
            .iter()
            .find(|k| crate::fact::slot::same_value(&k.content, from) || k.content.to_lowercase().contains(&from.to_lowercase()))
    {
        return update(k, text.clone(), format!("switch from \"{from}\" to \"{}\" replaces memory {}", switch.to, k.id));
    }
    // 5. The same slot: the same value is known, a new one replaces it (or
    //    joins it, for a many-valued slot).
    //    The same value said of another one (another number, a name the
    //    memory lacks while it names one the fact lacks: "adopted a cat
    //    named Ana", "… named Kenji") is another fact.
    if let Some(slot) = &clause.slot {
        let another = |k: &Known| {
            other_numbers(&numbers(&clause.body), &k.read.numbers)
                || names_another(&crate::text::normalize(&clause.body), &names(&clause.body), &k.read)
        };
        let same = known.iter().find(|k| k.read.clause.slot.as_ref().is_some_and(|s| s.same_slot(slot)));
        if let Some(k) = same
            && let Some(theirs) = &k.read.clause.slot
        {
            if crate::fact::slot::same_value(&theirs.value, &slot.value) {
                if another(k) {
                    return add(format!("slot {} holds this value in {}, said there of another one", slot.describe(), k.named()));
                }
                return none(k, format!("slot {} already holds this value (memory {})", slot.describe(), k.id));
            }
            if slot.many && !clause.cues.correction {
                if let Some(k) = known.iter().find(|k| {
                    k.read.clause.slot.as_ref().is_some_and(|s| s.same_slot(slot) && crate::fact::slot::same_value(&s.value, &slot.value))
                }) && !another(k)
                {
                    return none(k, format!("slot {} already holds this value (memory {})", slot.describe(), k.id));
                }
                return add(format!("slot {} holds many values; this one is new", slot.describe()));
            }
            let party = the_party(k);
            return update(
                k,
                stored_text(clause, party.as_deref()),
                format!("slot {} had \"{}\" (memory {})", slot.describe(), theirs.value_text, k.id),
            );
        }
    }
    // 6. "switched to Pixel 8": the memory about the same kind of thing.
    if let Some(switch) = &clause.switch
        && let Some(kind) = crate::fact::slot::category(&switch.to)
        && let Some(k) = known.iter().find(|k| {
            let about_kind = k.read.clause.slot.as_ref().is_some_and(|s| s.qualifier.as_deref() == Some(kind))
                || crate::fact::slot::category(&k.content) == Some(kind);
            about_kind && !k.content.to_lowercase().contains(&switch.to.to_lowercase())
        })
    {
        return update(k, text.clone(), format!("switch to \"{}\" ({kind}) replaces memory {}", switch.to, k.id));
    }
    if let Some(slot) = &clause.slot {
        return add(format!("slot {} is new", slot.describe()));
    }
    // 7. Cues without a slot.
    if clause.cues.additive {
        return add("an addition (\"too\", 也, も) to what is known".to_owned());
    }
    if clause.cues.restatement
        && let Some(k) = most_about(&clause.body, known)
    {
        return none(k, format!("a restatement of memory {}", k.id));
    }
    if clause.cues.correction
        && let Some(k) = most_about(&clause.body, known).or_else(|| known.first())
    {
        // "I meant Kyoto": the value of the memory corrected, replaced.
        let corrected = is_bare_value(&clause.body, clause.lang).then(|| replace_value(k, &clause.body)).flatten();
        return update(
            k,
            corrected.unwrap_or_else(|| text.clone()),
            format!("correction cue: replaces memory {} (\"{}\")", k.id, k.content),
        );
    }
    // 8. A paraphrase in nearly the same words, not naming other numbers:
    // "Limaで第1050回のワークショップ" and 第1078回 share every topic term
    // (digits beside kana are no term), and were one fact.
    let mine = topic_terms(&clause.body);
    let named = numbers(&clause.body);
    if let Some(k) = known.iter().find(|k| !other_numbers(&named, &k.read.numbers) && jaccard(&mine, &k.read.topics) >= 0.8) {
        return none(k, format!("nearly the same words as memory {}", k.id));
    }
    // 9. The same meaning in other words, when the sentence model is sure.
    let (folded, mentioned) = (crate::text::normalize(&clause.body), names(&clause.body));
    let candidates: Vec<&Known> = known
        .iter()
        .filter(|k| k.read.numbers == named && !names_another(&folded, &mentioned, &k.read))
        .take(PARAPHRASE_CANDIDATES)
        .collect();
    let contents: Vec<&str> = candidates.iter().map(|k| k.content.as_str()).collect();
    // The fact as it would be stored, as the memories are: the vector
    // compared now is the one it is compared by once written.
    if !clause.cues.cessation
        && !candidates.is_empty()
        && let Some(cosines) = similarity(text, &contents)
    {
        let mut ranked: Vec<(&Known, f32)> = candidates.into_iter().zip(cosines).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        if let Some((k, cosine)) = ranked.first() {
            // The closest memory, also when it is not close enough: what the
            // threshold was measured against (HMG_LOG=hmg::memory::merge=debug).
            tracing::debug!(fact = %text, memory = %k.content, cosine, "paraphrase check");
        }
        let mut swaps = Vec::new();
        for (k, cosine) in ranked.into_iter().take_while(|(_, cosine)| *cosine >= PARAPHRASE_COSINE) {
            // The same words but for one short span each: the same meaning
            // only if the spans mean the same.
            if let Some((ours, theirs)) = swapped(text, &k.content)
                && let Some(cosines) = similarity(&ours, &[theirs.as_str()])
                && cosines.first().is_some_and(|c| *c < SWAP_COSINE)
            {
                tracing::debug!(fact = %clause.body, memory = %k.content, ours, theirs, cosine = cosines[0], "a different value in the same words");
                swaps.push(format!("\"{ours}\" where {} says \"{theirs}\"", k.named()));
                continue;
            }
            return none(k, format!("the same meaning as memory {} (cosine {cosine:.3})", k.id));
        }
        if !swaps.is_empty() {
            return add(format!("a different fact in the same words: {}", swaps.join("; ")));
        }
    }
    add("no memory of the scope is about this".to_owned())
}

/// The cosine (multilingual-e5-small, each span embedded alone as a query)
/// below which the spans two statements differ in ([`swapped`]) name
/// different things. Measured on word pairs: different values reach 0.81–0.89
/// (shelf / desk 0.870, bonsai / basil 0.838, Google / Microsoft 0.891,
/// 东京 / 京都 0.887, 犬 / 猫 0.884), synonyms 0.90–0.98 (film / movie 0.970,
/// kids / children 0.984, 妈妈 / 母亲 0.971, 好き / 大好き 0.964), with a
/// few looser pairs below (love / like 0.888, 猫 / ネコ 0.854): those are
/// added beside the memory, a near-duplicate, where a NONE would have lost
/// a fact.
const SWAP_COSINE: f32 = 0.90;

/// The most units (words, or CJK characters) a span of [`swapped`] has.
const SWAP_UNITS: usize = 4;

/// The spans two statements differ in when they are the same words but
/// for one short span each: "Grows bonsai on the shelf" and "Grows bonsai
/// on the desk" → ("shelf", "desk"); 在公司学书法 and 在公司学写字 → (书法,
/// 写字). Compared in units: words of alphabetic scripts (folded by
/// [`crate::text::normalize`]) and single CJK characters, without grammar
/// ([`is_filler`]); punctuation only separates. `None` when a span is empty
/// (one statement says more) or longer than [`SWAP_UNITS`], or when the
/// statements share fewer units at their ends than the longer span has.
fn swapped(a: &str, b: &str) -> Option<(String, String)> {
    let (a, b) = (swap_units(a), swap_units(b));
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (ours, theirs) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let longest = ours.len().max(theirs.len());
    if ours.is_empty() || theirs.is_empty() || longest > SWAP_UNITS || prefix + suffix < longest {
        return None;
    }
    Some((join_units(ours), join_units(theirs)))
}

/// Whether a unit of [`swapped`] only carries grammar ("his roof" / "the
/// roof", で / を): a function word, a possessive or determiner, a Chinese
/// grammar character, a hiragana (particles, endings; katakana words are
/// kept).
fn is_filler(unit: &str) -> bool {
    const DETERMINERS: &[&str] = &["his", "her", "their", "your", "its", "own", "these", "those", "some"];
    let mut chars = unit.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if crate::text::is_cjk(c) => ZH_FUNCTION.contains(c) || crate::text::is_hiragana(c),
        _ => FUNCTION_WORDS.contains(&unit) || DETERMINERS.contains(&unit),
    }
}

/// `text`'s units for [`swapped`], without the ones that only carry
/// grammar ([`is_filler`]).
fn swap_units(text: &str) -> Vec<String> {
    let mut units = Vec::new();
    // The word being read, and whether it is katakana (a loanword or a
    // name is one unit, as an English word is).
    let mut word = String::new();
    let mut katakana = false;
    for c in crate::text::normalize(text).chars() {
        let kana_word = crate::text::is_katakana(c);
        let latin_word = !crate::text::is_cjk(c) && (c.is_alphanumeric() || c == '\'');
        if (kana_word || latin_word) && (word.is_empty() || katakana == kana_word) {
            katakana = kana_word;
            word.push(c);
            continue;
        }
        units.extend((!word.is_empty()).then(|| std::mem::take(&mut word)));
        if kana_word || latin_word {
            katakana = kana_word;
            word.push(c);
        } else if crate::text::is_cjk(c) {
            units.push(c.to_string());
        }
    }
    units.extend((!word.is_empty()).then_some(word));
    units.retain(|unit| !is_filler(unit));
    units
}

/// Units back into text: a space between two words, none beside a CJK
/// character.
fn join_units(units: &[String]) -> String {
    let mut text = String::new();
    for unit in units {
        let cjk = |s: &str| s.chars().next().is_some_and(crate::text::is_cjk);
        if text.chars().last().is_some_and(|c| !crate::text::is_cjk(c)) && !cjk(unit) {
            text.push(' ');
        }
        text.push_str(unit);
    }
    text
}

/// The texts [`rehearse`] finds the model will be asked about.
#[cfg(test)]
fn compared_texts(readings: &Readings, facts: &[Fact], known: &[Known], dry_run: bool) -> Vec<String> {
    rehearse(readings, facts, known, dry_run).0
}

/// The texts the sentence model will be asked about when `facts` are
/// decided in order against `known` ([`Memory::merge_facts_with`]), found
/// by deciding them without the model: each fact that reaches the
/// paraphrase check names itself and the memories it is compared with, and
/// is then taken for an ADD (a dry run adds nothing). With the model a
/// decision can differ (a paraphrase found is a NONE), so these are the
/// texts to embed ahead, not the decisions; a text missed here is embedded
/// when it is asked about. Also each fact's event in the rehearsal (the
/// model asked nothing: a NONE or DELETE there is one whatever it would
/// say).
fn rehearse(readings: &Readings, facts: &[Fact], known: &[Known], dry_run: bool) -> (Vec<String>, Vec<MergeEvent>) {
    let asked = std::cell::RefCell::new(Vec::new());
    let mut events = Vec::with_capacity(facts.len());
    let ask = |text: &str, others: &[&str]| {
        let mut asked = asked.borrow_mut();
        asked.push(text.to_owned());
        asked.extend(others.iter().map(|other| (*other).to_owned()));
        None
    };
    let mut known = known.to_vec();
    for (n, fact) in facts.iter().enumerate() {
        let decided = plan(fact, &known, &ask);
        events.push(decided.event);
        if dry_run {
            continue;
        }
        let target = decided.target.as_ref().map(|(id, _)| id.as_str());
        match decided.event {
            MergeEvent::Add | MergeEvent::Update => {
                // The new text is the scope's newest memory; an update's
                // target (an ADD has none) is gone, as when the store is
                // read again.
                known.retain(|k| Some(k.id.as_str()) != target);
                push_newest(&mut known, Known::unwritten(readings, n, &decided.text));
            }
            MergeEvent::Delete => known.retain(|k| Some(k.id.as_str()) != target),
            MergeEvent::None => {}
        }
    }
    (asked.into_inner(), events)
}

/// The cosine (multilingual-e5-small) above which a fact with no slot and
/// no cue restates a memory. Calibrated on the labelled cases (dev and
/// tests/data): restatements reach 0.88–1.00, but facts that were new
/// (ADD) reach 0.94 and updates and cessations 0.97, so only the top of the
/// range is trusted, and only after slots and cues have had their say.
///
/// Both texts are compared as queries, each in its stored form (the fact
/// as [`stored_text`] writes it, the memory as it is), so a fact's vector
/// compared now is the one it is compared by once it is a memory: a REST
/// add of ten messages embedded 4.0 texts to compare where it embedded 6.8
/// in the speaker's words (`benches/rest_add.py … 100 10 true`, server CPU
/// 55 → 51 ms per add, the same 871 ADD / 127 NONE). Stored forms lie
/// closer: restatements in the tests rise (0.987 → 0.997, 0.988 → 0.992,
/// 0.995 → 0.998; the loosest, "Someday I'd love to visit Iceland with
/// Omar", stays 0.981), so the threshold rose from 0.965 with them; of
/// the 440 facts of that bench the model was asked about (all different
/// facts), 5 reach 0.975 against 13 reaching 0.965 before, and none 0.98.
/// (Comparing the passage vectors instead separated worse: at 0.976, 26 of
/// 10,088 pairs of different facts passed against 6.)
const PARAPHRASE_COSINE: f32 = 0.975;

/// Memories older than the [`Memory::known`] page that each fact's best
/// keyword matches, and as many of its best sentence-model matches, add to
/// what the facts are decided against. Three of each found the same in
/// `benches/rest_add.py` and cost a tenth more of an add.
const OLDER_PER_FACT: usize = 1;

/// How [`Memory::add_older`] searches.
#[derive(Debug, Clone, Copy)]
enum Search {
    /// BM25 over the keyword index.
    Keyword,
    /// The sentence model's vectors.
    Meaning,
}

/// The active memories of exactly the caller's scope.
fn known_filter(caller: &Caller) -> AtomFilter {
    AtomFilter {
        workspace: caller.scope.workspace.clone(),
        repository: caller.scope.repository.clone(),
        branch: caller.scope.branch.clone(),
        status: Some(Status::Active),
        exact_scope: true,
        ..AtomFilter::default()
    }
}

/// How many of the newest memories the sentence model compares a fact with
/// (those naming the same [`numbers`], and no name the fact lacks while it
/// names one they lack: [`names_another`]).
const PARAPHRASE_CANDIDATES: usize = 32;

impl Memory {
    /// Merges `facts` (from an [`crate::extract::Extractor`]) into the
    /// caller's scope, attributed to `source`.
    pub fn merge_facts(&self, caller: &Caller, facts: &[String], source: &str) -> Result<Vec<MergeResult>> {
        self.merge_facts_with(caller, facts, source, false)
    }

    /// [`Memory::merge_facts`], or with `dry_run` only the decisions (each
    /// fact against the memories as they are; nothing is written).
    ///
    /// Each fact is decided against the memories and the facts before it,
    /// as if each were written at once; the ADDs are then written together
    /// ([`Memory::memorize_many`]: embedded in one batch per model), before
    /// any other write, so the audit trail keeps the facts' order. A fact
    /// whose decision names an ADD not yet written has them written first
    /// and is decided again against the stored memories.
    #[tracing::instrument(skip(self, facts), fields(tenant = %caller.scope.tenant_id, facts = facts.len()))]
    pub fn merge_facts_with(&self, caller: &Caller, facts: &[String], source: &str, dry_run: bool) -> Result<Vec<MergeResult>> {
        let similarity = |text: &str, others: &[&str]| self.similarities(text, others);
        let facts: Vec<Fact> = facts.iter().map(|fact| Fact::read(fact)).collect();
        let mut known = self.known(caller)?;
        let full = known.len() >= super::read::MAX_PAGE;
        if full {
            self.add_older(caller, &facts, &mut known, Search::Keyword)?;
        }
        self.embed_ahead(&facts, &known, source, dry_run, full);
        if full {
            self.add_older(caller, &facts, &mut known, Search::Meaning)?;
        }
        if dry_run {
            return Ok(facts
                .iter()
                .map(|fact| {
                    let plan = plan(fact, &known, &similarity);
                    tracing::info!(fact = %fact.said, event = ?plan.event, why = %plan.why, dry_run, "merge decision");
                    MergeResult {
                        id: plan.target.as_ref().map(|(id, _)| id.clone()),
                        memory: plan.text,
                        event: plan.event,
                        previous_memory: (plan.event == MergeEvent::Update).then(|| plan.target.map(|(_, c)| c)).flatten(),
                        reason: None,
                        why: Some(plan.why),
                    }
                })
                .collect());
        }
        // Each fact's result; an ADD's is filled in when the batch is written.
        let mut results: Vec<Option<MergeResult>> = Vec::with_capacity(facts.len());
        let mut adds: Vec<(usize, Plan)> = Vec::new();
        for fact in &facts {
            let mut decided = plan(fact, &known, &similarity);
            if decided.target.as_ref().is_some_and(|(id, _)| id.starts_with(UNWRITTEN)) {
                if self.write_adds(caller, &mut adds, &mut results, &mut known, source)? {
                    known = self.known_for(caller, &facts)?;
                }
                decided = plan(fact, &known, &similarity);
            }
            tracing::info!(fact = %fact.said, event = ?decided.event, why = %decided.why, dry_run, "merge decision");
            match decided.event {
                MergeEvent::Add => {
                    push_newest(&mut known, Known::unwritten(&self.readings, adds.len(), &decided.text));
                    adds.push((results.len(), decided));
                    results.push(None);
                }
                MergeEvent::None => results.push(Some(self.apply_plan(caller, decided, source)?)),
                MergeEvent::Update | MergeEvent::Delete => {
                    let stale = self.write_adds(caller, &mut adds, &mut results, &mut known, source)?;
                    let result = self.apply_plan(caller, decided, source)?;
                    if stale || result.event != MergeEvent::None {
                        known = self.known_for(caller, &facts)?;
                    }
                    results.push(Some(result));
                }
            }
        }
        self.write_adds(caller, &mut adds, &mut results, &mut known, source)?;
        Ok(results.into_iter().flatten().collect())
    }

    /// Writes the ADDs decided so far in one [`Memory::memorize_many`],
    /// fills in their results and gives their entries in `known` the ids
    /// they were written under. Whether one was not written (memorize found
    /// a duplicate elsewhere in the repository, or refused it): then `known`
    /// must be read from the store again.
    #[tracing::instrument(skip_all, fields(adds = adds.len()))]
    fn write_adds(
        &self,
        caller: &Caller,
        adds: &mut Vec<(usize, Plan)>,
        results: &mut [Option<MergeResult>],
        known: &mut [Known],
        source: &str,
    ) -> Result<bool> {
        if adds.is_empty() {
            return Ok(false);
        }
        let requests = adds.iter().map(|(_, plan)| MemorizeRequest::new(plan.text.clone()).with_source(source)).collect();
        let outcomes = self.memorize_many(caller, requests)?;
        let mut exact = true;
        for (n, ((slot, plan), outcome)) in adds.drain(..).zip(outcomes).enumerate() {
            let unwritten = format!("{UNWRITTEN}{n}");
            match (&outcome.effect, &outcome.atom_id, known.iter_mut().find(|k| k.id == unwritten)) {
                (Effect::Applied, Some(id), Some(entry)) => entry.id.clone_from(id),
                _ => exact = false,
            }
            if let Some(result) = results.get_mut(slot) {
                *result = Some(added(outcome, plan.text, plan.why));
            }
        }
        Ok(!exact)
    }

    /// Puts the sentence model's vectors for every text the decisions of
    /// `facts` will compare ([`rehearse`]) into its cache, each the
    /// vector [`Memory::similarities`] would get for its text alone, and
    /// (not in a dry run) starts every model's passages of the memories the
    /// facts would be written as: an ADD's text, admitted and attributed as
    /// [`Memory::memorize_many`] will store it
    /// ([`crate::index::Indexes::embed_ahead`]: one forward pass per core
    /// for both kinds; the write takes the passages). `searched`: every
    /// fact's vector too, for [`Memory::add_older`]. A failure only means
    /// they are embedded when asked for.
    #[tracing::instrument(skip_all, fields(facts = facts.len()))]
    fn embed_ahead(&self, facts: &[Fact], known: &[Known], source: &str, dry_run: bool, searched: bool) {
        let (texts, events) = rehearse(&self.readings, facts, known, dry_run);
        let mut texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        // Every fact's, when they search older memories by meaning.
        if searched {
            texts.extend(facts.iter().map(|f| f.text.as_str()).filter(|t| !t.trim().is_empty()));
        }
        // A fact the rehearsal already answers NONE or DELETE (an exact
        // restatement, a cessation) writes no text.
        let passages: Vec<AheadPassage> = match super::clean_source(Some(source), "agent") {
            Ok(source) if !dry_run => facts
                .iter()
                .zip(&events)
                .filter(|(_, event)| matches!(event, MergeEvent::Add | MergeEvent::Update))
                .filter_map(|(fact, _)| super::write::admit("content", &fact.text, super::MAX_CONTENT_CHARS).ok())
                .map(|admitted| AheadPassage::new(&source, &admitted.text))
                .collect(),
            _ => Vec::new(),
        };
        if let Err(error) = self.indexes().embed_ahead(&texts, &passages) {
            tracing::warn!(%error, texts = texts.len(), "could not embed the compared texts ahead; each is embedded when compared");
        }
    }

    /// Reads `facts` as a merge would (their clauses, slots and cues, the
    /// stored text admitted and redacted, each as a memory), deciding and
    /// writing nothing: the tables those readings build at first use are
    /// then built. A server calls it at start with a few sample facts, so
    /// its first add does not wait for them.
    pub(crate) fn warm_up_merge(&self, facts: &[String]) {
        let readings = Readings::default();
        let facts: Vec<Fact> = facts.iter().map(|fact| Fact::read(fact)).collect();
        let known: Vec<Known> =
            facts.iter().enumerate().map(|(n, fact)| Known::new(&readings, format!("warm-{n}"), fact.text.clone())).collect();
        let _ = rehearse(&readings, &facts, &known, true);
        for fact in &facts {
            let _ = super::write::admit("content", &fact.text, super::MAX_CONTENT_CHARS);
        }
    }

    /// Cosines of `text` with each of `others` under the first sentence
    /// model, if one is loaded, from its comparable vectors
    /// ([`crate::index::Semantic::comparable`]; cached, or embedded now):
    /// a decision at the threshold must not depend on how many facts came
    /// in one add, so a text's vector does not depend on its batch.
    fn similarities(&self, text: &str, others: &[&str]) -> Option<Vec<f32>> {
        let model = self.indexes().semantic().first()?;
        let mine = model.comparable(text).ok()?;
        others.iter().map(|other| model.comparable(other).ok().map(|theirs| theirs.iter().zip(&mine).map(|(p, q)| p * q).sum())).collect()
    }

    /// The active memories of exactly the caller's scope, newest first.
    fn known(&self, caller: &Caller) -> Result<Vec<Known>> {
        let atoms = self.newest_matching(caller, &known_filter(caller), super::read::MAX_PAGE)?;
        Ok(atoms.into_iter().map(|atom| Known::new(&self.readings, atom.id.to_string(), atom.visible_content().to_owned())).collect())
    }

    /// What `facts` are decided against: the [`Memory::known`] page, and,
    /// when the scope holds more than the page, the older memories a search
    /// for the facts finds after it ([`Memory::add_older`], by keyword and
    /// by meaning).
    fn known_for(&self, caller: &Caller, facts: &[Fact]) -> Result<Vec<Known>> {
        let mut known = self.known(caller)?;
        if known.len() >= super::read::MAX_PAGE {
            self.add_older(caller, facts, &mut known, Search::Keyword)?;
            self.add_older(caller, facts, &mut known, Search::Meaning)?;
        }
        Ok(known)
    }

    /// Adds to `known` (a full page) the active memories of exactly the
    /// caller's scope, older than the page, that are each fact's best
    /// [`OLDER_PER_FACT`] matches by `search`. Without them a user's 201st
    /// memory was never compared with their first: "I moved to Denver" was
    /// added beside "I live in Portland" instead of replacing it. By
    /// keyword, over the documents committed (the newest are in the page;
    /// a commit per add cost 10 ms of it). By meaning, the facts' vectors
    /// are the sentence model's ones the decisions compare
    /// ([`Memory::embed_ahead`] has them; the facts' passages share their
    /// forward pass, which embedding them first would split in two).
    fn add_older(&self, caller: &Caller, facts: &[Fact], known: &mut Vec<Known>, search: Search) -> Result<()> {
        let scope = &caller.scope;
        let repo_keys = crate::index::repo_keys(scope, true);
        let mut found: Vec<crate::atom::AtomId> = Vec::new();
        for fact in facts.iter().filter(|f| !f.text.trim().is_empty()) {
            let hits = match search {
                Search::Keyword => self
                    .indexes()
                    .keyword()
                    .search_committed(&scope.tenant_id, &repo_keys, &["active"], &fact.text, OLDER_PER_FACT)
                    .map_err(Into::into),
                Search::Meaning => match self.indexes().semantic().first().map(|model| (model, model.comparable(&fact.text))) {
                    Some((model, Ok(vector))) => {
                        model.vectors.search(&scope.tenant_id, &repo_keys, &["active"], &vector, OLDER_PER_FACT).map_err(Into::into)
                    }
                    _ => Ok(Vec::new()),
                },
            };
            found.extend(hits.map_err(|e: crate::index::IndexError| super::MemoryError::from(e))?.into_iter().map(|(id, _)| id));
        }
        let mut seen: HashSet<String> = known.iter().map(|k| k.id.clone()).collect();
        found.retain(|id| seen.insert(id.to_string()));
        // One read for all of them (one request to a remote store).
        let mut atoms = crate::store::codec::load_atoms(&self.store, &scope.tenant_id, &found, false)?;
        let filter = known_filter(caller);
        let before = known.len();
        for atom in found.iter().filter_map(|id| atoms.remove(id)) {
            if atom.status == Status::Active && filter.keeps_scope(&atom.scope) {
                known.push(Known { older: true, ..Known::new(&self.readings, atom.id.to_string(), atom.visible_content().to_owned()) });
            }
        }
        tracing::debug!(?search, older = known.len() - before, "merge compares older memories the facts found");
        Ok(())
    }

    fn apply_plan(&self, caller: &Caller, plan: Plan, source: &str) -> Result<MergeResult> {
        let Plan { event, target, text, why } = plan;
        match (event, target) {
            (MergeEvent::None, Some((id, content))) => {
                Ok(MergeResult { id: Some(id), memory: content, event, previous_memory: None, reason: None, why: Some(why) })
            }
            (MergeEvent::Delete, Some((id, content))) => {
                let request = CorrectRequest {
                    target_atom: id.clone(),
                    action: CorrectAction::Negate,
                    reason: format!("merge: {why}"),
                    new_content: None,
                };
                let outcome = self.correct(caller, request)?;
                let event = if outcome.effect == Effect::Applied { MergeEvent::Delete } else { MergeEvent::None };
                Ok(MergeResult { id: Some(id), memory: content, event, previous_memory: None, reason: outcome.reason, why: Some(why) })
            }
            (MergeEvent::Update, Some((id, content))) => {
                let request = CorrectRequest {
                    target_atom: id,
                    action: CorrectAction::Replace,
                    reason: format!("merge: {why}"),
                    new_content: Some(text.clone()),
                };
                let outcome = self.correct(caller, request)?;
                match (outcome.effect, outcome.new_atom_id) {
                    (Effect::Applied, Some(new_id)) => Ok(MergeResult {
                        id: Some(new_id),
                        memory: text,
                        event: MergeEvent::Update,
                        previous_memory: Some(content),
                        reason: None,
                        why: Some(why),
                    }),
                    _ => self.add_fact(
                        caller,
                        text,
                        source,
                        format!("{why}; the replace was refused ({}), so added", outcome.reason.unwrap_or_default()),
                    ),
                }
            }
            _ => self.add_fact(caller, text, source, why),
        }
    }

    fn add_fact(&self, caller: &Caller, text: String, source: &str, why: String) -> Result<MergeResult> {
        let outcome = self.memorize(caller, MemorizeRequest::new(text.clone()).with_source(source))?;
        Ok(added(outcome, text, why))
    }
}

/// An ADD's result from what memorize did with it.
fn added(outcome: MemorizeOutcome, text: String, why: String) -> MergeResult {
    match outcome.effect {
        Effect::Applied => {
            MergeResult { id: outcome.atom_id, memory: text, event: MergeEvent::Add, previous_memory: None, reason: None, why: Some(why) }
        }
        Effect::NoOp => MergeResult {
            id: outcome.deduped_with,
            memory: text,
            event: MergeEvent::None,
            previous_memory: None,
            reason: None,
            why: Some("already stored (memorize found the duplicate)".to_owned()),
        },
        Effect::Rejected => {
            MergeResult { id: None, memory: text, event: MergeEvent::None, previous_memory: None, reason: outcome.reason, why: Some(why) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::{Extractor, Message, RuleExtractor};
    use crate::scope::Scope;

    fn add(memory: &Memory, caller: &Caller, text: &str) -> Vec<MergeResult> {
        let facts = RuleExtractor.extract(&[Message { role: "user".to_owned(), content: text.to_owned() }]).unwrap();
        memory.merge_facts(caller, &facts, "user").unwrap()
    }

    #[test]
    fn term_overlap_is_shared_over_all_either_way_round() {
        let set = |terms: &[&str]| terms.iter().map(|t| (*t).to_owned()).collect::<HashSet<String>>();
        let (a, b) = (set(&["pottery", "ana", "someday"]), set(&["pottery", "ana", "garage", "bike", "week"]));
        assert_eq!(jaccard(&a, &b), 2.0 / 6.0);
        assert_eq!(jaccard(&b, &a), 2.0 / 6.0);
        assert_eq!(jaccard(&a, &a), 1.0);
        assert_eq!(jaccard(&a, &set(&[])), 0.0);
        assert_eq!(jaccard(&set(&[]), &set(&[])), 0.0);
        assert_eq!(jaccard(&set(&["陶艺", "李伟"]), &set(&["书法"])), 0.0);
    }

    #[test]
    fn the_stored_oneself_is_as_little_a_topic_as_the_speakers_i() {
        for (said, stored) in [
            ("我想和我的朋友Sofia一起学salsa", "想和自己的朋友Sofia一起学salsa"),
            ("私は私の友達と京都で陶芸を習っています", "自分の友達と京都で陶芸を習っています"),
        ] {
            assert_eq!(crate::fact::third_person(said), stored);
            assert_eq!(topic_terms(said), topic_terms(stored), "{said}");
        }
    }

    #[test]
    fn numbers_are_read_wherever_their_digits_stand() {
        let cases: &[(&str, &[&str])] = &[
            ("I run 12 km every Sunday", &["12"]),
            ("I'm reading the 4th volume, 10am on day 2", &["10", "2", "4"]),
            ("I run 5km with two friends", &["2", "5"]),
            ("我每周日和小林跑1150公里", &["1150"]),
            ("我们买了一辆蓝色的自行车，编号1024", &["1", "1024"]),
            ("第3回のワークショップに12人が参加しました", &["12", "3"]),
            ("毎週１５キロ走ります", &["15"]),
            ("我们有两只猫", &["2"]),
            // Number words and CJK numerals are the digits they stand for.
            ("I run ten km every Sunday", &["10"]),
            ("We have twelve chickens and a second coop", &["12", "second"]),
            ("我每周跑十五公里", &["15"]),
            ("我们养了二十只鸡", &["20"]),
            ("一百零五个人", &["105"]),
            ("三千五百块", &["3500"]),
            ("两万步", &["20000"]),
            ("猫を二匹飼っています", &["2"]),
            ("毎週十キロ走ります", &["10"]),
            ("Tenerife in November", &[]),
            ("千万别忘了去百货公司", &[]),
            ("Standup at 9:30", &["30", "9"]),
            ("Someone is done", &[]),
            ("I keep my bike in the garage", &[]),
        ];
        for (text, wanted) in cases {
            assert_eq!(numbers(text), wanted.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>(), "{text}");
        }
    }

    #[test]
    fn a_fact_and_a_memory_name_another_only_when_each_names_what_the_other_lacks() {
        let another = |fact: &str, memory: &str| names_another(&crate::text::normalize(fact), &names(fact), &Reading::of(memory));
        // Each names someone or somewhere the other does not mention.
        assert!(another("I want to visit Norway with Omar someday", "Wants to visit Iceland with Omar someday"));
        assert!(another("I usually go climbing with Mateo on weekends", "Usually goes climbing with Priya on weekends"));
        assert!(another("ユキさんはベランダでバジルを育てています", "ケンジさんはベランダでバジルを育てています"));
        assert!(another("週末はよくプリヤとカヤックに行きます", "週末はよくプリヤとクライミングに行きます"));
        // A capitalised first word, a longer form, one side naming nobody:
        // no difference.
        assert!(!another("Someday I'd love to visit Iceland with Omar", "Wants to visit Iceland with Omar someday"));
        assert!(!another("Lena, my sister, paints harbour watercolours", "Sister Lena paints watercolours of the harbour"));
        assert!(!another("I learned to knit from my grandmother", "Grandmother taught me to knit"));
        assert!(!another("I keep my kayak in the garage", "Keeps my road bike in the garage"));
        // Full-width letters are the same names (NFKC, as entities are read).
        assert!(!another("Someday I'd love to visit Ｉｃｅｌａｎｄ with Ｏｍａｒ", "Wants to visit Ｉｃｅｌａｎｄ with Ｏｍａｒ someday"));
    }

    /// With the model: a fact whose number changed is not a restatement of
    /// the memory with the old number, in any language; before, in Chinese
    /// and Japanese the digits beside CJK characters were not read, the
    /// model found the two nearly the same (cosine 0.98) and the new value
    /// was answered NONE and lost.
    #[test]
    fn a_changed_number_is_never_the_same_meaning_in_any_language() {
        let memory = with_models();
        let pairs = [
            ("en", "I run 12 km every Sunday with Kobayashi.", "I run 15 km every Sunday with Kobayashi."),
            ("zh", "我每周日和小林跑12公里。", "我每周日和小林跑15公里。"),
            ("zh-bike", "我们买了一辆蓝色的自行车，编号1024。", "我们买了一辆蓝色的自行车，编号1100。"),
            ("ja", "毎週日曜日に田中さんと12キロ走ります。", "毎週日曜日に田中さんと15キロ走ります。"),
            ("ja-workshop", "京都で第3回のワークショップに参加しました。", "京都で第4回のワークショップに参加しました。"),
        ];
        for (name, first, second) in pairs {
            // The same number again is still known.
            let [_, changed, again] = added_added_known(&memory, name, [first, second, second]);
            assert_eq!(again.id, changed.id, "{name}");
        }
    }

    /// With the model: a fact naming someone or somewhere else is added,
    /// though the model finds it nearly the same (0.96–0.97); a paraphrase
    /// naming the same ones is still known.
    #[test]
    fn a_fact_naming_someone_else_is_added_and_a_paraphrase_is_still_known() {
        let memory = with_models();
        let cases = [
            (
                "en",
                [
                    "I want to visit Iceland with Omar someday.",
                    "I want to visit Norway with Omar someday.",
                    "Someday I'd love to visit Iceland with Omar.",
                ],
            ),
            ("zh", ["我想和小李一起学书法。", "我想和小王一起学书法。", "我想和小李一起学习书法。"]),
            (
                "ja",
                [
                    "ケンジさんはベランダでバジルを育てています。",
                    "ユキさんはベランダでバジルを育てています。",
                    "ベランダでケンジさんがバジルを育てています。",
                ],
            ),
        ];
        for (name, texts) in cases {
            let [first, _, known] = added_added_known(&memory, name, texts);
            assert_eq!(known.id, first.id, "{name}: the paraphrase names the first memory");
        }
    }

    #[test]
    fn a_fact_in_the_same_words_but_one_is_added_and_a_synonym_is_still_known() {
        let memory = with_models();
        // The second says the first's words but for the place (the model
        // puts them at 0.97–0.98; the places alone at 0.83–0.87); the third
        // restates the first with a synonym or in another order.
        let cases = [
            (
                "en",
                [
                    "My neighbour Priya grows basil on the shelf.",
                    "My neighbour Priya grows basil on the desk.",
                    "My neighbor Priya grows basil on the shelf.",
                ],
            ),
            ("zh", ["我的邻居在阳台上种罗勒。", "我的邻居在屋顶上种罗勒。", "我的邻居在阳台上栽罗勒。"]),
            (
                "ja",
                [
                    "ケンジさんはベランダでバジルを育てています。",
                    "ケンジさんは屋上でバジルを育てています。",
                    "ベランダでケンジさんがバジルを育てています。",
                ],
            ),
        ];
        for (name, texts) in cases {
            let [first, second, known] = added_added_known(&memory, name, texts);
            let why = second.why.as_deref().unwrap_or_default();
            assert!(why.starts_with("a different fact in the same words"), "{name}: {why}");
            assert!(why.contains(first.id.as_deref().unwrap_or("?")), "{name}: names the memory it differs from: {why}");
            assert_eq!(known.id, first.id, "{name}: the restatement names the first memory: {known:?}");
        }
    }

    #[test]
    fn the_same_words_or_slot_value_with_another_number_or_name_is_another_fact() {
        let memory = Memory::open_in_memory().unwrap();
        let cases: [(&str, [&str; 3]); 4] = [
            // Every topic term shared: the digits beside kana are no term.
            (
                "ja",
                [
                    "Limaで第1050回のワークショップに参加しました。",
                    "Limaで第1078回のワークショップに参加しました。",
                    "Limaで第1050回のワークショップに参加しました",
                ],
            ),
            ("zh", ["我参加了第12次读书会。", "我参加了第13次读书会。", "我参加了第12次读书会"]),
            // The same slot value (a cat), said of another cat.
            ("en-pet", ["We adopted a cat named Ana.", "We adopted a cat named Kenji.", "We adopted a cat named Ana!"]),
            ("en-number", ["We adopted a cat, number 1076.", "We adopted a cat, number 1084.", "we adopted a cat, number 1076"]),
        ];
        for (name, [first, second, again]) in cases {
            let caller = Caller::new(Scope::tenant("t").with_workspace("u").with_repository(name), "test");
            let results = [first, second, again].map(|text| add(&memory, &caller, text).swap_remove(0));
            let events = results.each_ref().map(|r| r.event);
            assert_eq!(events, [MergeEvent::Add, MergeEvent::Add, MergeEvent::None], "{name}: {results:#?}");
            assert_eq!(results[2].id, results[0].id, "{name}: the repeat names the first");
            let why = results[1].why.as_deref().unwrap_or_default();
            assert!(!why.contains(UNWRITTEN), "{name}: {why}");
        }
        // A number that is an article (一名) names no other number.
        let caller = Caller::new(Scope::tenant("t").with_workspace("u").with_repository("zh-article"), "test");
        assert_eq!(add(&memory, &caller, "我是一名医生。")[0].event, MergeEvent::Add);
        assert_eq!(add(&memory, &caller, "我是医生。")[0].event, MergeEvent::None);
    }

    #[test]
    fn the_spans_two_statements_differ_in() {
        type Case<'a> = (&'a str, &'a str, Option<(&'a str, &'a str)>);
        let cases: [Case<'_>; 14] = [
            ("Grows bonsai on the shelf", "Grows bonsai on the desk.", Some(("shelf", "desk"))),
            ("Neighbour Priya grows chess", "Neighbour Priya grows origami", Some(("chess", "origami"))),
            ("Watched the film twice", "watched the MOVIE twice", Some(("film", "movie"))),
            ("Lives in New York with two cats", "Lives in Porto with two cats", Some(("new york", "porto"))),
            ("在公司学书法", "在公司学写字", Some(("书法", "写字"))),
            ("Kenjiさんはbalconyでbonsaiを育てています", "Kenjiさんはbalconyでbasilを育てています", Some(("bonsai", "basil"))),
            ("ケンジさんはベランダでバジルを育てています", "ケンジさんは屋上でバジルを育てています", Some(("ベランダ", "屋上"))),
            ("Plays chess", "Plays go", Some(("chess", "go"))),
            // One says more, or they share too little, or the span is long,
            // or the difference is grammar.
            ("Keeps own bike in the garage", "Keeps own bike in the big garage", None),
            ("Omar walks his dog every day", "Omar walks the dog every day", None),
            ("每天在公园跑步", "每天于公园跑步", None),
            ("毎朝公園で犬を散歩させる", "毎朝公園を犬と散歩させる", None),
            ("Likes tea", "Drinks coffee every morning", None),
            ("Went to the market with Ana and bought apples", "Went to the cinema with Tom and watched a long film", None),
        ];
        for (a, b, wanted) in cases {
            let got = swapped(a, b);
            assert_eq!(got.as_ref().map(|(x, y)| (x.as_str(), y.as_str())), wanted, "{a} / {b}");
        }
    }

    #[test]
    fn a_number_spelled_out_restates_the_memory_with_its_digits() {
        let memory = with_models();
        let cases = [
            ("en", ["I run 10 km every Sunday.", "I swim 3 km every Friday.", "I run ten km every Sunday."]),
            ("zh", ["我每周日跑15公里。", "我每周五游3公里。", "我每周日跑十五公里。"]),
            ("ja", ["毎週日曜日に10キロ走ります。", "毎週金曜日に3キロ泳ぎます。", "毎週日曜日に十キロ走ります。"]),
        ];
        for (name, texts) in cases {
            let [first, _, known] = added_added_known(&memory, name, texts);
            assert_eq!(known.id, first.id, "{name}: the spelled-out number names the first memory");
        }
    }

    /// A memory with the real models (what the paraphrase check runs on).
    pub(super) fn with_models() -> Memory {
        let memory = Memory::open_with(None, super::super::MemoryOptions::default()).unwrap();
        assert!(!memory.indexes().semantic().is_empty(), "the test needs the models (scripts/setup.sh)");
        memory
    }

    /// Three adds of one message each into repository `name`: the first two
    /// must be ADDs, the third a NONE. Their first results.
    fn added_added_known(memory: &Memory, name: &str, texts: [&str; 3]) -> [MergeResult; 3] {
        let caller = Caller::new(Scope::tenant("t").with_workspace("u").with_repository(name), "test");
        let results = texts.map(|text| add(memory, &caller, text).swap_remove(0));
        let events = results.each_ref().map(|r| r.event);
        assert_eq!(events, [MergeEvent::Add, MergeEvent::Add, MergeEvent::None], "{name}: {results:#?}");
        results
    }

    #[test]
    fn a_preference_changed_twice_leaves_one_memory_and_a_two_step_chain() {
        let memory = Memory::open_in_memory().unwrap();
        let caller = Caller::new(Scope::tenant("alice").with_workspace("vg").with_repository("agent"), "test");
        let first = add(&memory, &caller, "I prefer tabs for indentation.");
        assert_eq!(first[0].event, MergeEvent::Add, "{first:?}");
        let second = add(&memory, &caller, "I prefer spaces for indentation.");
        assert_eq!(second[0].event, MergeEvent::Update, "{second:?}");
        let third = add(&memory, &caller, "I prefer two spaces for indentation.");
        assert_eq!(third[0].event, MergeEvent::Update, "{third:?}");
        let head = third[0].id.clone().unwrap();
        let history = memory.history(&caller, &head).unwrap();
        assert_eq!(history.chain.len(), 3, "{history:?}");
        assert_eq!(history.chain.iter().filter(|a| a.status == crate::Status::Active).count(), 1);
        let again = add(&memory, &caller, "I prefer two spaces for indentation.");
        assert_eq!(again[0].event, MergeEvent::None);
        // Unrelated facts are added beside it.
        let other = add(&memory, &caller, "I use Neovim every day.");
        assert_eq!(other[0].event, MergeEvent::Add, "{other:?}");
    }

    #[test]
    fn a_negated_fact_marks_the_memory_false_and_keeps_it() {
        let memory = Memory::open_in_memory().unwrap();
        let caller = Caller::new(Scope::tenant("bob"), "test");
        let added = add(&memory, &caller, "我喜欢喝咖啡。");
        assert_eq!(added[0].event, MergeEvent::Add, "{added:?}");
        let deleted = add(&memory, &caller, "我不再喜欢喝咖啡。");
        assert_eq!(deleted[0].event, MergeEvent::Delete, "{deleted:?}");
        let history = memory.history(&caller, added[0].id.as_deref().unwrap()).unwrap();
        assert_eq!(history.chain[0].status, crate::Status::Negated);
        assert!(history.chain[0].content.contains("咖啡"), "history keeps the content");
    }
}

#[cfg(test)]
mod decisions {
    use super::*;
    use crate::extract::{Extractor, Message, RuleExtractor};
    use crate::scope::Scope;

    /// Runs each turn in a fresh scope and checks its events.
    fn conversation(turns: &[(&str, &[MergeEvent])]) -> (Memory, Caller, Vec<Vec<MergeResult>>) {
        let memory = Memory::open_in_memory().unwrap();
        let caller = Caller::new(Scope::tenant("t").with_workspace("u").with_repository("agent"), "test");
        let mut all = Vec::new();
        for (text, expected) in turns {
            let facts = RuleExtractor.extract(&[Message { role: "user".to_owned(), content: (*text).to_owned() }]).unwrap();
            let results = memory.merge_facts(&caller, &facts, "user").unwrap();
            let events: Vec<MergeEvent> = results.iter().map(|r| r.event).filter(|e| *e != MergeEvent::None).collect();
            let wanted: Vec<MergeEvent> = expected.iter().copied().filter(|e| *e != MergeEvent::None).collect();
            assert_eq!(events, wanted, "{text}: {results:?}");
            all.push(results);
        }
        (memory, caller, all)
    }

    fn active(memory: &Memory, caller: &Caller) -> Vec<String> {
        memory.known(caller).unwrap().into_iter().map(|k| k.content).collect()
    }

    use MergeEvent::{Add, Delete, None as Nothing, Update};

    #[test]
    fn a_new_value_in_the_same_slot_updates_in_three_languages() {
        for turns in [
            [("I live in Portland.", &[Add][..]), ("Big news: we just moved to Denver!", &[Update][..])],
            [("我最喜欢的运动是羽毛球。", &[Add][..]), ("我现在最喜欢的运动变成游泳了。", &[Update][..])],
            [("エディタはVimを使っています。", &[Add][..]), ("最近VS Codeに乗り換えました。", &[Update][..])],
        ] {
            let (memory, caller, _) = conversation(&turns);
            assert_eq!(active(&memory, &caller).len(), 1, "{turns:?}");
        }
    }

    #[test]
    fn a_cessation_deletes_the_fact_it_names_and_leaves_the_others() {
        for turns in [
            [("I play the piano. I also have a beagle.", &[Add, Add][..]), ("Honestly I don't play piano anymore.", &[Delete][..])],
            [("我每周去三次健身房，另外我还在学吉他。", &[Add, Add][..]), ("健身房我已经不去了。", &[Delete][..])],
            [
                ("週に二回ジムに通っています。それから、フランス語を勉強しています。", &[Add, Add][..]),
                ("ジムはもう退会しました。", &[Delete][..]),
            ],
        ] {
            let (memory, caller, results) = conversation(&turns);
            assert_eq!(active(&memory, &caller).len(), 1, "{turns:?}");
            let deleted = results[1][0].id.clone().unwrap();
            let history = memory.history(&caller, &deleted).unwrap();
            assert_eq!(history.chain[0].status, Status::Negated, "kept, marked false");
        }
    }

    #[test]
    fn the_same_fact_in_other_words_is_known_in_three_languages() {
        for turns in [
            [("I'm vegetarian.", &[Add][..]), ("Like I mentioned, I don't eat meat.", &[Nothing][..])],
            [("我在深圳工作。", &[Add][..]), ("对，我是在深圳上班的。", &[Nothing][..])],
            [("横浜に住んでいます。", &[Add][..]), ("住まいは横浜です。", &[Nothing][..])],
        ] {
            let (memory, caller, _) = conversation(&turns);
            assert_eq!(active(&memory, &caller).len(), 1, "{turns:?}");
        }
    }

    #[test]
    fn another_purpose_or_another_allergy_is_added_beside() {
        for turns in [
            [("I prefer concise Python examples.", &[Add][..]), ("For CLIs I prefer Go, though.", &[Add][..])],
            [("我对花粉过敏。", &[Add][..]), ("另外，我对青霉素也过敏。", &[Add][..])],
            [("辛い食べ物が好きです。", &[Add][..]), ("甘いものも大好きです。", &[Add][..])],
        ] {
            let (memory, caller, _) = conversation(&turns);
            assert_eq!(active(&memory, &caller).len(), 2, "{turns:?}");
        }
    }

    #[test]
    fn corrections_replace_what_they_correct() {
        let (memory, caller, results) = conversation(&[("My daughter is 7.", &[Add]), ("Actually, she turned 8 last week.", &[Update])]);
        assert_eq!(active(&memory, &caller), ["Daughter turned 8 last week"], "the pronoun names the daughter");
        assert!(results[1][0].why.as_deref().unwrap_or_default().contains("age"), "{:?}", results[1][0].why);
        let (memory, caller, _) =
            conversation(&[("My team uses GitHub for code review.", &[Add]), ("Sorry, I meant GitLab, not GitHub.", &[Update])]);
        assert_eq!(active(&memory, &caller), ["Team uses GitLab for code review"]);
        let (memory, caller, _) = conversation(&[("其实她已经六岁了", &[Add])]);
        assert_eq!(active(&memory, &caller).len(), 1);
        let (memory, caller, _) =
            conversation(&[("誕生日は3月5日です。", &[Add]), ("実は、誕生日は3月15日でした。すみません。", &[Update])]);
        assert_eq!(active(&memory, &caller), ["誕生日は3月15日でした"]);
    }

    #[test]
    fn a_dry_run_decides_without_writing() {
        let (memory, caller, _) = conversation(&[("I live in Portland.", &[Add])]);
        let facts = vec!["we just moved to Denver".to_owned()];
        let planned = memory.merge_facts_with(&caller, &facts, "user", true).unwrap();
        assert_eq!(planned[0].event, Update);
        assert_eq!(planned[0].previous_memory.as_deref(), Some("Lives in Portland"));
        assert!(planned[0].why.as_deref().unwrap_or_default().contains("home"), "{planned:?}");
        assert_eq!(active(&memory, &caller), ["Lives in Portland"]);
    }
}

#[cfg(test)]
mod older {
    use super::*;
    use crate::extract::{Extractor, Message, RuleExtractor};
    use crate::scope::Scope;

    /// With the models: a scope holding more memories than the page a
    /// merge reads newest first. A new value for a slot, a restatement and
    /// a cessation of the scope's first memory still find it, in three
    /// languages, and the fillers after it are left as they were.
    #[test]
    fn a_fact_about_a_memory_older_than_the_newest_page_still_finds_it() {
        use MergeEvent::{Add, Delete, None as Nothing, Update};
        let memory = super::tests::with_models();
        let cases = [
            ("en", "I live in Portland.", "Big news: we just moved to Denver!", Update),
            ("en-same", "I'm vegetarian.", "Like I mentioned, I don't eat meat.", Nothing),
            ("zh", "我最喜欢的运动是羽毛球。", "我现在最喜欢的运动变成游泳了。", Update),
            ("ja", "エディタはVimを使っています。", "最近VS Codeに乗り換えました。", Update),
            ("ja-stop", "週に二回ジムに通っています。", "ジムはもう退会しました。", Delete),
        ];
        let filler = |name: &str, i: usize| match &name[..2] {
            "zh" => format!("构建步骤{i}生成文件 build-{i}.tar"),
            "ja" => format!("ビルド手順{i}は成果物 build-{i}.tar を作ります"),
            _ => format!("Build step {i} writes the artifact build-{i}.tar"),
        };
        let fillers = super::super::read::MAX_PAGE + 5;
        for (name, first, later, expected) in cases {
            let caller = Caller::new(Scope::tenant("t").with_workspace("u").with_repository(name), "test");
            let chat = |text: &str| RuleExtractor.extract(&[Message { role: "user".to_owned(), content: text.to_owned() }]).unwrap();
            let added = memory.merge_facts(&caller, &chat(first), "user").unwrap();
            assert_eq!(added.iter().map(|r| r.event).collect::<Vec<_>>(), [Add], "{name}: {added:#?}");
            let oldest = added[0].id.clone().unwrap();
            let requests = (0..fillers).map(|i| MemorizeRequest::new(filler(name, i)).with_source("user")).collect();
            assert!(memory.memorize_many(&caller, requests).unwrap().iter().all(|o| o.effect == Effect::Applied));
            assert!(memory.known(&caller).unwrap().iter().all(|k| k.id != oldest), "{name}: the first memory is past the page");
            let results = memory.merge_facts(&caller, &chat(later), "user").unwrap();
            assert_eq!(results.iter().map(|r| r.event).collect::<Vec<_>>(), [expected], "{name}: {results:#?}");
            let active = memory.list_atoms(&caller, &known_filter(&caller), None, 1).unwrap().total;
            match expected {
                Nothing => {
                    assert_eq!(results[0].id.as_deref(), Some(oldest.as_str()), "{name}");
                    assert_eq!(active, fillers + 1, "{name}: nothing added");
                }
                Update => {
                    assert_eq!(results[0].previous_memory.as_deref(), Some(added[0].memory.as_str()), "{name}: {results:#?}");
                    assert_eq!(active, fillers + 1, "{name}: the first memory replaced, not joined");
                }
                _ => assert_eq!(active, fillers, "{name}: the first memory no longer holds"),
            }
        }
    }
}

#[cfg(test)]
mod batched {
    use super::*;
    use crate::extract::{Extractor, Message, RuleExtractor};
    use crate::scope::Scope;

    /// What a merge did, with ids replaced by the position of the fact that
    /// first named them (`None`: a memory from before the merge).
    pub(crate) fn shape(results: &[MergeResult]) -> Vec<(MergeEvent, String, Option<String>, Option<usize>)> {
        results
            .iter()
            .map(|r| {
                let first = r.id.as_ref().and_then(|id| results.iter().position(|o| o.id.as_ref() == Some(id)));
                (r.event, r.memory.clone(), r.previous_memory.clone(), first)
            })
            .collect()
    }

    fn facts(messages: &[&str]) -> Vec<String> {
        let messages: Vec<Message> = messages.iter().map(|m| Message { role: "user".to_owned(), content: (*m).to_owned() }).collect();
        RuleExtractor.extract(&messages).unwrap()
    }

    #[test]
    fn one_add_decides_each_fact_against_the_facts_before_it() {
        let mut said = facts(&[
            "Hi! I live in Portland.",
            "I play the piano. I also have a beagle.",
            "Big news: we just moved to Denver!",
            "Honestly I don't play piano anymore.",
            "Thanks a lot!",
            "我喜欢喝咖啡。",
            "我不再喜欢喝咖啡。",
            "私は納豆が好きです。",
            "エディタはVimを使っています。",
            "最近VS Codeに乗り換えました。",
        ]);
        // A fact said twice in one add (the extractor keeps one of two in one chat).
        said.insert(3, said[1].clone());
        let scope = || Scope::tenant("t").with_workspace("u").with_repository("agent");
        let caller = Caller::new(scope(), "test");
        // The same facts, one merge each.
        let alone = Memory::open_in_memory().unwrap();
        let one_by_one: Vec<MergeResult> =
            said.iter().flat_map(|f| alone.merge_facts(&caller, std::slice::from_ref(f), "user").unwrap()).collect();
        let together = Memory::open_in_memory().unwrap();
        let batched = together.merge_facts(&caller, &said, "user").unwrap();
        assert_eq!(shape(&batched), shape(&one_by_one));
        let events: Vec<MergeEvent> = batched.iter().map(|r| r.event).collect();
        use MergeEvent::{Add, Delete, None as Nothing, Update};
        assert_eq!(events, [Add, Add, Add, Nothing, Update, Delete, Add, Delete, Add, Add, Update], "{batched:#?}");
        for r in &batched {
            let named = format!("{:?} {:?}", r.id, r.why);
            assert!(!named.contains(UNWRITTEN), "a result names a fact before it was written: {r:?}");
        }
        // The piano the cessation ended is the one the add wrote.
        assert_eq!(batched[5].id, batched[1].id);
        assert_eq!(batched[3].id, batched[1].id, "the repeated fact is the written one");
        let active = |memory: &Memory| {
            let mut contents: Vec<String> = memory.known(&caller).unwrap().into_iter().map(|k| k.content).collect();
            contents.sort();
            contents
        };
        assert_eq!(active(&together), active(&alone));
        // The history of the update holds the memory the same add wrote.
        let head = batched[4].id.clone().unwrap();
        assert_eq!(together.history(&caller, &head).unwrap().chain.len(), 2);
    }

    #[test]
    fn an_add_memorize_declines_is_not_taken_for_written() {
        // A memory of another branch of the repository: the merge does not
        // see it (exactly its scope), memorize's dedup does.
        let scope = || Scope::tenant("t").with_workspace("u").with_repository("agent");
        let caller = Caller::new(scope().with_branch("main"), "test");
        let elsewhere = Caller::new(scope().with_branch("other"), "test");
        let said = facts(&["I play the piano.", "I also have a beagle.", "Honestly I don't play piano anymore.", "I play the piano."]);
        let mut shapes = Vec::new();
        for together in [false, true] {
            let memory = Memory::open_in_memory().unwrap();
            let seeded = memory.memorize(&elsewhere, MemorizeRequest::new("Plays the piano")).unwrap();
            let results: Vec<MergeResult> = if together {
                memory.merge_facts(&caller, &said, "user").unwrap()
            } else {
                said.iter().flat_map(|f| memory.merge_facts(&caller, std::slice::from_ref(f), "user").unwrap()).collect()
            };
            assert_eq!(results[0].id, seeded.atom_id, "{results:#?}");
            assert_eq!(results[0].event, MergeEvent::None, "memorize found it: {results:#?}");
            assert!(results[0].why.as_deref().unwrap_or_default().contains("already stored"), "{results:#?}");
            assert!(results.iter().all(|r| !r.id.as_deref().unwrap_or_default().starts_with(UNWRITTEN)), "{results:#?}");
            shapes.push(shape(&results));
        }
        assert_eq!(shapes[1], shapes[0]);
    }

    #[test]
    fn a_dry_run_still_decides_each_fact_against_the_stored_memories_only() {
        let memory = Memory::open_in_memory().unwrap();
        let caller = Caller::new(Scope::tenant("t"), "test");
        let said = facts(&["I live in Portland.", "We just moved to Denver!"]);
        let planned = memory.merge_facts_with(&caller, &said, "user", true).unwrap();
        assert_eq!(planned.iter().map(|r| r.event).collect::<Vec<_>>(), [MergeEvent::Add, MergeEvent::Add]);
        assert!(memory.known(&caller).unwrap().is_empty(), "nothing written");
    }
}

#[cfg(test)]
mod hostile {
    use super::*;
    use crate::scope::Scope;

    #[test]
    fn odd_text_merges_without_panicking() {
        let memory = Memory::open_in_memory().unwrap();
        let caller = Caller::new(Scope::tenant("t").with_workspace("u"), "test");
        let facts: Vec<String> = [
            "My daughter is 7",
            "SHE\u{0130} turned 8",
            "she turned \u{212A}",
            "I meant \u{212A}, not 7",
            "Sorry, I meant GİtLab, not 7",
            "I don't \u{212A} anymore",
            "İ switched from \u{212A} to Vim",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let results = memory.merge_facts(&caller, &facts, "user").unwrap();
        assert_eq!(results.len(), facts.len());
        assert!(memory.merge_facts_with(&caller, &facts, "user", true).is_ok());
    }
}

#[cfg(test)]
mod ahead {
    use super::*;
    use crate::extract::{Extractor, Message, RuleExtractor};
    use crate::scope::Scope;

    /// With the models: the texts a merge compares are embedded before its
    /// decisions, on every core, so no decision waits for one. That holds
    /// when the model finds a paraphrase the rehearsal took for an ADD (it
    /// then embedded a text too many, not one too few), in a second add
    /// against the first's memories, and in a dry run.
    #[test]
    fn every_text_a_merge_compares_is_embedded_before_it_decides() {
        let memory = super::tests::with_models();
        let model = &memory.indexes().semantic()[0];
        let caller = Caller::new(Scope::tenant("t").with_workspace("u").with_repository("agent"), "test");
        let chat = |lines: &[&str]| {
            let messages: Vec<Message> = lines.iter().map(|m| Message { role: "user".to_owned(), content: (*m).to_owned() }).collect();
            RuleExtractor.extract(&messages).unwrap()
        };
        let first = chat(&[
            "Hi! I want to learn pottery with Ana someday.",
            "我想和小李一起学书法。",
            "我想和小李一起学习书法。",
            "ケンジさんはベランダでバジルを育てています。",
            "ベランダでケンジさんがバジルを育てています。",
            "My neighbour Tom grows tomatoes on the roof.",
            "Thanks!",
        ]);
        let results = memory.merge_facts(&caller, &first, "user").unwrap();
        let by_model = results.iter().filter(|r| r.why.as_deref().is_some_and(|w| w.contains("cosine"))).count();
        assert!(by_model >= 1, "the model decided a fact: {results:#?}");
        assert_eq!(model.asked_uncached(), 0, "{results:#?}");
        let second = chat(&["Tom keeps bees in the garden.", "私は毎朝コーヒーを飲みます。", "I keep my kayak in the attic."]);
        let planned = memory.merge_facts_with(&caller, &second, "user", true).unwrap();
        assert!(planned.iter().all(|r| r.event == MergeEvent::Add), "{planned:#?}");
        let results = memory.merge_facts(&caller, &second, "user").unwrap();
        assert_eq!(results.iter().map(|r| r.event).collect::<Vec<_>>(), [MergeEvent::Add; 3], "{results:#?}");
        assert_eq!(model.asked_uncached(), 0);
    }

    /// With the models: the memories a merge writes take their vectors
    /// from the passages embedded ahead, with the compared texts, as each
    /// is stored: redacted, attributed to a custom source, and only for the
    /// models of its language; each is the model's own vector of that text.
    #[test]
    fn the_memories_a_merge_writes_take_their_passages_from_the_pass_ahead() {
        let memory = super::tests::with_models();
        let caller = Caller::new(Scope::tenant("t").with_workspace("u").with_repository("passages"), "test");
        let facts: Vec<String> = [
            "I keep my road bike in the garage.",
            "My AWS key is AKIAIOSFODNN7EXAMPLE and I keep the bike lock code in the vault.",
            "我想和李伟一起学书法。",
            "ケンジさんはベランダでバジルを育てています。",
        ]
        .map(str::to_owned)
        .to_vec();
        let models = memory.indexes().semantic();
        let before: Vec<u64> = models.iter().map(|s| s.ahead_counts().0).collect();
        let results = memory.merge_facts_with(&caller, &facts, "Ana", false).unwrap();
        assert!(results.iter().all(|r| r.event == MergeEvent::Add), "{results:#?}");
        for (model, before) in models.iter().zip(before) {
            let mut understood = 0;
            for result in &results {
                let id: crate::atom::AtomId = result.id.as_deref().unwrap().parse().unwrap();
                let atom = memory.atom("t", id).unwrap().unwrap();
                let text = crate::index::attributed_text(&atom).unwrap();
                assert!(text.starts_with("Ana: ") && !text.contains("AKIA"), "{text}");
                let stored = model.vectors.vector_of(id, "t");
                if !model.understands(&atom.language) {
                    assert!(stored.is_none(), "{}: {text}", model.embedder.id());
                    continue;
                }
                understood += 1;
                let own = model.embedder.embed_passages(&[&text]).unwrap().remove(0);
                let cosine: f32 = stored.unwrap().iter().zip(&own).map(|(a, b)| a * b).sum();
                assert!(cosine > 0.99, "{}: {text}: {cosine}", model.embedder.id());
            }
            assert!(understood > 0);
            assert_eq!(model.ahead_counts().0 - before, understood, "{}: every vector from ahead", model.embedder.id());
        }
    }

    /// A model that notes every call's texts (vectors from a hash of each).
    struct Recorder(std::sync::Mutex<Vec<(&'static str, Vec<String>)>>);

    impl Recorder {
        /// Pseudo-random from the text's hash: texts that differ are far apart.
        fn vector(text: &str) -> Vec<f32> {
            let mut state = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
            let mut v: Vec<f32> = (0..32)
                .map(|_| {
                    state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    f32::from((state >> 48) as u16) / 32768.0 - 1.0
                })
                .collect();
            crate::index::embed::normalize(&mut v);
            v
        }

        fn texts(&self, kind: &str) -> Vec<String> {
            self.0.lock().unwrap().iter().filter(|(k, _)| *k == kind).flat_map(|(_, t)| t.clone()).collect()
        }
    }

    impl crate::index::embed::Embedder for Recorder {
        fn id(&self) -> &str {
            "recorder"
        }
        fn dims(&self) -> usize {
            32
        }
        fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, crate::index::embed::EmbedError> {
            self.0.lock().unwrap().push(("passages", texts.iter().map(|t| (*t).to_owned()).collect()));
            Ok(texts.iter().map(|t| Recorder::vector(t)).collect())
        }
        fn embed_query(&self, text: &str) -> Result<Vec<f32>, crate::index::embed::EmbedError> {
            self.0.lock().unwrap().push(("query", vec![text.to_owned()]));
            Ok(Recorder::vector(text))
        }
        fn embed_comparable_and_passages(
            &self,
            compared: &[&str],
            passages: &[&str],
        ) -> Result<crate::index::embed::ComparedAndPassages, crate::index::embed::EmbedError> {
            self.0.lock().unwrap().push(("ahead", passages.iter().map(|t| (*t).to_owned()).collect()));
            Ok((compared.iter().map(|t| Recorder::vector(t)).collect(), passages.iter().map(|t| Recorder::vector(t)).collect()))
        }
    }

    /// The write embeds no passage the pass ahead embedded; a restatement
    /// (NONE before any model is asked) and a dry run embed none ahead;
    /// passages no write takes (the model found a paraphrase) are dropped,
    /// a few batches kept at most; a secret never reaches the model.
    #[test]
    fn the_write_embeds_no_passage_twice_and_a_dry_run_none() {
        let recorder = Arc::new(Recorder(std::sync::Mutex::new(Vec::new())));
        let options = super::super::MemoryOptions {
            embedder: super::super::EmbedderChoice::Given(Arc::clone(&recorder) as Arc<dyn crate::index::embed::Embedder>),
            ..super::super::MemoryOptions::default()
        };
        let memory = Memory::open_with(None, options).unwrap();
        let caller = Caller::new(Scope::tenant("t").with_workspace("u"), "test");
        let facts = |lines: &[&str]| lines.iter().map(|l| (*l).to_owned()).collect::<Vec<String>>();
        let first = facts(&[
            "I keep my road bike in the garage.",
            "My neighbour Tom grows tomatoes on the roof.",
            "token AKIAIOSFODNN7EXAMPLE is for the bike shop",
        ]);
        let results = memory.merge_facts_with(&caller, &first, "user", false).unwrap();
        assert!(results.iter().all(|r| r.event == MergeEvent::Add), "{results:#?}");
        let embedded = [recorder.texts("ahead"), recorder.texts("passages")].concat();
        for result in &results {
            let id: crate::atom::AtomId = result.id.as_deref().unwrap().parse().unwrap();
            let text = crate::index::attributed_text(&memory.atom("t", id).unwrap().unwrap()).unwrap();
            assert_eq!(embedded.iter().filter(|t| **t == text).count(), 1, "{text} embedded once: {embedded:?}");
            assert!(recorder.texts("ahead").contains(&text), "{text}: ahead");
        }
        assert!(recorder.0.lock().unwrap().iter().all(|(_, texts)| texts.iter().all(|t| !t.contains("AKIA"))));
        // The same facts again (but the one whose stored text is redacted,
        // so no longer the same words): NONE without the model, nothing
        // embedded.
        let calls = recorder.0.lock().unwrap().len();
        let again = memory.merge_facts_with(&caller, &first[..2], "user", false).unwrap();
        assert!(again.iter().all(|r| r.event == MergeEvent::None), "{again:#?}");
        let after = recorder.0.lock().unwrap().len();
        assert_eq!(after, calls, "{:?}", &recorder.0.lock().unwrap()[calls..]);
        // A dry run embeds its compared texts but no passage.
        let planned = memory.merge_facts_with(&caller, &facts(&["I keep my kayak in the attic."]), "user", true).unwrap();
        assert_eq!(planned[0].event, MergeEvent::Add);
        let dry: Vec<(&str, Vec<String>)> = recorder.0.lock().unwrap()[calls..].to_vec();
        assert!(dry.iter().all(|(kind, texts)| *kind == "query" || texts.is_empty()), "{dry:?}");
        // The server's warm-up reads facts as a merge does, and neither
        // embeds nor writes anything.
        let calls = recorder.0.lock().unwrap().len();
        let audit = memory.stats(&caller).map(|s| format!("{s:?}")).ok();
        memory.warm_up_merge(&facts(&["I run 5 km every Sunday with Ana.", "我每周日和老李跑五公里。", "token AKIAIOSFODNN7EXAMPLE"]));
        assert_eq!(recorder.0.lock().unwrap().len(), calls);
        assert_eq!(memory.stats(&caller).map(|s| format!("{s:?}")).ok(), audit);
        // Passages no write takes (here started without a write): the
        // oldest batches go, a few are kept.
        let model = &memory.indexes().semantic()[0];
        for n in 0..6 {
            let passages = [crate::index::AheadPassage::new("user", &format!("Never written {n}"))];
            memory.indexes().embed_ahead(&[], &passages).unwrap();
        }
        assert_eq!(model.ahead_counts().1, crate::index::AHEAD_BATCHES);
    }

    #[test]
    fn the_rehearsal_names_what_each_decision_would_compare() {
        let readings = Readings::default();
        let known: Vec<Known> = ["Plays the piano", "Lives in Portland", "Grows basil on the balcony"]
            .iter()
            .enumerate()
            .map(|(i, c)| Known::new(&readings, format!("01K{i}"), (*c).to_owned()))
            .collect();
        let facts: Vec<String> = [
            "I want to learn pottery with Ana someday",
            "we just moved to Denver",
            "I keep my road bike in the garage 2 days a week",
            "My neighbour grows tomatoes on the roof",
        ]
        .iter()
        .map(|f| (*f).to_owned())
        .collect();
        let read: Vec<Fact> = facts.iter().map(|f| Fact::read(f)).collect();
        let asked = compared_texts(&readings, &read, &known, false);
        let stored = ["Plays the piano", "Lives in Portland", "Grows basil on the balcony"];
        // The first fact (as it would be stored) with every memory naming
        // no number, but Portland (it names Ana, the memory a place the
        // fact lacks); the move updates a slot (no model); the bike names a
        // number no memory names; the neighbour's fact with the memories
        // then, newest first: the move in the speaker's words, in place of
        // Portland, and the pottery, by the very text it was compared by.
        let (pottery, neighbour) = ("Wants to learn pottery with Ana someday", "Neighbour grows tomatoes on the roof");
        let wanted: Vec<String> = [
            pottery,
            "Plays the piano",
            "Grows basil on the balcony",
            neighbour,
            "we just moved to Denver",
            pottery,
            "Plays the piano",
            "Grows basil on the balcony",
        ]
        .map(str::to_owned)
        .to_vec();
        assert_eq!(asked, wanted);
        // A dry run decides each fact against the stored memories only.
        let dry = compared_texts(&readings, &read, &known, true);
        let mut wanted: Vec<String> = [pottery, "Plays the piano", "Grows basil on the balcony", neighbour].map(str::to_owned).to_vec();
        wanted.extend(stored.map(str::to_owned));
        assert_eq!(dry, wanted);
    }
}
