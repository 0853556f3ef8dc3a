//! Fuzzing the surfaces' parsers of client text with deep and wide
//! generators (proptest): GraphQL documents and variables, SPARQL queries.
//! No input may crash the process: each is answered with a value or an
//! error. (JSON Lines imports, public, are fuzzed in `tests/integration/fuzz.rs`.)

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
            let _ = super::graphql::decode_request(body.as_bytes());
        }
        let variables = format!("{{\"query\": \"{{ stats {{ atoms }} }}\", \"variables\": {{\"v\": {}}}}}", "[".repeat(depth) + &"]".repeat(depth));
        let _ = super::graphql::decode_request(variables.as_bytes());
    }

    #[test]
    fn sparql_queries_deep_or_long_never_crash(depth in 0usize..6_000, terms in 0usize..3_000, seed in proptest::collection::vec(any::<u8>(), 1..16)) {
        let store = crate::store::Store::open_in_memory().unwrap();
        let limits = super::sparql::Limits { timeout: std::time::Duration::from_secs(2), ..super::sparql::Limits::default() };
        let queries = [
            format!("SELECT * WHERE {}", nested(depth, &seed).replace('1', "")),
            format!("ASK {{ FILTER({}) }}", nested(depth, &seed)),
            format!("SELECT * WHERE {{ ?s {}<urn:p>{} ?o }}", "(".repeat(depth), ")".repeat(depth)),
            format!("SELECT (1{} AS ?n) WHERE {{}}", "*2+1".repeat(terms)),
            format!("SELECT * WHERE {{ ?s <urn:p>{} ?o }}", "|<urn:q>/^<urn:r>".repeat(terms)),
            format!("SELECT * WHERE {{ {} }}", "OPTIONAL { ?a ?b ?c } ".repeat(terms.min(300))),
        ];
        for query in queries {
            let _ = super::sparql::answer(&store, "fuzz", &query, "", limits);
        }
    }
}
