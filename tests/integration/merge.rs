//! Fact merging with the real embedding models (the unit tests run without):
//! the decisions must hold when semantic similarity takes part.

use hmg::extract::{Extractor, Message, RuleExtractor};
use hmg::{Caller, Memory, MergeEvent, Scope};

fn add(memory: &Memory, caller: &Caller, text: &str) -> Vec<hmg::MergeResult> {
    let facts = RuleExtractor.extract(&[Message { role: "user".to_owned(), content: text.to_owned() }]).unwrap();
    memory.merge_facts(caller, &facts, "user").unwrap()
}

#[test]
fn merge_decisions_hold_with_real_embeddings() {
    let tmp = tempfile::tempdir().unwrap();
    let memory = Memory::open(&tmp.path().join("store")).unwrap();
    assert!(!memory.indexes().semantic().is_empty(), "the test needs the models (scripts/setup.sh)");
    let caller = Caller::new(Scope::tenant("alice").with_workspace("vg").with_repository("agent"), "test");
    let events = |results: &[hmg::MergeResult]| results.iter().map(|r| r.event).collect::<Vec<_>>();
    assert_eq!(events(&add(&memory, &caller, "I prefer concise Python examples.")), [MergeEvent::Add]);
    assert_eq!(events(&add(&memory, &caller, "I prefer concise Python examples with type hints.")), [MergeEvent::Update]);
    assert_eq!(events(&add(&memory, &caller, "I use Neovim every day.")), [MergeEvent::Add]);
    assert_eq!(events(&add(&memory, &caller, "I prefer tabs for indentation.")), [MergeEvent::Add]);
    assert_eq!(events(&add(&memory, &caller, "I prefer spaces for indentation.")), [MergeEvent::Update]);
    assert_eq!(events(&add(&memory, &caller, "I prefer spaces for indentation.")), [MergeEvent::None]);
    assert_eq!(events(&add(&memory, &caller, "我喜欢喝咖啡。")), [MergeEvent::Add]);
    assert_eq!(events(&add(&memory, &caller, "我不再喜欢喝咖啡。")), [MergeEvent::Delete]);
    assert_eq!(events(&add(&memory, &caller, "私は納豆が好きです。")), [MergeEvent::Add]);
}
