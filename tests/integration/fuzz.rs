//! Fuzzing the entry points that parse client text, with deep and wide
//! generators (proptest): GraphQL documents and variables, SPARQL queries,
//! JSON bodies and JSON Lines imports. No input may crash the process: each
//! is answered with a value or an error. The parsers' own unit tests (in
//! `src/limits.rs`, `src/sparql.rs`, `src/graphql.rs`, `src/mcp.rs`) cover
//! the crate-private pieces; these go through the public API.

use proptest::prelude::*;

/// Nested brackets of mixed kinds, `depth` deep, with junk between.
fn nested(depth: usize, seed: &[u8]) -> String {
    let pairs = [("{", "}"), ("[", "]"), ("(", ")")];
    let mut open = String::new();
    let mut close = String::new();
    for level in 0..depth {
        let (o, c) = pairs[usize::from(seed[level % seed.len()]) % 3];
        open.push_str(o);
        if level % 7 == 3 {
            open.push_str("a: ");
        }
        close.insert_str(0, c);
    }
    format!("{open}1{close}")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn graphql_documents_deep_or_wide_never_crash(depth in 0usize..4_000, width in 0usize..400, seed in proptest::collection::vec(any::<u8>(), 1..16)) {
        let literal = nested(depth, &seed);
        let aliases: String = (0..width).map(|i| format!("a{i}: stats {{ atoms }} ")).collect();
        for query in [format!("{{ recall(query: \"x\", scope: {literal}) {{ atomId }} }}"), format!("{{ {aliases} }}"), "{".repeat(depth)] {
            let body = serde_json::json!({ "query": query }).to_string();
            let _ = hmg::graphql::decode_request(body.as_bytes());
        }
        let variables = format!("{{\"query\": \"{{ stats {{ atoms }} }}\", \"variables\": {{\"v\": {}}}}}", "[".repeat(depth) + &"]".repeat(depth));
        let _ = hmg::graphql::decode_request(variables.as_bytes());
    }

    #[test]
    fn sparql_queries_deep_or_long_never_crash(depth in 0usize..6_000, terms in 0usize..3_000, seed in proptest::collection::vec(any::<u8>(), 1..16)) {
        let store = hmg::store::Store::open_in_memory().unwrap();
        let limits = hmg::sparql::Limits { timeout: std::time::Duration::from_secs(2), ..hmg::sparql::Limits::default() };
        let queries = [
            format!("SELECT * WHERE {}", nested(depth, &seed).replace('1', "")),
            format!("ASK {{ FILTER({}) }}", nested(depth, &seed)),
            format!("SELECT * WHERE {{ ?s {}<urn:p>{} ?o }}", "(".repeat(depth), ")".repeat(depth)),
            format!("SELECT (1{} AS ?n) WHERE {{}}", "*2+1".repeat(terms)),
            format!("SELECT * WHERE {{ ?s <urn:p>{} ?o }}", "|<urn:q>/^<urn:r>".repeat(terms)),
            format!("SELECT * WHERE {{ {} }}", "OPTIONAL { ?a ?b ?c } ".repeat(terms.min(300))),
        ];
        for query in queries {
            let _ = hmg::sparql::answer(&store, "fuzz", &query, "", limits);
        }
    }

    #[test]
    fn jsonl_imports_deep_or_garbled_never_crash(depth in 0usize..3_000, junk in proptest::collection::vec(any::<u8>(), 0..256)) {
        let memory = hmg::Memory::open_in_memory().unwrap();
        let caller = hmg::Caller::new(hmg::Scope::tenant("fuzz"), "fuzz");
        let lines = [
            format!("{{\"content\": {}}}", "[".repeat(depth) + &"]".repeat(depth)),
            format!("{{\"content\": \"ok\", \"extra\": {}}}", "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth)),
            String::from_utf8_lossy(&junk).replace('\n', " "),
            "{\"content\": \"A memory that imports fine\"}".to_owned(),
        ];
        let input = lines.join("\n");
        let report = memory.import(&caller, &mut input.as_bytes(), &mut |_| {});
        if let Ok(report) = report {
            prop_assert!(report.applied + report.no_op >= 1, "the good line still lands: {report:?}");
        }
    }
}
