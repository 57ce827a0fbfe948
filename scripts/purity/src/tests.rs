use std::path::{Path, PathBuf};

use super::{CheckError, check};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// (file name, line, name) of each violation in `path`.
fn found(path: &Path) -> Vec<(String, usize, String)> {
    check(path)
        .unwrap()
        .into_iter()
        .map(|violation| {
            let file = violation.path.file_name().unwrap().to_string_lossy();
            (
                file.into_owned(),
                violation.finding.line,
                violation.finding.name,
            )
        })
        .collect()
}

/// The case the shell check missed: it stopped reading at the first
/// `#[cfg(test)]`, so I/O after a test module was never seen.
#[test]
fn io_after_a_test_module_is_found_and_the_test_module_is_not() {
    assert_eq!(
        found(&fixture("io_after_tests")),
        [("lib.rs".to_owned(), 19, "std::fs".to_owned())]
    );
}

#[test]
fn exactly_the_cfg_test_items_and_files_are_left_out() {
    let found = found(&fixture("test_items"));
    let expected = [
        ("codec.rs", 4, "tokio"),
        ("lib.rs", 3, "std::net"),
        ("lib.rs", 33, "Instant::now"),
        ("lib.rs", 39, "std::process"),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(file, line, name)| ((*file).to_owned(), *line, (*name).to_owned()))
        .collect();
    assert_eq!(found, expected);
}

#[test]
fn a_single_file_of_a_crate_can_be_checked_alone() {
    let codec = fixture("test_items").join("src").join("codec.rs");
    assert_eq!(
        found(&codec),
        [("codec.rs".to_owned(), 4, "tokio".to_owned())]
    );
    let helpers = fixture("test_items").join("src").join("helpers.rs");
    assert!(matches!(
        check(&helpers),
        Err(CheckError::NothingSelected(_))
    ));
}

#[test]
fn a_file_no_mod_reaches_is_an_error_not_a_pass() {
    let error = check(&fixture("stray")).unwrap_err();
    assert!(
        matches!(&error, CheckError::Unreached(path) if path.ends_with("orphan.rs")),
        "{error}"
    );
}

#[test]
fn a_path_outside_any_crate_is_an_error() {
    let error = check(Path::new("/nonexistent/purity/fixture")).unwrap_err();
    assert!(matches!(error, CheckError::NoCrate(_)), "{error}");
}
