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

/// A merge's results as text, each atom id replaced by the order in which
/// the results first name it, in `why` too: two stores give the same text
/// for the same decisions.
fn decided(results: &[hmg::MergeResult]) -> String {
    let mut text = format!("{results:#?}");
    let mut ids: Vec<&str> = Vec::new();
    for id in results.iter().filter_map(|r| r.id.as_deref()) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    for (n, id) in ids.iter().enumerate() {
        text = text.replace(id, &format!("<atom {n}>"));
    }
    text
}

/// One add of a long chat writes its new facts together (one embedding
/// batch); each fact must still be decided as if the facts before it were
/// stored, with the sentence model comparing paraphrases.
#[test]
fn a_long_chat_in_one_add_decides_as_its_facts_one_at_a_time() {
    let messages: Vec<Message> = [
        "Hello! I keep my road bike in the garage.",
        "My road bike is kept in the garage.",
        "I want to learn pottery with Ana someday.",
        "Someday I want to learn pottery with Ana.",
        "I live in Portland.",
        "Thanks, that helps!",
        "Big news: we just moved to Denver!",
        "I play the piano. I also have a beagle.",
        "Honestly I don't play piano anymore.",
        "我想和小李一起学书法。",
        "我想和小李一起学习书法。",
        "我对花粉过敏。",
        "另外，我对青霉素也过敏。",
        "ケンジさんはベランダでバジルを育てています。",
        "ベランダでケンジさんがバジルを育てています。",
        "エディタはVimを使っています。",
        "最近VS Codeに乗り換えました。",
    ]
    .iter()
    .map(|m| Message { role: "user".to_owned(), content: (*m).to_owned() })
    .collect();
    let facts = RuleExtractor.extract(&messages).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let caller = Caller::new(Scope::tenant("alice").with_workspace("vg").with_repository("agent"), "test");
    let alone = Memory::open(&tmp.path().join("alone")).unwrap();
    assert!(!alone.indexes().semantic().is_empty(), "the test needs the models (scripts/setup.sh)");
    let one_by_one: Vec<hmg::MergeResult> =
        facts.iter().flat_map(|f| alone.merge_facts(&caller, std::slice::from_ref(f), "user").unwrap()).collect();
    drop(alone);
    let together = Memory::open(&tmp.path().join("together")).unwrap();
    let batched = together.merge_facts(&caller, &facts, "user").unwrap();
    assert_eq!(decided(&batched), decided(&one_by_one));
    let whys: Vec<&str> = batched.iter().filter_map(|r| r.why.as_deref()).collect();
    assert!(whys.iter().any(|w| w.contains("cosine")), "the sentence model decided at least one fact: {whys:#?}");
    for event in [MergeEvent::Add, MergeEvent::Update, MergeEvent::Delete, MergeEvent::None] {
        assert!(batched.iter().any(|r| r.event == event), "{event:?} in {batched:#?}");
    }
    let ulid = |id: &str| id.len() == 26 && id.chars().all(|c| c.is_ascii_alphanumeric());
    assert!(batched.iter().all(|r| r.id.as_deref().is_none_or(ulid)), "every id is an atom id: {batched:#?}");
}
