//! Entity extraction: the technical names, files, versions, people and
//! projects an atom mentions, in English, Chinese and Japanese. Entities link
//! atoms in the graph, so precision matters more than recall here.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use unicode_normalization::UnicodeNormalization;

use super::{is_han, is_katakana};

/// What kind of thing an entity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntityKind {
    /// A file name or path.
    File,
    /// A version number.
    Version,
    /// A technical name: product, library, identifier, acronym.
    Technical,
    /// A person named with a title or honorific (王先生, 田中さん, 老李).
    Person,
    /// A capitalised proper name in Latin script: a person, place or product.
    Name,
    /// A quoted name: a project, a title, a term.
    Project,
    /// A katakana term (Japanese loanword).
    Term,
}

impl EntityKind {
    /// The literal stored in RDF.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::File => "file",
            EntityKind::Version => "version",
            EntityKind::Technical => "technical",
            EntityKind::Person => "person",
            EntityKind::Name => "name",
            EntityKind::Project => "project",
            EntityKind::Term => "term",
        }
    }
}

/// One entity mention.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entity {
    /// The name as written.
    pub name: String,
    /// The key entities are merged on: NFKC, lowercase.
    pub key: String,
    /// What it is.
    pub kind: EntityKind,
}

impl Entity {
    fn new(name: &str, kind: EntityKind) -> Entity {
        let name = name.trim().to_owned();
        let key = name.nfkc().collect::<String>().to_lowercase();
        Entity { name, key, kind }
    }
}

static FILE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:[A-Za-z0-9_.\-~]+/)*[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*\.(?:rs|py|pyi|ts|tsx|js|jsx|mjs|go|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|scala|md|toml|yaml|yml|json|jsonl|sql|sh|bash|txt|lock|cfg|ini|env|html|css|scss|proto|tf|xml|csv|ttl|rq|graphql|dockerfile|gradle|vue|svelte)\b")
        .expect("static regex")
});
static VERSION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bv?\d+(?:\.\d+){1,3}(?:-[0-9A-Za-z.]+)?\b|\bv\d+\b").expect("static regex"));
static PRODUCT_VERSION: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^ v?\d+(?:\.\d+)*\b").expect("static regex"));
static BACKTICK: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"`([^`\n]{2,80})`").expect("static regex"));
static QUOTED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[「『《【“]([^」』》】”\n]{2,40})[」』》】”]").expect("static regex"));
static LATIN_TOKEN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z][A-Za-z0-9_+#]*(?:(?:::|\.|-)[A-Za-z0-9_+#]+)*").expect("static regex"));

struct PersonMarkers {
    zh_suffixes: Vec<String>,
    ja_suffixes: Vec<String>,
    zh_prefixes: Vec<String>,
    zh_surnames: HashSet<char>,
    zh_before_person: HashSet<char>,
}

static PERSON_MARKERS: LazyLock<PersonMarkers> = LazyLock::new(|| {
    let mut markers = PersonMarkers {
        zh_suffixes: Vec::new(),
        ja_suffixes: Vec::new(),
        zh_prefixes: Vec::new(),
        zh_surnames: HashSet::new(),
        zh_before_person: HashSet::new(),
    };
    let mut section = "";
    for line in include_str!("../../lexicon/person_markers.txt").lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name;
            continue;
        }
        // A section not named here is skipped, line by line.
        match section {
            "zh" => markers.zh_suffixes.push(line.to_owned()),
            "ja" => markers.ja_suffixes.push(line.to_owned()),
            "zh-prefix" => markers.zh_prefixes.push(line.to_owned()),
            "zh-surname" => markers.zh_surnames.extend(line.chars()),
            "zh-before-person" => markers.zh_before_person.extend(line.chars()),
            _ => {}
        }
    }
    markers
});

static STOPWORDS: LazyLock<HashSet<String>> = LazyLock::new(|| {
    include_str!("../../lexicon/entity_stopwords.txt")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .map(str::to_lowercase)
        .collect()
});

/// Extracts the entities `text` mentions, without duplicates (by key), in
/// order of first appearance.
pub fn extract_entities(text: &str) -> Vec<Entity> {
    // Full-width Latin letters and digits become ASCII so that "ＰｏｓｔｇｒｅＳＱＬ"
    // and "PostgreSQL" are found (and merged) alike.
    let normalized: String = text.nfkc().collect();
    let text = normalized.as_str();
    let mut found: Vec<Entity> = Vec::new();
    let push = |entity: Entity, found: &mut Vec<Entity>| {
        if entity.key.chars().count() >= 2 && !found.iter().any(|e| e.key == entity.key) {
            found.push(entity);
        }
    };

    let mut covered: Vec<(usize, usize)> = Vec::new();
    for m in FILE.find_iter(text) {
        push(Entity::new(m.as_str(), EntityKind::File), &mut found);
        covered.push((m.start(), m.end()));
    }
    for caps in BACKTICK.captures_iter(text) {
        if let Some(inner) = caps.get(1) {
            push(Entity::new(inner.as_str(), EntityKind::Technical), &mut found);
            covered.push((inner.start(), inner.end()));
        }
    }
    for caps in QUOTED.captures_iter(text) {
        if let Some(inner) = caps.get(1) {
            push(Entity::new(inner.as_str(), EntityKind::Project), &mut found);
        }
    }
    for m in VERSION.find_iter(text) {
        if !overlaps(&covered, m.start(), m.end()) {
            push(Entity::new(m.as_str(), EntityKind::Version), &mut found);
        }
    }
    latin_names(text, &covered, &mut |e| push(e, &mut found));
    cjk_people(text, &mut |e| push(e, &mut found));
    katakana_terms(text, &mut |e| push(e, &mut found));
    found
}

