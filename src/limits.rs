//! Limits checked before any recursive parser runs.
//!
//! The parsers HMG relies on (async-graphql's, spargebra's, serde_json's for
//! `serde_json::Value`) recurse once per nesting level, so a small request
//! nested a few thousand levels deep overflows the stack and aborts the
//! whole process. [`check_nesting`] scans the text once, iteratively, with
//! no allocation, and refuses anything nested deeper than a limit no real
//! request comes near; only then does a parser see it.
//!
//! **Invariant:** every surface that parses client text (GraphQL documents
//! and variables, SPARQL queries, JSON bodies, JSON Lines imports) calls
//! [`check_nesting`] first.

/// Deepest bracket nesting accepted in a GraphQL document (the standard
/// introspection query GraphiQL sends nests 13 deep).
pub(crate) const GRAPHQL_MAX_NESTING: usize = 32;
/// Deepest bracket nesting accepted in a SPARQL query (`{ }`, `( )`, `[ ]`
/// together; the audit queries in `queries/audit/` nest at most 6 deep).
pub(crate) const SPARQL_MAX_NESTING: usize = 48;
/// Deepest nesting accepted in a JSON document (HMG's own bodies nest at
/// most 4 deep; serde_json stops at 128).
pub(crate) const JSON_MAX_NESTING: usize = 32;

/// The language of a text, for its string and comment rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Syntax {
    /// JSON: `"…"` strings with backslash escapes.
    Json,
    /// GraphQL: `"…"` and `"""…"""` strings, `#` comments.
    Graphql,
    /// SPARQL: `'…'`, `"…"`, `'''…'''`, `"""…"""` strings, `<…>` IRIs,
    /// `#` comments.
    Sparql,
}

impl Syntax {
    fn name(self) -> &'static str {
        match self {
            Syntax::Json => "JSON",
            Syntax::Graphql => "GraphQL",
            Syntax::Sparql => "SPARQL",
        }
    }
}

/// A text nested deeper than its limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {syntax} text is nested more than {limit} levels deep (brackets, braces or parentheses, at byte {offset}); simplify it")]
pub(crate) struct TooDeep {
    /// The language.
    pub(crate) syntax: &'static str,
    /// The limit.
    pub(crate) limit: usize,
    /// Where the limit was passed.
    pub(crate) offset: usize,
}

/// Refuses `text` when its brackets nest deeper than `limit`. Brackets in
/// strings, comments and IRIs do not count; unbalanced brackets are left for
/// the parser to report.
pub(crate) fn check_nesting(text: &str, syntax: Syntax, limit: usize) -> Result<(), TooDeep> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        let byte = bytes[i];
        match byte {
            b'{' | b'[' | b'(' => {
                depth += 1;
                if depth > limit {
                    return Err(TooDeep { syntax: syntax.name(), limit, offset: i });
                }
            }
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            b'"' => {
                i = skip_string(bytes, i, b'"', syntax != Syntax::Json);
                continue;
            }
            b'\'' if syntax == Syntax::Sparql => {
                i = skip_string(bytes, i, b'\'', true);
                continue;
            }
            b'#' if syntax != Syntax::Json => {
                i = bytes[i..].iter().position(|b| *b == b'\n' || *b == b'\r').map_or(bytes.len(), |n| i + n);
                continue;
            }
            b'<' if syntax == Syntax::Sparql => {
                if let Some(end) = iri_end(bytes, i) {
                    i = end;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The index after the string starting at `start` (a quote), or the end of
/// the text for an unterminated one. With `triple`, `"""…"""` (or `'''…'''`)
/// is one string.
fn skip_string(bytes: &[u8], start: usize, quote: u8, triple: bool) -> usize {
    let long = triple && bytes.get(start + 1) == Some(&quote) && bytes.get(start + 2) == Some(&quote);
    let mut i = start + if long { 3 } else { 1 };
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b if b == quote && !long => return i + 1,
            b if b == quote && bytes.get(i + 1) == Some(&quote) && bytes.get(i + 2) == Some(&quote) => return i + 3,
            b'\n' | b'\r' if !long => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The index after a SPARQL IRI reference starting at `start` (`<`), if one
/// starts there (`<` is also the less-than operator).
fn iri_end(bytes: &[u8], start: usize) -> Option<usize> {
    for (n, byte) in bytes[start + 1..].iter().enumerate() {
        match byte {
            b'>' => return Some(start + n + 2),
            b'<' | b'"' | b'{' | b'}' | b'|' | b'^' | b'`' | b'\\' => return None,
            b if *b <= b' ' => return None,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(open: &str, close: &str, depth: usize) -> String {
        format!("{}{}", open.repeat(depth), close.repeat(depth))
    }

    #[test]
    fn deep_nesting_is_refused_in_every_syntax() {
        for syntax in [Syntax::Json, Syntax::Graphql, Syntax::Sparql] {
            assert!(check_nesting(&nested("[", "]", 10), syntax, 32).is_ok());
            let error = check_nesting(&nested("[", "]", 5_000), syntax, 32).unwrap_err();
            assert_eq!(error.offset, 32);
            assert!(error.to_string().contains("32 levels"), "{error}");
        }
        assert!(check_nesting(&format!("SELECT * WHERE {} ", nested("{", "}", 1_000)), Syntax::Sparql, 48).is_err());
        assert!(check_nesting(&format!("ASK {{ FILTER({}) }}", nested("(", ")", 1_000)), Syntax::Sparql, 48).is_err());
        assert!(check_nesting(&format!("ASK {{ ?s {} ?o }}", nested("(", ")", 5_000).replace(")(", ")/(")), Syntax::Sparql, 48).is_err());
        assert!(check_nesting(&format!("{{ a(x: {}) }}", nested("[", "]", 2_000)), Syntax::Graphql, 32).is_err());
    }

    #[test]
    fn brackets_in_strings_comments_and_iris_do_not_count() {
        let deep = "{".repeat(100);
        assert!(check_nesting(&format!("{{\"a\": \"{deep}\"}}"), Syntax::Json, 4).is_ok());
        assert!(check_nesting(&format!("{{\"a\": \"\\\"{deep}\"}}"), Syntax::Json, 4).is_ok());
        assert!(check_nesting(&format!("{{ a(x: \"\"\"{deep}\"\"\") }} # {deep}\n"), Syntax::Graphql, 4).is_ok());
        assert!(
            check_nesting(&format!("SELECT * WHERE {{ ?s ?p '{deep}' . ?s ?p \"\"\"{deep}\n\"\"\" }} # {deep}"), Syntax::Sparql, 4).is_ok()
        );
        assert!(check_nesting("SELECT * WHERE { ?s ?p <urn:a((((((((> }", Syntax::Sparql, 4).is_ok());
        // `<` as an operator is not an IRI.
        assert!(check_nesting("ASK { FILTER(1 < (((((2))))) ) }", Syntax::Sparql, 4).is_err());
    }

    #[test]
    fn unterminated_strings_and_stray_closers_end_the_scan_quietly() {
        assert!(check_nesting("\"{{{{{{", Syntax::Json, 2).is_ok());
        assert!(check_nesting(")))))]]]}}}", Syntax::Sparql, 2).is_ok());
        assert!(check_nesting("'''{{{", Syntax::Sparql, 2).is_ok());
    }
}
