//! `corelog-purity PATH...`: the code check of `scripts/purity.sh`. Each
//! PATH is a crate's folder (`wire`) or a file or folder inside one (a pure
//! module of an otherwise I/O crate); every non-test item of the files it
//! selects must name no file, socket, process, thread, clock or async
//! runtime (the names are in `scan`).
//!
//! What is test code is decided as the compiler decides it: files are
//! found from the crate root through its `mod` declarations, and exactly
//! the items under `#[cfg(test)]` are left out, wherever they are in a
//! file. (The shell check this replaced stopped reading each file at its
//! first `#[cfg(test)]` and went by file names.)
//!
//! Exit status: 0 clean, 1 with findings (each `file:line: code`), 2 when
//! it cannot check (an unreadable or unparsable file, a path that selects
//! no code, a file the crate root does not reach).

mod scan;
mod strip;
mod tree;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use quote::ToTokens;

use crate::scan::{Finding, scan};
use crate::strip::strip_tests;
use crate::tree::{Role, crate_files};

/// Why a path could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{path}: cannot read it: {source}", path = .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: cannot parse it: {message}", path = .path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: not inside a crate (no src/lib.rs, src/main.rs or src/bin above it)", path = .0.display())]
    NoCrate(PathBuf),
    #[error("{path}: a crate folder without src/lib.rs, src/main.rs or src/bin/*.rs", path = .0.display())]
    NoCrateRoot(PathBuf),
    #[error("{path}: selects no code outside tests; is the path right?", path = .0.display())]
    NothingSelected(PathBuf),
    #[error(
        "{path}: not reached from the crate root by any `mod`, so it cannot be told whether it is compiled",
        path = .0.display()
    )]
    Unreached(PathBuf),
}

/// One forbidden name in one file.
#[derive(Debug, PartialEq, Eq)]
pub struct Violation {
    /// The file.
    pub path: PathBuf,
    /// Where and what.
    pub finding: Finding,
}

fn main() -> ExitCode {
    let paths: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if paths.is_empty() {
        eprintln!("usage: corelog-purity PATH...   (a crate folder, or a file or folder in one)");
        return ExitCode::from(2);
    }
    let mut status = ExitCode::SUCCESS;
    for path in &paths {
        match check(path) {
            Ok(violations) if violations.is_empty() => {}
            Ok(violations) => {
                print_violations(path, &violations);
                status = ExitCode::FAILURE;
            }
            Err(error) => {
                eprintln!("purity: {error}");
                return ExitCode::from(2);
            }
        }
    }
    status
}

fn print_violations(path: &Path, violations: &[Violation]) {
    println!(
        "{} is pure (no I/O, clock, process or thread outside tests), but:",
        path.display()
    );
    for violation in violations {
        let source = fs::read_to_string(&violation.path).unwrap_or_default();
        let line = source
            .lines()
            .nth(violation.finding.line.saturating_sub(1))
            .unwrap_or("")
            .trim();
        println!(
            "{}:{}: {line}   ({})",
            violation.path.display(),
            violation.finding.line,
            violation.finding.name
        );
    }
}

/// The forbidden names in the non-test code `path` selects.
///
/// # Errors
/// [`CheckError`] when it cannot tell.
pub fn check(path: &Path) -> Result<Vec<Violation>, CheckError> {
    let root = crate_root(path).ok_or_else(|| CheckError::NoCrate(path.to_path_buf()))?;
    let files = crate_files(&root)?;
    for source in rust_files(&root.join("src"))? {
        if source.starts_with(path) && !files.contains_key(&source) {
            return Err(CheckError::Unreached(source));
        }
    }
    let mut selected = 0;
    let mut violations = Vec::new();
    for (file_path, (role, file)) in files {
        if role == Role::TestOnly || !file_path.starts_with(path) {
            continue;
        }
        selected += 1;
        let mut file = file;
        strip_tests(&mut file);
        for finding in scan(file.into_token_stream()) {
            violations.push(Violation {
                path: file_path.clone(),
                finding,
            });
        }
    }
    if selected == 0 {
        return Err(CheckError::NothingSelected(path.to_path_buf()));
    }
    Ok(violations)
}

/// The folder of the crate `path` is in (or is).
fn crate_root(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|dir| {
            let src = dir.join("src");
            src.join("lib.rs").is_file()
                || src.join("main.rs").is_file()
                || src.join("bin").is_dir()
        })
        .map(Path::to_path_buf)
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Result<BTreeSet<PathBuf>, CheckError> {
    let mut found = BTreeSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = fs::read_dir(&dir).map_err(|source| CheckError::Read {
            path: dir.clone(),
            source,
        })?;
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                found.insert(path);
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests;
