//! Finding what pure code never names, in the tokens of its non-test code:
//! `std::fs`, `std::net`, `std::process`, `std::thread` (also inside a
//! grouped `use std::{..}`), `Instant::now`, `SystemTime::now`, and any
//! path through `tokio` or `glommio`. Tokens, not text: comments, doc
//! comments and string literals say what they like, and macro bodies
//! (`format!`, `vec!`) are checked like any other code.

use proc_macro2::{Delimiter, TokenStream, TokenTree};

/// `std::` modules that do I/O, spawn or sleep.
const STD_MODULES: &[&str] = &["fs", "net", "process", "thread"];
/// Types whose `now` reads a clock.
const CLOCKS: &[&str] = &["Instant", "SystemTime"];
/// Async runtimes (crate names, and their `tokio_*` companions).
const RUNTIMES: &[&str] = &["tokio", "glommio"];

/// One forbidden name, at its line (1-based).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Line of the token that starts it.
    pub line: usize,
    /// What it names, e.g. `std::fs`.
    pub name: String,
}

/// The forbidden names in `tokens`, in order.
pub fn scan(tokens: TokenStream) -> Vec<Finding> {
    let mut findings = Vec::new();
    scan_into(tokens, &mut findings);
    findings.sort_by_key(|finding| finding.line);
    findings
}

fn scan_into(tokens: TokenStream, findings: &mut Vec<Finding>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    for (index, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Group(group) => scan_into(group.stream(), findings),
            TokenTree::Ident(ident) => {
                let line = ident.span().start().line;
                let name = ident.to_string();
                if RUNTIMES
                    .iter()
                    .any(|runtime| is_crate_or_companion(&name, runtime))
                {
                    findings.push(Finding { line, name });
                    continue;
                }
                let after = path_segment_after(&tokens, index);
                if let Some(found) = forbidden_after(&name, after) {
                    findings.push(Finding { line, name: found });
                }
            }
            TokenTree::Punct(_) | TokenTree::Literal(_) => {}
        }
    }
}

/// `tokio` or `tokio_stream`, not `tokionaut`.
fn is_crate_or_companion(name: &str, runtime: &str) -> bool {
    name == runtime
        || name
            .strip_prefix(runtime)
            .is_some_and(|rest| rest.starts_with('_'))
}

/// The token after `::` following `tokens[index]`, if there is one.
fn path_segment_after(tokens: &[TokenTree], index: usize) -> Option<&TokenTree> {
    let is_colon = |token: Option<&TokenTree>| matches!(token, Some(TokenTree::Punct(punct)) if punct.as_char() == ':');
    if is_colon(tokens.get(index + 1)) && is_colon(tokens.get(index + 2)) {
        tokens.get(index + 3)
    } else {
        None
    }
}

/// What `first :: after` names, if it is forbidden.
fn forbidden_after(first: &str, after: Option<&TokenTree>) -> Option<String> {
    match (first, after?) {
        ("std", TokenTree::Ident(module)) => {
            let module = module.to_string();
            STD_MODULES
                .contains(&module.as_str())
                .then(|| format!("std::{module}"))
        }
        // `use std::{fs, io}`: the first segment of each element.
        ("std", TokenTree::Group(group)) if group.delimiter() == Delimiter::Brace => {
            grouped_std_module(group.stream()).map(|module| format!("std::{module}"))
        }
        (clock, TokenTree::Ident(method)) if CLOCKS.contains(&clock) && method == "now" => {
            Some(format!("{clock}::now"))
        }
        _ => None,
    }
}

fn grouped_std_module(tokens: TokenStream) -> Option<String> {
    let mut element_start = true;
    for token in tokens {
        match &token {
            TokenTree::Ident(ident) if element_start => {
                let name = ident.to_string();
                if STD_MODULES.contains(&name.as_str()) {
                    return Some(name);
                }
                element_start = false;
            }
            TokenTree::Punct(punct) if punct.as_char() == ',' => element_start = true,
            _ => element_start = false,
        }
    }
    None
}
