//! reflect: the five actions on a seeded store, dry run = real run, audit
//! ids, rollback of a failed run, validation and boundary errors.

use chrono::{Duration, Utc};
use hmg::{Caller, Kind, MemorizeRequest, Memory, MemoryError, RecallRequest, ReflectRequest, Status};

use super::{caller, id, memory, remember};

/// Two sessions of episodes in the last hours (one preference said in
/// both), a past-due fact, and an old unimportant one.
fn seed(m: &Memory, c: &Caller) -> (String, String) {
    let now = Utc::now();
    let episode = |text: &str, session: &str, hours_ago: i64| {
        let request = MemorizeRequest::new(text)
            .with_kind(Kind::Episode)
            .with_session(session)
            .with_source("user")
            .with_created_at(now - Duration::hours(hours_ago));
        assert_eq!(m.memorize(c, request).unwrap().effect, hmg::Effect::Applied, "{text}");
    };
    episode("I prefer dark mode in every editor.", "s1", 5);
    episode("The billing outage on Monday was caused by an expired TLS certificate.", "s1", 5);
    episode("We rotated the billing certificate and added an expiry alert.", "s1", 4);
    episode("I prefer dark mode in every editor I use.", "s2", 2);
    episode("昨日のデプロイは問題なく終わりました。", "s2", 2);
    let expired = m
        .memorize(c, MemorizeRequest::new("The staging freeze lasts until the release is cut").with_expires_at(now - Duration::hours(1)))
        .unwrap();
    let old_id = ulid::Ulid::generate().to_string();
    let old = format!(
        r#"{{"atom_id":"{old_id}","content":"Someone mentioned a podcast once","kind":"fact","source":"agent","workspace":"acme","repository":"hmg","branch":"main","epistemic":"actual","polarity":"affirmative","status":"active","created_at":"{}","language":"en","importance":0.15}}"#,
        (now - Duration::days(90)).to_rfc3339()
    );
    let report = m.import(c, &mut old.as_bytes(), &mut |_| {}).unwrap();
    assert_eq!(report.applied, 1, "{report:?}");
    (expired.atom_id.unwrap(), old_id)
}

fn audit_count(m: &Memory) -> u64 {
    m.verify_audit(Some("alice")).unwrap().iter().map(|v| v.entries).sum()
}

#[test]
fn dry_run_and_real_run_agree_and_every_write_is_audited() {
    let m = memory();
    let c = caller("hmg");
    let (expired, old) = seed(&m, &c);
    let version = m.stats(&c).unwrap().snapshot_version;
    let audits = audit_count(&m);

    let dry = m.reflect(&c, ReflectRequest { dry_run: true, ..ReflectRequest::default() }).unwrap();
    assert!(dry.dry_run && dry.audit_record_ids.is_empty());
    assert_eq!(m.stats(&c).unwrap().snapshot_version, version, "a dry run writes nothing");
    assert_eq!(audit_count(&m), audits);
    let counts = dry.counts;
    assert_eq!(counts.summarized, 2, "{dry:#?}");
    assert_eq!(counts.promoted, 1, "{dry:#?}");
    assert_eq!(counts.expired, 1, "{dry:#?}");
    assert_eq!(counts.decayed, 1, "the 90-day-old fact: {dry:#?}");
    assert_eq!(counts.archived, 1, "{dry:#?}");
    assert_eq!(dry.promotions[0].content, "Prefers dark mode in every editor they use.");
    assert_eq!(dry.promotions[0].sessions, vec!["s1".to_owned(), "s2".to_owned()]);
    assert!(dry.summaries.iter().any(|s| s.content.contains("expired TLS certificate") && s.sources.len() == 3), "{:#?}", dry.summaries);
    assert!(dry.summaries.iter().all(|s| s.atom_id.is_none()));
    let text = dry.to_text();
    assert!(text.starts_with("### Memory Reflect Report"), "{text}");
    for part in [
        "Dry Run: true",
        "Actions: summarize, promote, expire, decay, archive",
        "Summarized: 2",
        "Promoted: 1",
        "Expired: 1",
        "Decayed: 1",
        "Archived: 1",
        "Audit Records: 0",
    ] {
        assert!(text.contains(part), "{part} missing in {text}");
    }

    let real = m.reflect(&c, ReflectRequest::default()).unwrap();
    assert_eq!(real.counts, counts, "the real run does what the dry run planned");
    assert_eq!(real.audit_record_ids.len(), 6, "{real:#?}");
    assert!(real.to_text().contains("Audit Records: 6"));
    assert_eq!(audit_count(&m), audits + 6);
    assert!(m.verify_audit(None).unwrap().iter().all(|v| v.first_broken.is_none()), "the audit chain verifies");
    // Every listed audit id exists, on the atoms it names.
    let mut seen = std::collections::HashSet::new();
    let touched: Vec<String> = real
        .summaries
        .iter()
        .filter_map(|s| s.atom_id.clone())
        .chain(real.promotions.iter().filter_map(|p| p.atom_id.clone()))
        .chain(real.lifecycle.iter().map(|l| l.atom_id.clone()))
        .collect();
    for atom in &touched {
        for entry in m.history(&c, atom).unwrap().audit {
            if entry.action.starts_with("reflect.") {
                seen.insert(entry.audit_id);
            }
        }
    }
    for audit_id in &real.audit_record_ids {
        assert!(seen.contains(audit_id), "audit id {audit_id} not found");
    }
    assert_eq!(m.atom("alice", id(&expired)).unwrap().unwrap().status, Status::Expired);
    let old_atom = m.atom("alice", id(&old)).unwrap().unwrap();
    assert_eq!(old_atom.status, Status::Archived);
    assert!((old_atom.importance - 0.12).abs() < 1e-9, "decayed 0.15 → 0.12: {}", old_atom.importance);
    let promoted = m.atom("alice", id(real.promotions[0].atom_id.as_deref().unwrap())).unwrap().unwrap();
    assert_eq!((promoted.kind, promoted.source.as_str(), promoted.derived_from.len()), (Kind::Fact, "reflect", 2));
    let reflection = m.atom("alice", id(real.summaries[0].atom_id.as_deref().unwrap())).unwrap().unwrap();
    assert_eq!(reflection.kind, Kind::Reflection);

    // Nothing is summarized or promoted twice.
    let again = m.reflect(&c, ReflectRequest::default()).unwrap();
    assert_eq!((again.counts.summarized, again.counts.promoted, again.counts.expired, again.counts.archived), (0, 0, 0, 0), "{again:#?}");
}

