//! Fuzzing the public entry points that parse client text, with deep and
//! wide generators (proptest): JSON Lines imports. No input may crash the
//! process: each is answered with a value or an error. The surfaces' parsers
//! (GraphQL documents and variables, SPARQL queries) are fuzzed the same way
//! in `src/surface/fuzz.rs`; the parsers' own unit tests are in
//! `src/limits.rs`, `src/surface/{sparql,graphql,mcp}.rs`.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

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
