//! A crate's source files as the compiler finds them: from its roots
//! (`src/lib.rs`, `src/main.rs`, `src/bin/*.rs`) through every `mod x;`,
//! `#[path]` included. A file reached only through a `#[cfg(test)]`
//! declaration is test code; so is everything it declares.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use syn::{File, Item, ItemMod, LitStr};

use crate::CheckError;
use crate::strip::{is_test, item_attrs};

/// Whether a file is compiled outside tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Compiled into the crate: checked.
    Code,
    /// Compiled only under `cfg(test)`: not checked.
    TestOnly,
}

/// Every file of the crate at `root` (its folder), with its role, parsed.
pub fn crate_files(root: &Path) -> Result<BTreeMap<PathBuf, (Role, File)>, CheckError> {
    let src = root.join("src");
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|name| src.join(name))
        .filter(|path| path.is_file())
        .collect();
    if let Ok(entries) = fs::read_dir(src.join("bin")) {
        let mut bins: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
            .collect();
        bins.sort();
        roots.extend(bins);
    }
    if roots.is_empty() {
        return Err(CheckError::NoCrateRoot(root.to_path_buf()));
    }
    let mut files = BTreeMap::new();
    for path in roots {
        visit(&path, Role::Code, &mut files)?;
    }
    Ok(files)
}

/// Parses `path` and the files it declares, `role` and below.
fn visit(
    path: &Path,
    role: Role,
    files: &mut BTreeMap<PathBuf, (Role, File)>,
) -> Result<(), CheckError> {
    // Reached as code once: code, whatever else reaches it.
    if let Some((known, _)) = files.get(path)
        && (*known == Role::Code || role == Role::TestOnly)
    {
        return Ok(());
    }
    let text = fs::read_to_string(path).map_err(|source| CheckError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file = syn::parse_file(&text).map_err(|error| CheckError::Parse {
        path: path.to_path_buf(),
        line: error.span().start().line,
        message: error.to_string(),
    })?;
    let role = if is_test(&file.attrs) {
        Role::TestOnly
    } else {
        role
    };
    let mut declared = Vec::new();
    declarations(&file.items, path, &module_dir(path), false, &mut declared);
    files.insert(path.to_path_buf(), (role, file));
    for (child, test) in declared {
        let child_role = if test { Role::TestOnly } else { role };
        visit(&child, child_role, files)?;
    }
    Ok(())
}

/// Where `path`'s child modules live: beside a `lib.rs`, `main.rs` or
/// `mod.rs`, in a folder named after any other file.
fn module_dir(path: &Path) -> PathBuf {
    let parent = path.parent().unwrap_or(Path::new("."));
    let stem = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or("");
    let is_bin_root = parent.file_name().is_some_and(|name| name == "bin");
    if matches!(stem, "lib" | "main" | "mod") || is_bin_root {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    }
}

/// The files `items` (of `file`) declare (`mod x;`), with whether each is
/// under `#[cfg(test)]`. `dir` is where undecorated declarations resolve;
/// `in_test` whether `items` are inside a `#[cfg(test)] mod x { .. }`.
fn declarations(
    items: &[Item],
    file: &Path,
    dir: &Path,
    in_test: bool,
    out: &mut Vec<(PathBuf, bool)>,
) {
    for item in items {
        let Item::Mod(module) = item else { continue };
        let test = in_test || is_test(item_attrs(item));
        let name = module.ident.to_string();
        match &module.content {
            Some((_, inner)) => {
                let inner_dir = match path_attr(module) {
                    Some(path) => dir.join(path),
                    None => dir.join(&name),
                };
                declarations(inner, file, &inner_dir, test, out);
            }
            None => {
                let child = match path_attr(module) {
                    // Relative to the declaring file's folder (outside
                    // inline modules, the only use in this workspace).
                    Some(path) if dir == module_dir(file) => {
                        file.parent().unwrap_or(Path::new(".")).join(path)
                    }
                    Some(path) => dir.join(path),
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        if flat.is_file() {
                            flat
                        } else {
                            dir.join(&name).join("mod.rs")
                        }
                    }
                };
                out.push((child, test));
            }
        }
    }
}

/// The value of a `#[path = ".."]` attribute.
fn path_attr(module: &ItemMod) -> Option<String> {
    module.attrs.iter().find_map(|attr| {
        if !attr.path().is_ident("path") {
            return None;
        }
        let value = &attr.meta.require_name_value().ok()?.value;
        let syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(text),
            ..
        }) = value
        else {
            return None;
        };
        Some(LitStr::value(text))
    })
}
