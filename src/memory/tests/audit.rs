//! The audit chain: one hash-linked entry per mutation; tampering is found.

use crate::store::{self, StoreError};
use crate::vocab::hmg as v;
use oxigraph::model::{Literal, Term};

use super::{caller, memory, remember};

fn filled() -> (crate::Memory, Vec<String>) {
    let m = memory();
    let c = caller("hmg");
    let ids = vec![remember(&m, &c, "first memory"), remember(&m, &c, "第二条记忆"), remember(&m, &c, "三つ目の記憶")];
    m.correct(
        &c,
        crate::CorrectRequest {
            target_atom: ids[0].clone(),
            action: crate::CorrectAction::Demote,
            reason: "unsure".into(),
            new_content: None,
        },
    )
    .unwrap();
    (m, ids)
}

#[test]
fn every_mutation_writes_one_linked_entry() {
    let (m, _) = filled();
    let chain = crate::store::audit::chain(m.store(), "alice").unwrap();
    assert_eq!(chain.len(), 4);
    assert_eq!(chain[0].prev_hash, crate::store::audit::GENESIS_HASH);
    for pair in chain.windows(2) {
        assert_eq!(pair[1].prev_hash, pair[0].hash);
        assert_eq!(pair[1].seq, pair[0].seq + 1);
    }
    let report = m.verify_audit(None).unwrap();
    assert_eq!(report.len(), 1);
    assert_eq!((report[0].entries, report[0].first_broken.clone()), (4, None));
}

#[test]
fn an_altered_entry_is_reported_as_the_first_broken_link() {
    let (m, _) = filled();
    let chain = crate::store::audit::chain(m.store(), "alice").unwrap();
    let victim = store::audit_iri(chain[1].id);
    let graph = store::tenant_graph("alice");
    m.store()
        .write(|tx| {
            tx.set(victim.as_ref(), v::ACTION, &Term::Literal(Literal::from("handoff")), graph.as_ref().into())?;
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let report = m.verify_audit(Some("alice")).unwrap();
    let broken = report[0].first_broken.clone().expect("tampering is detected");
    assert_eq!(broken.seq, 2);
    assert!(broken.problem.contains("altered"), "{}", broken.problem);
}

#[test]
fn a_removed_entry_is_reported() {
    let (m, _) = filled();
    let chain = crate::store::audit::chain(m.store(), "alice").unwrap();
    let victim = store::audit_iri(chain[2].id);
    let graph = store::tenant_graph("alice");
    m.store()
        .write(|tx| {
            for quad in tx.quads(Some(victim.as_ref()), None, None, graph.as_ref().into())? {
                tx.remove(quad.as_ref());
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let broken = m.verify_audit(Some("alice")).unwrap()[0].first_broken.clone().expect("a gap is detected");
    assert_eq!(broken.seq, 3);
}