#[test]
fn a_run_that_fails_midway_leaves_the_store_unchanged() {
    let m = memory();
    let c = caller("hmg");
    seed(&m, &c);
    let version = m.stats(&c).unwrap().snapshot_version;
    let audits = audit_count(&m);
    let before = m.list_atoms(&c, &hmg::memory::AtomFilter::default(), None, 200).unwrap();
    let error = m.reflect(&c, ReflectRequest { fail_after_writes: Some(3), ..ReflectRequest::default() }).unwrap_err();
    assert!(error.to_string().contains("injected failure before write 4 of 6"), "{error}");
    assert_eq!(m.stats(&c).unwrap().snapshot_version, version);
    assert_eq!(audit_count(&m), audits);
    assert_eq!(m.list_atoms(&c, &hmg::memory::AtomFilter::default(), None, 200).unwrap(), before, "no atom created or changed");
    // The same run without the fault applies.
    assert_eq!(m.reflect(&c, ReflectRequest::default()).unwrap().audit_record_ids.len(), 6);
}

#[test]
fn filters_narrow_and_cannot_widen_the_boundary() {
    let m = memory();
    let c = caller("hmg");
    seed(&m, &c);
    let other = caller("website");
    let website = remember(&m, &other, "The website deploys from the gh-pages branch");
    let invalid = |request: ReflectRequest, field: &str| match m.reflect(&c, request) {
        Err(MemoryError::InvalidInput { field: f, message }) => assert_eq!(f, field, "{message}"),
        other => panic!("expected invalid {field}, got {other:?}"),
    };
    invalid(ReflectRequest { actions_csv: Some("summarize,dream".into()), ..ReflectRequest::default() }, "actions_csv");
    invalid(ReflectRequest { since: Some("last tuesday".into()), ..ReflectRequest::default() }, "since");
    invalid(ReflectRequest { until: Some("2026-13-45".into()), ..ReflectRequest::default() }, "until");
    invalid(ReflectRequest { time_window_hours: Some(0.0), ..ReflectRequest::default() }, "time_window_hours");
    invalid(ReflectRequest { time_window_hours: Some(f64::NAN), ..ReflectRequest::default() }, "time_window_hours");
    invalid(ReflectRequest { limit: Some(0), ..ReflectRequest::default() }, "limit");
    let forbidden = |request: ReflectRequest| assert!(matches!(m.reflect(&c, request), Err(MemoryError::Forbidden(_))));
    forbidden(ReflectRequest { owner_filter: Some("bob".into()), ..ReflectRequest::default() });
    forbidden(ReflectRequest { team_id: Some("other-team".into()), ..ReflectRequest::default() });
    forbidden(ReflectRequest { scope: Some("acme/website".into()), ..ReflectRequest::default() });

    // Aliases are normalized; the budget is clamped.
    let report = m
        .reflect(
            &c,
            ReflectRequest {
                actions_csv: Some("expiry, importance_decay,summary".into()),
                dry_run: true,
                limit: Some(1_000_000),
                ..ReflectRequest::default()
            },
        )
        .unwrap();
    let actions: Vec<&str> = report.actions.iter().map(|a| a.as_str()).collect();
    assert_eq!(actions, ["summarize", "expire", "decay"]);
    assert_eq!(report.filters.limit, hmg::memory::reflect::MAX_LIMIT);
    // A budget of 1 acts on one atom and says it stopped.
    let small = m
        .reflect(
            &c,
            ReflectRequest { actions_csv: Some("expire,archive".into()), dry_run: true, limit: Some(1), ..ReflectRequest::default() },
        )
        .unwrap();
    assert_eq!(small.lifecycle.len(), 1);
    assert!(small.truncated);
    // bucket=personal: only tenant-wide atoms, of which there are none.
    let personal = m.reflect(&c, ReflectRequest { bucket: Some("personal".into()), dry_run: true, ..ReflectRequest::default() }).unwrap();
    assert_eq!(personal.lifecycle.len() + personal.summaries.len() + personal.promotions.len(), 0);
    // A window in the past misses the episodes; `since` overrides the hours.
    let past = m
        .reflect(
            &c,
            ReflectRequest {
                since: Some("2020-01-01".into()),
                until: Some("2020-01-02T00:00:00Z".into()),
                dry_run: true,
                ..ReflectRequest::default()
            },
        )
        .unwrap();
    assert_eq!((past.counts.summarized, past.counts.promoted), (0, 0));
    assert_eq!(past.filters.since, "2020-01-01T00:00:00Z");
    // Another repository's atom is outside a repository-bound caller's
    // boundary; a tenant-wide caller (an operator's token) reaches it.
    let later = || ReflectRequest {
        actions_csv: Some("decay".into()),
        dry_run: true,
        until: Some((Utc::now() + Duration::days(40)).to_rfc3339()),
        ..ReflectRequest::default()
    };
    let bound = m.reflect(&c, later()).unwrap();
    assert!(!bound.lifecycle.is_empty() && bound.lifecycle.iter().all(|l| l.atom_id != website), "{bound:#?}");
    let tenant_wide = Caller::new(hmg::Scope::tenant("alice"), "test");
    let all = m.reflect(&tenant_wide, later()).unwrap();
    assert!(all.lifecycle.iter().any(|l| l.atom_id == website), "{all:#?}");
    assert!(
        matches!(m.reflect(&Caller::new(hmg::Scope::tenant("bob"), "test"), later()), Ok(r) if r.lifecycle.is_empty()),
        "another tenant sees nothing"
    );
}

#[test]
fn recall_records_when_atoms_are_returned() {
    let m = memory();
    let c = caller("hmg");
    let atom = remember(&m, &c, "The billing service runs on PostgreSQL 16");
    assert_eq!(m.atom("alice", id(&atom)).unwrap().unwrap().recall_count, 0);
    let hits = m.recall(&c, RecallRequest::new("billing database")).unwrap();
    assert_eq!(hits.atoms[0].atom_id, atom);
    let stored = m.atom("alice", id(&atom)).unwrap().unwrap();
    assert_eq!(stored.recall_count, 1);
    assert!(stored.last_recalled_at.is_some());
    m.recall(&c, RecallRequest::new("PostgreSQL")).unwrap();
    assert_eq!(m.atom("alice", id(&atom)).unwrap().unwrap().recall_count, 2);
    // Three days on, it is not idle yet: nothing decays.
    let later = (Utc::now() + Duration::days(3)).to_rfc3339();
    let report = m
        .reflect(&c, ReflectRequest { actions_csv: Some("decay".into()), until: Some(later), dry_run: true, ..ReflectRequest::default() })
        .unwrap();
    assert_eq!(report.counts.decayed, 0);
}
