//! Golden tests: every query in `queries/` against a fixed fixture, with the
//! rows it must return.

use crate::store::{self, NamedQuery};
use oxigraph::model::{Literal, Term};
use oxigraph::sparql::QuerySolution;

use super::{caller, id, memory, remember};

fn column(rows: &[QuerySolution], name: &str) -> Vec<String> {
    rows.iter()
        .map(|row| match row.get(name) {
            Some(Term::NamedNode(n)) => n.as_str().to_owned(),
            Some(Term::Literal(l)) => l.value().to_owned(),
            Some(other) => other.to_string(),
            None => "-".to_owned(),
        })
        .collect()
}

/// Three atoms: `a` replaced by `b`, and a lesson derived from `a`.
struct Fixture {
    m: crate::Memory,
    a: String,
    b: String,
    lesson: String,
}

fn fixture() -> Fixture {
    let m = memory();
    let c = caller("hmg");
    let a = remember(&m, &c, "主数据库用 MongoDB");
    let b = m
        .correct(
            &c,
            crate::CorrectRequest {
                target_atom: a.clone(),
                action: crate::CorrectAction::Replace,
                reason: "迁移".into(),
                new_content: Some("主数据库用 PostgreSQL 16".into()),
            },
        )
        .unwrap()
        .new_atom_id
        .unwrap();
    let lesson = m
        .govern(
            &c,
            crate::GovernRequest {
                target_atom: a.clone(),
                action: crate::GovernAction::DeriveLesson,
                reason: "history".into(),
                lesson_content: Some("数据库选型必须评估事务需求".into()),
            },
        )
        .unwrap()
        .lesson_atom_id
        .unwrap();
    Fixture { m, a, b, lesson }
}

#[test]
fn every_query_returns_its_golden_rows() {
    let fixture = fixture();
    let mut checked = Vec::new();
    for query in NamedQuery::ALL {
        checked.push(*query);
        check(*query, &fixture);
    }
    assert_eq!(checked.len(), NamedQuery::ALL.len());
    // Confinement: the same queries see nothing from another tenant.
    let s = fixture.m.store();
    assert!(s.select(NamedQuery::AllAtoms, "bob", &[]).unwrap().is_empty());
    let _ = remember(&fixture.m, &crate::Caller::new(crate::Scope::tenant("bob"), "t"), "bob's own memory");
    assert_eq!(s.select(NamedQuery::AllAtoms, "alice", &[]).unwrap().len(), 3);
}

