//! Shared by the benches: a generator of synthetic multilingual atoms, and
//! a throwaway Virtuoso for the remote-store benches.

#![allow(dead_code)]

const SUBJECTS: &[&str] =
    &["PostgreSQL", "Redis", "tokio", "the billing service", "src/login.py", "Kubernetes", "老李", "田中さん", "ledger-sync", "Caroline"];
const EN: &[&str] = &[
    "{s} must be restarted after config change #{i}",
    "{s} probably caused incident #{i}",
    "We moved {s} to region eu-{i}",
    "If {s} times out, retry request #{i} twice",
];
const ZH: &[&str] = &["{s} 第{i}号配置变更后必须重启", "第{i}次事故可能是{s}导致的", "我们把{s}迁移到了第{i}个集群"];
const JA: &[&str] = &["{s} は設定変更 {i} の後に必ず再起動する", "障害 {i} の原因はたぶん {s} だ", "{s} をクラスタ {i} に移行した"];

/// A ten-turn chat in the shape of the MADial dev queries (about 230 e5
/// tokens), one turn per line.
pub(crate) const DIALOGUE: &[&str] = &[
    "Bart: \"Hey, did you know? I'm going to perform a magic trick at the New Year's Eve party!\"",
    "Assistant: \"That's fantastic! I can imagine the audience being completely captivated by your magic.\"",
    "Bart: \"I get a bit nervous too. Do you have any suggestions to help me relax?\"",
    "Assistant: \"Of course! Try taking a deep breath before the performance and imagine yourself as a fearless magician.\"",
    "Bart: \"By the way, what should I wear?\"",
    "Assistant: \"Put on your favorite performance outfit, the one that makes you feel confident and comfortable.\"",
    "Bart: \"My sister said she would film it for our parents, they live abroad now.\"",
    "Assistant: \"What a lovely idea, they will be so proud to watch it.\"",
    "Bart: \"I practiced the card trick every evening this week after work.\"",
    "Bart: \"I'm really looking forward to that evening; I want to make it very special!\"",
];

/// The i-th synthetic memory (distinct for every i).
pub(crate) fn sentence(i: usize) -> String {
    let subject = SUBJECTS[i % SUBJECTS.len()];
    let templates = match i % 3 {
        0 => EN,
        1 => ZH,
        _ => JA,
    };
    templates[(i / 3) % templates.len()].replace("{s}", subject).replace("{i}", &i.to_string())
}

/// p-th percentile of sorted durations, in milliseconds.
pub(crate) fn percentile_ms(sorted: &[std::time::Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

/// Resident memory of this process in MiB (Linux).
pub(crate) fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A throwaway Virtuoso started by `scripts/virtuoso.sh`, stopped (and its
/// files removed) on drop.
pub(crate) struct Virtuoso {
    dir: std::path::PathBuf,
    /// Query + update endpoint (HTTP Digest).
    pub(crate) url: String,
    user: String,
    password: String,
}

fn virtuoso_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/virtuoso.sh")
}

impl Virtuoso {
    /// Starts one with its database in `dir`.
    pub(crate) fn start(dir: &std::path::Path) -> Virtuoso {
        let out = std::process::Command::new(virtuoso_script()).arg("start").arg(dir).output().expect("scripts/virtuoso.sh runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}='")).and_then(|v| v.strip_suffix('\'')))
                .unwrap_or_else(|| panic!("{name} in {text}"))
                .to_owned()
        };
        Virtuoso {
            dir: dir.to_path_buf(),
            url: value("HMG_TEST_VIRTUOSO_QUERY"),
            user: value("HMG_TEST_VIRTUOSO_USER"),
            password: value("HMG_TEST_VIRTUOSO_PASSWORD"),
        }
    }

    /// The SDK's settings for this store.
    pub(crate) fn config(&self) -> hmg::RemoteConfig {
        hmg::RemoteConfig {
            credentials: hmg::StoreCredentials::Password { user: self.user.clone(), password: self.password.clone() },
            ..hmg::RemoteConfig::new(self.url.clone())
        }
    }

    /// The environment that points an `hmg` process at this store.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        vec![
            ("HMG_STORE_URL".to_owned(), self.url.clone()),
            ("HMG_STORE_USER".to_owned(), self.user.clone()),
            ("HMG_STORE_PASSWORD".to_owned(), self.password.clone()),
        ]
    }
}

impl Drop for Virtuoso {
    fn drop(&mut self) {
        let _ = std::process::Command::new(virtuoso_script()).arg("stop").arg(&self.dir).output();
    }
}
