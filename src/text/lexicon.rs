//! Epistemic, polarity and emotional-tone inference from the cue files in
//! `lexicon/`.

use std::sync::LazyLock;

use crate::atom::{Epistemic, Polarity};

/// One cue file, parsed.
#[derive(Debug, Default)]
struct CueSet {
    /// English cues as lowercase word sequences; `anchored` = sentence start only.
    english: Vec<(Vec<String>, bool)>,
    /// Chinese and Japanese substring cues.
    cjk: Vec<String>,
    /// Substrings blanked out before CJK matching.
    cjk_exceptions: Vec<String>,
    /// English word sequences blanked out before matching.
    english_exceptions: Vec<Vec<String>>,
}

impl CueSet {
    fn parse(text: &str) -> CueSet {
        let mut set = CueSet::default();
        let mut section = String::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
                continue;
            }
            let (exception, cue) = match line.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, line),
            };
            if section == "en" {
                let (anchored, cue) = match cue.strip_prefix('^') {
                    Some(rest) => (true, rest),
                    None => (false, cue),
                };
                let words: Vec<String> = english_words(cue);
                if exception {
                    set.english_exceptions.push(words);
                } else {
                    set.english.push((words, anchored));
                }
            } else if exception {
                set.cjk_exceptions.push(cue.to_owned());
            } else {
                set.cjk.push(cue.to_owned());
            }
        }
        set
    }

    /// How many cues match `text` (each counted once).
    fn hits(&self, text: &str) -> usize {
        let mut cjk_text = text.to_owned();
        for exception in &self.cjk_exceptions {
            cjk_text = cjk_text.replace(exception.as_str(), " ");
        }
        let cjk = self.cjk.iter().filter(|cue| cjk_text.contains(cue.as_str())).count();
        let words: Vec<Vec<String>> = sentences(text).map(english_words).collect();
        let english = self
            .english
            .iter()
            .filter(|(cue, anchored)| words.iter().any(|w| find_all(w, cue).into_iter().any(|start| !*anchored || start == 0)))
            .count();
        cjk + english
    }

    fn matches(&self, text: &str) -> bool {
        let mut cjk_text = text.to_owned();
        for exception in &self.cjk_exceptions {
            cjk_text = cjk_text.replace(exception.as_str(), " ");
        }
        if self.cjk.iter().any(|cue| cjk_text.contains(cue.as_str())) {
            return true;
        }
        for sentence in sentences(text) {
            let words = english_words(sentence);
            let mut blanked = vec![false; words.len()];
            for exception in &self.english_exceptions {
                for start in find_all(&words, exception) {
                    blanked[start..start + exception.len()].iter_mut().for_each(|b| *b = true);
                }
            }
            for (cue, anchored) in &self.english {
                let hit = find_all(&words, cue)
                    .into_iter()
                    .any(|start| (!*anchored || start == 0) && !blanked[start..start + cue.len()].iter().any(|b| *b));
                if hit {
                    return true;
                }
            }
        }
        false
    }
}

/// Lowercase words of English text; apostrophes are kept inside words and
/// typographic ones are folded to ASCII.
fn english_words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .replace(['\u{2019}', '\u{2018}'], "'")
        .split(|c: char| !(c.is_alphanumeric() || c == '\'') || super::is_cjk(c))
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

fn sentences(text: &str) -> impl Iterator<Item = &str> {
    text.split(['.', '!', '?', ';', '\n', '。', '！', '？', '；', ':', '：']).filter(|s| !s.trim().is_empty())
}

fn find_all(words: &[String], cue: &[String]) -> Vec<usize> {
    if cue.is_empty() || cue.len() > words.len() {
        return Vec::new();
    }
    (0..=words.len() - cue.len()).filter(|&i| words[i..i + cue.len()] == *cue).collect()
}

/// The emotional tone of a text, from the `lexicon/emotion_*.txt` cues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emotion {
    /// Happy, excited, proud …
    Joy,
    /// Sad, disappointed, lonely …
    Sadness,
    /// Nervous, worried, afraid …
    Fear,
    /// Angry, annoyed, frustrated …
    Anger,
}

static EMOTIONS: LazyLock<[(Emotion, CueSet); 4]> = LazyLock::new(|| {
    [
        (Emotion::Joy, CueSet::parse(include_str!("../../lexicon/emotion_joy.txt"))),
        (Emotion::Sadness, CueSet::parse(include_str!("../../lexicon/emotion_sadness.txt"))),
        (Emotion::Fear, CueSet::parse(include_str!("../../lexicon/emotion_fear.txt"))),
        (Emotion::Anger, CueSet::parse(include_str!("../../lexicon/emotion_anger.txt"))),
    ]
});

/// The dominant emotional tone of `text`: the category with the most cue
/// hits, if one has strictly more than every other.
pub fn infer_emotion(text: &str) -> Option<Emotion> {
    let mut counts: Vec<(Emotion, usize)> = EMOTIONS.iter().map(|(e, set)| (*e, set.hits(text))).collect();
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    match (counts.first(), counts.get(1)) {
        (Some((e, n)), Some((_, m))) if *n > 0 && n > m => Some(*e),
        _ => None,
    }
}