fn overlaps(covered: &[(usize, usize)], start: usize, end: usize) -> bool {
    covered.iter().any(|&(s, e)| start < e && s < end)
}

/// Technical names and capitalised names in Latin script.
fn latin_names(text: &str, covered: &[(usize, usize)], push: &mut dyn FnMut(Entity)) {
    let tokens: Vec<regex::Match<'_>> = LATIN_TOKEN.find_iter(text).collect();
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i];
        if overlaps(covered, token.start(), token.end()) {
            i += 1;
            continue;
        }
        let word = token.as_str();
        if is_technical(word) {
            push(Entity::new(word, EntityKind::Technical));
            // "PostgreSQL 16": the product with its major version as well.
            if let Some(version) = PRODUCT_VERSION.find(&text[token.end()..]) {
                let end = token.end() + version.end();
                push(Entity::new(&text[token.start()..end], EntityKind::Version));
            }
            i += 1;
            continue;
        }
        if is_capitalised_name(word) {
            // Join a run of capitalised words separated by single spaces:
            // "Caroline Smith", "New York".
            let mut end = i;
            while end + 1 < tokens.len()
                && is_capitalised_name(tokens[end + 1].as_str())
                && text[tokens[end].end()..tokens[end + 1].start()] == *" "
            {
                end += 1;
            }
            let name = &text[token.start()..tokens[end].end()];
            push(Entity::new(name, EntityKind::Name));
            i = end + 1;
            continue;
        }
        i += 1;
    }
}

/// CamelCase, snake_case, ALLCAPS acronyms, names with digits or `::`.
fn is_technical(word: &str) -> bool {
    let letters = word.chars().filter(|c| c.is_ascii_alphabetic()).count();
    if letters == 0 || STOPWORDS.contains(&word.to_lowercase()) {
        return false;
    }
    let upper = word.chars().filter(char::is_ascii_uppercase).count();
    let has_digit = word.chars().any(|c| c.is_ascii_digit());
    let inner_upper = word.chars().skip(1).any(|c| c.is_ascii_uppercase());
    let first_lower = word.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    word.contains("::")
        || word.contains('_')
        || (inner_upper && word.len() >= 3 && (first_lower || upper < word.len()))
        || (upper == letters && letters >= 2 && word.len() <= 12)
        || (has_digit && letters >= 2)
        || (word.contains('.') && word.split('.').all(|part| part.len() >= 2))
        || (word.contains('-') && word.split('-').all(|part| part.len() >= 2))
}

fn is_capitalised_name(word: &str) -> bool {
    let mut chars = word.chars();
    let Some(first) = chars.next() else { return false };
    first.is_ascii_uppercase()
        && word.len() >= 2
        && chars.all(|c| c.is_ascii_lowercase() || c == '\'' || c == '-')
        && !STOPWORDS.contains(&word.to_lowercase())
}

/// Chinese and Japanese people: a name followed by a title or honorific
/// (王先生, 田中さん) or preceded by 老/小 (老王).
fn cjk_people(text: &str, push: &mut dyn FnMut(Entity)) {
    let markers = &*PERSON_MARKERS;
    let chars: Vec<char> = text.chars().collect();
    let name_char = |c: char| is_han(c) || is_katakana(c);
    for (idx, _) in chars.iter().enumerate() {
        let rest: String = chars[idx..].iter().take(4).collect();
        // Japanese honorifics: take the kanji/katakana run before them (≤ 4).
        if let Some(suffix) = markers.ja_suffixes.iter().find(|s| rest.starts_with(s.as_str())) {
            let start = back_run(&chars, idx, 4, name_char);
            if start < idx && !(suffix == "先生" && chars[start..idx].iter().all(|c| is_han(*c)) && !has_kana(text)) {
                push(Entity::new(&chars[start..idx].iter().collect::<String>(), EntityKind::Person));
                continue;
            }
        }
        // Chinese titles: start the name at a common surname within 3 chars.
        if markers.zh_suffixes.iter().any(|s| rest.starts_with(s.as_str())) && !has_kana(text) {
            let lower = idx.saturating_sub(3);
            if let Some(start) = (lower..idx).find(|&p| markers.zh_surnames.contains(&chars[p]))
                && chars[start..idx].iter().all(|c| is_han(*c))
            {
                // A lone surname keeps its title: 王先生, not 王.
                let end = if idx - start == 1 { (idx + 2).min(chars.len()) } else { idx };
                push(Entity::new(&chars[start..end].iter().collect::<String>(), EntityKind::Person));
            }
        }
        // 老王 / 小李: at a word's start, or after a word that takes a
        // person (和小李, 跟老王), not inside a word (吃小龙虾, 是老方法).
        if markers.zh_prefixes.iter().any(|p| rest.starts_with(p.as_str()))
            && let Some(&next) = chars.get(idx + 1)
            && markers.zh_surnames.contains(&next)
            && (idx == 0 || !is_han(chars[idx - 1]) || markers.zh_before_person.contains(&chars[idx - 1]))
            && !has_kana(text)
        {
            push(Entity::new(&chars[idx..idx + 2].iter().collect::<String>(), EntityKind::Person));
        }
    }
}

