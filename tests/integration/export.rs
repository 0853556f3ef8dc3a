//! export / import round trips.

use hmg::{Caller, CorrectAction, CorrectRequest, Effect, ExportFormat, GovernAction, GovernRequest, Memory};

use super::{caller, memory, remember};

fn populated() -> (Memory, Caller) {
    let m = memory();
    let c = caller("hmg");
    let a = remember(&m, &c, "主数据库用 MongoDB");
    m.correct(
        &c,
        CorrectRequest {
            target_atom: a,
            action: CorrectAction::Replace,
            reason: "迁移".into(),
            new_content: Some("主数据库用 PostgreSQL 16".into()),
        },
    )
    .unwrap();
    let b = remember(&m, &c, "The deploy token was pasted in chat");
    m.govern(
        &c,
        GovernRequest {
            target_atom: b,
            action: GovernAction::DeriveLesson,
            reason: "leak".into(),
            lesson_content: Some("Never paste tokens in chat".into()),
        },
    )
    .unwrap();
    let q = remember(&m, &c, "隔離するメモ");
    m.govern(&c, GovernRequest { target_atom: q, action: GovernAction::Quarantine, reason: "check".into(), lesson_content: None }).unwrap();
    let t = remember(&m, &c, "to be destroyed");
    m.govern(&c, GovernRequest { target_atom: t, action: GovernAction::Tombstone, reason: "gone".into(), lesson_content: None }).unwrap();
    m.handoff(&c, hmg::HandoffRequest::new("handoff: exported")).unwrap();
    (m, c)
}

fn export_jsonl(m: &Memory, c: &Caller) -> String {
    let mut out = Vec::new();
    m.export(c, ExportFormat::Jsonl, false, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn jsonl_round_trip_loses_nothing() {
    let (m, c) = populated();
    let exported = export_jsonl(&m, &c);
    assert_eq!(exported.lines().count(), 7);
    let target = memory();
    let mut acks = Vec::new();
    let report = target.import(&c, &mut exported.as_bytes(), &mut |line| acks.push(line.clone())).unwrap();
    assert_eq!((report.applied, report.rejected), (7, 0), "{acks:?}");
    assert_eq!(export_jsonl(&target, &c), exported, "re-export is identical");
    // Importing again changes nothing.
    let again = target.import(&c, &mut exported.as_bytes(), &mut |_| {}).unwrap();
    assert_eq!((again.applied, again.no_op), (0, 7));
    assert!(target.verify_audit(None).unwrap().iter().all(|t| t.first_broken.is_none()));
}

#[test]
fn nquads_export_is_parseable_rdf_with_the_audit_chain() {
    let (m, c) = populated();
    let mut out = Vec::new();
    let n = m.export(&c, ExportFormat::NQuads, false, &mut out).unwrap();
    assert!(n > 50);
    let dataset: Vec<_> =
        oxigraph::io::RdfParser::from_format(oxigraph::io::RdfFormat::NQuads).for_slice(&out).collect::<Result<_, _>>().unwrap();
    assert_eq!(dataset.len(), n);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("http://www.w3.org/ns/prov#wasRevisionOf"));
    assert!(text.contains("http://www.w3.org/ns/prov#wasDerivedFrom"));
    assert!(text.contains("https://w3id.org/hmg/ns#AuditEntry"));
    assert!(!text.contains("to be destroyed"));
}

#[test]
fn simple_lines_are_memorized_and_bad_lines_rejected_with_reasons() {
    let m = memory();
    let c = caller("hmg");
    let input = "{\"content\": \"Caroline likes hiking\", \"source\": \"Caroline\", \"kind\": \"episode\", \"created_at\": \"2023-05-08T13:56:00Z\"}\n\
                 \n\
                 not json\n\
                 {\"content\": \"x\", \"kind\": \"dream\"}\n\
                 {\"content\": \"x\", \"created_at\": \"yesterday\"}\n\
                 {\"nothing\": 1}\n\
                 {\"content\": \"Caroline likes hiking\", \"source\": \"Caroline\"}\n";
    let mut lines = Vec::new();
    let report = m.import(&c, &mut input.as_bytes(), &mut |l| lines.push(l.clone())).unwrap();
    assert_eq!((report.lines, report.applied, report.rejected, report.no_op), (6, 1, 4, 1));
    assert_eq!(lines[0].effect, Effect::Applied);
    assert_eq!(lines[1].line, 3);
    assert!(lines[1].reason.as_deref().unwrap().contains("not valid JSON"));
    assert!(lines[2].reason.as_deref().unwrap().contains("dream"));
    assert!(lines[3].reason.as_deref().unwrap().contains("RFC 3339"));
    assert!(lines[4].reason.as_deref().unwrap().contains("content"));
    let atom = m.atom("alice", super::id(lines[0].atom_id.as_deref().unwrap())).unwrap().unwrap();
    assert_eq!((atom.kind, atom.source.as_str()), (hmg::Kind::Episode, "Caroline"));
    assert_eq!(atom.created_at.to_rfc3339(), "2023-05-08T13:56:00+00:00");
}

#[test]
fn a_long_mixed_import_reports_every_line_in_order() {
    let (m, c) = populated();
    let exported: Vec<String> = export_jsonl(&m, &c).lines().map(str::to_owned).collect();
    // Simple lines in several groups (8, 16, 32, 64 …), full records and
    // bad lines between them, a restatement of an earlier line, and
    // Chinese and Japanese content.
    let mut input = Vec::new();
    for i in 0..300 {
        input.push(match i % 50 {
            7 => exported[(i / 50) % exported.len()].clone(),
            13 => "not json".to_owned(),
            21 => serde_json::json!({ "content": format!("第{}号服务使用 Redis", i - 1) }).to_string(),
            _ if i % 3 == 1 => serde_json::json!({ "content": format!("第{i}号服务使用 Redis") }).to_string(),
            _ if i % 3 == 2 => serde_json::json!({ "content": format!("サービス{i}は PostgreSQL を使う") }).to_string(),
            _ => serde_json::json!({ "content": format!("Service {i} listens on port {}", 8000 + i), "source": "user" }).to_string(),
        });
    }
    let target = memory();
    let mut acks = Vec::new();
    let report = target.import(&c, &mut input.join("\n").as_bytes(), &mut |line| acks.push(line.clone())).unwrap();
    assert_eq!(report.lines, 300);
    assert_eq!(acks.iter().map(|a| a.line).collect::<Vec<_>>(), (1..=300).collect::<Vec<_>>(), "every line once, in order");
    for (i, ack) in acks.iter().enumerate() {
        match i % 50 {
            13 => assert_eq!(ack.effect, Effect::Rejected, "line {}", ack.line),
            21 if (i - 1) % 3 == 1 => assert_eq!(ack.effect, Effect::NoOp, "line {} restates line {}", ack.line, ack.line - 1),
            _ => assert_ne!(ack.effect, Effect::Rejected, "line {}: {:?}", ack.line, ack.reason),
        }
        if ack.effect != Effect::Rejected {
            let atom = target.atom("alice", super::id(ack.atom_id.as_deref().unwrap())).unwrap();
            assert!(atom.is_some(), "line {} acknowledged an atom that is not there", ack.line);
        }
    }
    assert_eq!(report.applied + report.no_op + report.rejected, 300);
    assert!(target.verify_audit(None).unwrap().iter().all(|t| t.first_broken.is_none()));
}