/// The golden rows of one query.
fn check(query: NamedQuery, fixture: &Fixture) {
    let Fixture { m, a, b, lesson } = fixture;
    let atom = |x: &str| store::atom_iri(id(x)).into_string();
    let s = m.store();
    match query {
        NamedQuery::FindByContentHash => {
            let hash = crate::text::content_hash("主数据库用 postgresql 16。");
            let rows = s.select(query, "alice", &[("hash", Literal::from(hash).into())]).unwrap();
            assert_eq!(column(&rows, "atom"), [atom(b)]);
            assert_eq!(column(&rows, "status"), ["active"]);
            assert_eq!(column(&rows, "repository"), ["hmg"]);
            assert_eq!(column(&rows, "workspace"), ["acme"]);
        }
        NamedQuery::RevisionsOf => {
            let rows = s.select(query, "alice", &[("atom", store::atom_iri(id(a)).into())]).unwrap();
            assert_eq!(column(&rows, "next"), [atom(b)]);
            let rows = s.select(query, "alice", &[("atom", store::atom_iri(id(b)).into())]).unwrap();
            assert!(rows.is_empty());
        }
        NamedQuery::DerivedFrom => {
            let rows = s.select(query, "alice", &[("atom", store::atom_iri(id(a)).into())]).unwrap();
            assert_eq!(column(&rows, "derived"), [atom(lesson)]);
            assert_eq!(column(&rows, "status"), ["active"]);
        }
        NamedQuery::AuditOfAtom => {
            let rows = s.select(query, "alice", &[("atom", store::atom_iri(id(a)).into())]).unwrap();
            assert_eq!(column(&rows, "action"), ["memorize", "correct.replace", "govern.derive_lesson"]);
            assert_eq!(column(&rows, "seq"), ["1", "2", "3"]);
            assert_eq!(column(&rows, "statusAfter"), ["active", "superseded", "sealed"]);
        }
        NamedQuery::AuditChain => {
            let rows = s.select(query, "alice", &[]).unwrap();
            assert_eq!(column(&rows, "action"), ["memorize", "correct.replace", "govern.derive_lesson"]);
            assert_eq!(column(&rows, "generated"), [atom(a), atom(b), atom(lesson)]);
            assert_eq!(column(&rows, "reason"), ["-", "迁移", "history"]);
            assert_eq!(column(&rows, "prevHash")[0], crate::store::audit::GENESIS_HASH);
        }
        NamedQuery::ActiveAtoms => {
            let rows = s.select(query, "alice", &[]).unwrap();
            let mut ids = column(&rows, "atom");
            ids.sort();
            let mut expected = vec![atom(b), atom(lesson)];
            expected.sort();
            assert_eq!(ids, expected);
            let kinds = column(&rows, "kind");
            assert!(kinds.contains(&"https://w3id.org/hmg/ns#Lesson".to_owned()));
            assert!(kinds.contains(&"https://w3id.org/hmg/ns#Fact".to_owned()));
            assert_eq!(column(&rows, "branch"), ["main", "main"]);
        }
        NamedQuery::AllAtoms => {
            let rows = s.select(query, "alice", &[]).unwrap();
            assert_eq!(column(&rows, "atom"), [atom(a), atom(b), atom(lesson)]);
        }
        NamedQuery::ChangesSince => {
            let rows = s.select_all_graphs(query, &[("since", Literal::from(1_i64).into())]).unwrap();
            assert_eq!(column(&rows, "version"), ["2", "3"]);
            assert_eq!(column(&rows, "target"), [atom(a), atom(a)]);
            assert_eq!(column(&rows, "generated"), [atom(b), atom(lesson)]);
            assert_eq!(column(&rows, "g"), [store::tenant_graph("alice").into_string(), store::tenant_graph("alice").into_string()]);
        }
        NamedQuery::GraphLinks => {
            let rows = s.select_all_graphs(query, &[]).unwrap();
            let mut links: Vec<(String, String, String)> = rows
                .iter()
                .map(|r| {
                    let get = |n: &str| match r.get(n) {
                        Some(Term::NamedNode(x)) => x.as_str().to_owned(),
                        Some(Term::Literal(x)) => x.value().to_owned(),
                        _ => String::new(),
                    };
                    (get("atom"), get("link"), get("other"))
                })
                .collect();
            links.sort();
            let entity = |key: &str| store::entity_iri("alice", key).into_string();
            let mut expected = vec![
                (atom(a), "mentions".to_owned(), entity("mongodb")),
                (atom(b), "mentions".to_owned(), entity("postgresql")),
                (atom(b), "mentions".to_owned(), entity("postgresql 16")),
                (atom(b), "revision".to_owned(), atom(a)),
                (atom(lesson), "derivation".to_owned(), atom(a)),
            ];
            expected.sort();
            assert_eq!(links, expected);
        }
        NamedQuery::AtomCards => {
            let rows = s.select_all_graphs(query, &[]).unwrap();
            let text = |row: &QuerySolution, n: &str| match row.get(n) {
                Some(Term::Literal(x)) => x.value().to_owned(),
                Some(Term::NamedNode(x)) => x.as_str().to_owned(),
                _ => String::new(),
            };
            let ids = [id(a), id(b), id(lesson)];
            let stored = crate::store::codec::load_atoms(s, "alice", &ids, false).unwrap();
            for x in &ids {
                let iri = store::atom_iri(*x).into_string();
                let atom = &stored[x];
                let rows_of = rows.iter().filter(|r| text(r, "subject") == iri);
                let created: Vec<_> = rows_of
                    .clone()
                    .filter(|r| text(r, "field") == "created")
                    .map(|r| r.get("value").and_then(store::parse_datetime))
                    .collect();
                assert_eq!(created, [Some(atom.created_at)]);
                let mut fields: Vec<(String, String)> =
                    rows_of.filter(|r| text(r, "field") != "created").map(|r| (text(r, "field"), text(r, "value"))).collect();
                fields.sort();
                let scope = fields.iter().find(|(f, _)| f == "scope").map(|(_, v)| v.clone()).unwrap_or_default();
                assert_eq!(
                    fields,
                    [
                        ("epistemic".to_owned(), atom.epistemic.as_str().to_owned()),
                        ("scope".to_owned(), scope.clone()),
                        ("source".to_owned(), atom.source.clone()),
                    ]
                );
                let mut scope_fields: Vec<(String, String)> =
                    rows.iter().filter(|r| text(r, "subject") == scope).map(|r| (text(r, "field"), text(r, "value"))).collect();
                scope_fields.sort();
                assert_eq!(
                    scope_fields,
                    [("branch".into(), "main".into()), ("repository".into(), "hmg".into()), ("workspace".into(), "acme".into())]
                );
            }
            let epistemic: Vec<String> = rows.iter().filter(|r| text(r, "field") == "epistemic").map(|r| text(r, "value")).collect();
            assert_eq!(epistemic.iter().filter(|e| *e == "necessary").count(), 1, "the lesson is a constraint");
        }
        NamedQuery::Stats => {
            let rows = s.select(query, "alice", &[]).unwrap();
            assert_eq!(column(&rows, "atoms"), ["3"]);
            // mentions: MongoDB; PostgreSQL and "PostgreSQL 16"; none in the lesson; + 1 revision + 1 derivation.
            assert_eq!(column(&rows, "edges"), ["5"]);
            assert_eq!(column(&rows, "temporal"), ["3"]);
        }
    }
}
