//! The store keeps each tenant's atom listing between writes
//! (`store::catalog`); after every kind of write the listing it serves is
//! the one it would read from the store, and listings through the facade
//! see every write.

use super::{caller, memory, remember};
use crate::memory::{AtomFilter, CorrectAction, CorrectRequest, MemorizeRequest};
use crate::{Caller, Memory, RecallRequest, Scope};

fn listed(memory: &Memory, tenant: &str) -> Vec<(String, Option<String>)> {
    let kept = memory.store.listing_at(tenant).expect("listing").1;
    kept.newest_first().map(|(id, scope)| (id.to_string(), scope.map(|s| s.as_str().to_owned()))).collect()
}

fn read(memory: &Memory, tenant: &str) -> Vec<(String, Option<String>)> {
    let fresh = memory.store.read_listing(&crate::store::tenant_graph(tenant)).expect("read");
    fresh.newest_first().map(|(id, scope)| (id.to_string(), scope.map(|s| s.as_str().to_owned()))).collect()
}

/// The listings served match the store's; `patched`: the write before
/// patched the kept ones rather than leaving them to be read again. The
/// atoms scanned (their quads kept between writes too) are the ones read
/// from the store now, at the first scan and the next.
fn same(memory: &Memory, step: &str, patched: bool) {
    for tenant in ["alice", "bob"] {
        assert_eq!(memory.store.kept_listing(tenant).is_some(), patched, "{tenant}'s listing kept after {step}");
        assert_eq!(listed(memory, tenant), read(memory, tenant), "{tenant} after {step}");
        let everyone = Caller::new(Scope::tenant(tenant), "test");
        for scan in ["first", "second"] {
            let scanned = memory.newest_matching(&everyone, &AtomFilter::default(), 200).expect("scan");
            for atom in &scanned {
                let fresh = crate::store::codec::load_atom(&memory.store, tenant, atom.id).expect("load");
                assert_eq!(Some(atom), fresh.as_ref(), "{tenant}'s {} at the {scan} scan after {step}", atom.id);
            }
            assert_eq!(scanned.len(), read(memory, tenant).len(), "{tenant}: every atom scanned after {step}");
        }
    }
}

fn newest(memory: &Memory, caller: &Caller) -> Vec<String> {
    let page = memory.list_atoms(caller, &AtomFilter::default(), None, 200).expect("list");
    page.atoms.into_iter().map(|a| a.atom_id).collect()
}

#[test]
fn the_listing_kept_between_writes_is_the_one_in_the_store() {
    let memory = memory();
    let (a, b) = (caller("api"), caller("web"));
    let bob = Caller::new(Scope::tenant("bob").with_workspace("acme").with_repository("api"), "test");
    same(&memory, "opening", false);

    let first = remember(&memory, &a, "The API deploys with Helm");
    assert_eq!(newest(&memory, &a), std::slice::from_ref(&first));
    same(&memory, "a memorize", true);
    let second = remember(&memory, &b, "网站每周五发布");
    remember(&memory, &bob, "Bob's notes stay Bob's");
    same(&memory, "writes in another scope and another tenant", true);
    assert_eq!(newest(&memory, &b), [second.clone(), first.clone()], "the tenant's atoms, newest first");

    let batch = memory
        .memorize_many(
            &a,
            ["ステージングは毎朝更新される", "Redis runs on port 6380", "Redis runs on port 6380"].map(MemorizeRequest::new).into(),
        )
        .expect("batch");
    same(&memory, "a batch (with a duplicate)", true);
    let replaced = memory
        .correct(
            &a,
            CorrectRequest {
                target_atom: first.clone(),
                action: CorrectAction::Replace,
                reason: "moved".into(),
                new_content: Some("The API deploys with Argo CD".into()),
            },
        )
        .expect("replace");
    same(&memory, "a replace", true);
    let listed_now = newest(&memory, &a);
    assert_eq!(listed_now.first(), replaced.new_atom_id.as_ref(), "the replacement is the newest");
    assert!(listed_now.contains(&first), "the replaced atom is still listed (superseded)");
    let negated = batch[0].atom_id.clone().expect("written");
    memory
        .correct(&a, CorrectRequest { target_atom: negated, action: CorrectAction::Negate, reason: "wrong".into(), new_content: None })
        .expect("negate");
    same(&memory, "a negate", true);
    memory.recall(&a, RecallRequest::new("Redis port")).expect("recall");
    same(&memory, "a recall (usage stamps)", true);
    memory.purge_chain(&a, &first, "gdpr").expect("purge");
    same(&memory, "a tombstone and its vacuum", false);
    let after = remember(&memory, &a, "Deploys freeze on Fridays");
    same(&memory, "a write after the vacuum", true);
    assert_eq!(newest(&memory, &a).first(), Some(&after));
}
