//! Crash safety: an importing process is killed with SIGKILL at random
//! moments; every write it acknowledged is there after reopening, and the
//! audit chain verifies.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[test]
fn acknowledged_writes_survive_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let input = tmp.path().join("atoms.jsonl");
    let lines: Vec<String> = (0..5_000)
        .map(|i| {
            let content = match i % 3 {
                0 => format!("Crash test fact {i}: service-{i} listens on port {}", 1000 + i),
                1 => format!("崩溃测试 {i}：服务{i}使用 Redis"),
                _ => format!("クラッシュテスト {i}：サービス{i}は PostgreSQL を使う"),
            };
            serde_json::json!({ "content": content, "source": "agent" }).to_string()
        })
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();

    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut acknowledged: Vec<String> = Vec::new();
    for round in 0..5 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_millis(seed % 700);
        let mut child = Command::new(env!("CARGO_BIN_EXE_hmg"))
            .args(["--store", store.to_str().unwrap(), "--tenant", "crash", "import", input.to_str().unwrap(), "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (first_ack, acking) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let mut acks = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(value) = serde_json::from_str::<Value>(&line)
                    && let Some(id) = value["atom_id"].as_str()
                    && value["effect"] != "rejected"
                {
                    acks.push(id.to_owned());
                    let _ = first_ack.send(());
                }
            }
            acks
        });
        // The kill comes at a random moment once the importer is writing
        // (the models load first, slower on a busy machine).
        let _ = acking.recv_timeout(Duration::from_secs(120));
        let started = Instant::now();
        while started.elapsed() < delay {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill(); // SIGKILL on Unix.
        let _ = child.wait();
        let acks = reader.join().unwrap();
        eprintln!("round {round}: killed {delay:?} after the first acknowledgement, {} acknowledgements", acks.len());
        acknowledged.extend(acks);

        let memory = hmg::Memory::open(&store).unwrap();
        for id in &acknowledged {
            let atom = memory.atom("crash", hmg::atom::parse_atom_id(id).unwrap()).unwrap();
            assert!(atom.is_some(), "acknowledged atom {id} lost after SIGKILL in round {round}");
        }
        let verification = memory.verify_audit(Some("crash")).unwrap();
        assert_eq!(verification[0].first_broken, None, "audit chain broken after round {round}");
    }
    assert!(!acknowledged.is_empty(), "the importer acknowledged writes before being killed");
    let verify =
        Command::new(env!("CARGO_BIN_EXE_hmg")).args(["--store", store.to_str().unwrap(), "audit", "verify", "--json"]).output().unwrap();
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stdout));
    let report: Value = serde_json::from_slice(&verify.stdout).unwrap();
    assert_eq!(report["ok"], true);
}