static NECESSARY: LazyLock<CueSet> = LazyLock::new(|| CueSet::parse(include_str!("../../lexicon/necessary.txt")));
static POSSIBLE: LazyLock<CueSet> = LazyLock::new(|| CueSet::parse(include_str!("../../lexicon/possible.txt")));
static NEGATIVE: LazyLock<CueSet> = LazyLock::new(|| CueSet::parse(include_str!("../../lexicon/negative.txt")));
static CONDITIONAL: LazyLock<CueSet> = LazyLock::new(|| CueSet::parse(include_str!("../../lexicon/conditional.txt")));

/// Infers whether `text` states a fact, a constraint or a guess.
pub fn infer_epistemic(text: &str) -> Epistemic {
    if NECESSARY.matches(text) {
        Epistemic::Necessary
    } else if POSSIBLE.matches(text) {
        Epistemic::Possible
    } else {
        Epistemic::Actual
    }
}

/// Infers whether `text` is affirmative, negative or conditional.
pub fn infer_polarity(text: &str) -> Polarity {
    if CONDITIONAL.matches(text) {
        Polarity::Conditional
    } else if NEGATIVE.matches(text) {
        Polarity::Negative
    } else {
        Polarity::Affirmative
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Epistemic::*;
    use Polarity::*;

    #[test]
    fn epistemic_in_three_languages() {
        let cases = [
            ("We use PostgreSQL 16 as the main database", Actual),
            ("You must run migrations before deploying", Necessary),
            ("Never commit .env files", Necessary),
            ("Do not push to main directly", Necessary),
            ("I don't like tea", Actual),
            ("The flaky test is probably caused by a race", Possible),
            ("Maybe the cache is stale", Possible),
            ("The meeting is in May", Actual),
            ("本项目用 PostgreSQL 16 做主数据库", Actual),
            ("部署前必须先跑数据库迁移", Necessary),
            ("禁止在代码中硬编码 API key", Necessary),
            ("这个 bug 可能是并发导致的", Possible),
            ("应该是缓存的问题", Possible),
            ("也许下周上线", Possible),
            ("主データベースは PostgreSQL 16 です", Actual),
            ("デプロイ前に必ずマイグレーションを実行する", Necessary),
            ("本番環境で直接編集してはいけない", Necessary),
            ("テストを書かなければならない", Necessary),
            ("原因はたぶんキャッシュだ", Possible),
            ("競合状態かもしれない", Possible),
        ];
        for (text, expected) in cases {
            assert_eq!(infer_epistemic(text), expected, "{text}");
        }
    }

    #[test]
    fn polarity_in_three_languages() {
        let cases = [
            ("We use PostgreSQL", Affirmative),
            ("We do not use MongoDB", Negative),
            ("The API doesn't support batching", Negative),
            ("If the build fails, clear the cache", Conditional),
            ("Retry unless the error is fatal", Conditional),
            ("Nothing here is cached", Negative),
            ("项目不用 MongoDB", Negative),
            ("我们没有使用 Redis", Negative),
            ("这个方案不错", Affirmative),
            ("如果构建失败就清理缓存", Conditional),
            ("超时的话重试三次", Conditional),
            ("MongoDB は使わない", Negative),
            ("キャッシュは有効ではありません", Negative),
            ("テストを書かなければならない", Affirmative),
            ("デプロイ前に必ずマイグレーションを実行する", Affirmative),
            ("もしビルドが失敗したらキャッシュを消す", Conditional),
            ("エラーの場合は再試行する", Conditional),
        ];
        for (text, expected) in cases {
            assert_eq!(infer_polarity(text), expected, "{text}");
        }
    }

    #[test]
    fn unknown_wording_defaults_to_actual_affirmative() {
        assert_eq!(infer_epistemic("42"), Actual);
        assert_eq!(infer_polarity("42"), Affirmative);
        assert_eq!(infer_epistemic(""), Actual);
    }

    #[test]
    fn emotional_tone_in_three_languages() {
        assert_eq!(infer_emotion("Bart danced at the Christmas party and felt very happy."), Some(Emotion::Joy));
        assert_eq!(infer_emotion("I get a bit nervous before exams and worry a lot."), Some(Emotion::Fear));
        assert_eq!(infer_emotion("小明的小狗走丢了，他很难过。"), Some(Emotion::Sadness));
        assert_eq!(infer_emotion("考试前她非常紧张，也很担心。"), Some(Emotion::Fear));
        assert_eq!(infer_emotion("友達とキャンプに行って、とても楽しかった。"), Some(Emotion::Joy));
        assert_eq!(infer_emotion("順番を抜かされて腹が立った。"), Some(Emotion::Anger));
        assert_eq!(infer_emotion("The API rate limit is 100 requests per minute."), None);
        // A tie is no tone.
        assert_eq!(infer_emotion("happy but sad"), None);
    }
}