fn has_kana(text: &str) -> bool {
    text.chars().any(super::is_kana)
}

fn back_run(chars: &[char], end: usize, max: usize, accept: impl Fn(char) -> bool) -> usize {
    let mut start = end;
    while start > 0 && end - start < max && accept(chars[start - 1]) {
        start -= 1;
    }
    start
}

/// Katakana runs of three or more characters (loanwords, product names).
fn katakana_terms(text: &str, push: &mut dyn FnMut(Entity)) {
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if is_katakana(c) && c != '・' {
            run.push(c);
        } else {
            if run.chars().count() >= 3 {
                push(Entity::new(&run, EntityKind::Term));
            }
            run.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<String> {
        extract_entities(text).into_iter().map(|e| e.name).collect()
    }

    fn has(text: &str, name: &str, kind: EntityKind) {
        let found = extract_entities(text);
        assert!(found.iter().any(|e| e.name == name && e.kind == kind), "{name} ({kind:?}) not found in {text:?}: {found:?}");
    }

    #[test]
    fn english_technical_names_files_versions_people() {
        let text = "Caroline Smith fixed the NullPointer in src/login.py for HMG v3 using tokio::sync and PostgreSQL 16.2";
        has(text, "Caroline Smith", EntityKind::Name);
        has(text, "NullPointer", EntityKind::Technical);
        has(text, "src/login.py", EntityKind::File);
        has(text, "HMG", EntityKind::Technical);
        has(text, "v3", EntityKind::Version);
        has(text, "tokio::sync", EntityKind::Technical);
        has(text, "PostgreSQL", EntityKind::Technical);
        has(text, "PostgreSQL 16.2", EntityKind::Version);
        assert!(!names(text).iter().any(|n| n == "The" || n == "for"));
    }

    #[test]
    fn sentence_start_stopwords_are_not_names() {
        assert!(names("The build is green. It works.").is_empty());
        has("Melanie went camping with Caroline", "Melanie", EntityKind::Name);
        has("Melanie went camping with Caroline", "Caroline", EntityKind::Name);
    }

    #[test]
    fn chinese_entities() {
        let text = "本项目用 PostgreSQL 16 做主数据库，王先生负责《星火计划》，老李修了 login.py";
        has(text, "PostgreSQL", EntityKind::Technical);
        has(text, "王先生", EntityKind::Person);
        has(text, "星火计划", EntityKind::Project);
        has(text, "老李", EntityKind::Person);
        has(text, "login.py", EntityKind::File);
        // After a word that takes a person, not inside a word.
        has("我想和小李一起学书法", "小李", EntityKind::Person);
        has("周末跟老王去钓鱼，顺便给小陈带了书", "老王", EntityKind::Person);
        has("周末跟老王去钓鱼，顺便给小陈带了书", "小陈", EntityKind::Person);
        for text in ["我们晚上吃小龙虾", "这是老方法", "他是小白", "我的小黄车坏了"] {
            assert!(extract_entities(text).iter().all(|e| e.kind != EntityKind::Person), "{text}: {:?}", extract_entities(text));
        }
    }

    #[test]
    fn japanese_entities() {
        let text = "田中さんが「次世代基盤」で Redis のキャッシュサーバーを設定した";
        has(text, "田中", EntityKind::Person);
        has(text, "次世代基盤", EntityKind::Project);
        has(text, "Redis", EntityKind::Name);
        has(text, "キャッシュサーバー", EntityKind::Term);
    }

    #[test]
    fn keys_merge_case_and_width() {
        let a = extract_entities("Uses ＰｏｓｔｇｒｅＳＱＬ");
        let b = extract_entities("uses PostgreSQL");
        assert_eq!(a, b);
        assert_eq!(a[0].key, "postgresql");
    }
}
