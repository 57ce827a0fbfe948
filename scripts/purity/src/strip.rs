//! Leaving out exactly what only tests compile: every item, statement,
//! field, variant or match arm under `#[cfg(test)]`, wherever it is in a
//! file, and nothing else.

use syn::punctuated::Punctuated;
use syn::visit_mut::{self, VisitMut};
use syn::{
    Arm, Attribute, Block, ExprStruct, Field, FieldValue, Fields, File, ImplItem, Item, ItemEnum,
    ItemForeignMod, ItemImpl, ItemMod, ItemTrait, Stmt, TraitItem, Variant,
};

/// Whether `attrs` hold `#[cfg(test)]` (exactly: `cfg(any(test, ..))` is
/// compiled outside tests too, so it stays and is checked).
pub fn is_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Path>()
                .is_ok_and(|path| path.is_ident("test"))
    })
}

/// An item's attributes (none for verbatim tokens, which are kept).
pub fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(item) => &item.attrs,
        Item::Enum(item) => &item.attrs,
        Item::ExternCrate(item) => &item.attrs,
        Item::Fn(item) => &item.attrs,
        Item::ForeignMod(item) => &item.attrs,
        Item::Impl(item) => &item.attrs,
        Item::Macro(item) => &item.attrs,
        Item::Mod(item) => &item.attrs,
        Item::Static(item) => &item.attrs,
        Item::Struct(item) => &item.attrs,
        Item::Trait(item) => &item.attrs,
        Item::TraitAlias(item) => &item.attrs,
        Item::Type(item) => &item.attrs,
        Item::Union(item) => &item.attrs,
        Item::Use(item) => &item.attrs,
        _ => &[],
    }
}

fn impl_item_attrs(item: &ImplItem) -> &[Attribute] {
    match item {
        ImplItem::Const(item) => &item.attrs,
        ImplItem::Fn(item) => &item.attrs,
        ImplItem::Type(item) => &item.attrs,
        ImplItem::Macro(item) => &item.attrs,
        _ => &[],
    }
}

fn trait_item_attrs(item: &TraitItem) -> &[Attribute] {
    match item {
        TraitItem::Const(item) => &item.attrs,
        TraitItem::Fn(item) => &item.attrs,
        TraitItem::Type(item) => &item.attrs,
        TraitItem::Macro(item) => &item.attrs,
        _ => &[],
    }
}

/// A statement's attributes. An expression statement's are not looked at:
/// one under `#[cfg(test)]` is then checked, which can only flag too much.
fn stmt_attrs(stmt: &Stmt) -> &[Attribute] {
    match stmt {
        Stmt::Local(local) => &local.attrs,
        Stmt::Item(item) => item_attrs(item),
        Stmt::Macro(mac) => &mac.attrs,
        Stmt::Expr(..) => &[],
    }
}

/// Keeps the elements of `list` whose attributes are not `#[cfg(test)]`.
fn retain_punctuated<T, P>(list: &mut Punctuated<T, P>, attrs: fn(&T) -> &[Attribute])
where
    P: Default,
{
    let kept: Punctuated<T, P> = std::mem::take(list)
        .into_iter()
        .filter(|element| !is_test(attrs(element)))
        .collect();
    *list = kept;
}

/// Removes every `#[cfg(test)]` part of `file`; the whole file when it is
/// `#![cfg(test)]`.
pub fn strip_tests(file: &mut File) {
    if is_test(&file.attrs) {
        file.items.clear();
        return;
    }
    StripTests.visit_file_mut(file);
}

struct StripTests;

impl VisitMut for StripTests {
    fn visit_file_mut(&mut self, file: &mut File) {
        file.items.retain(|item| !is_test(item_attrs(item)));
        visit_mut::visit_file_mut(self, file);
    }

    fn visit_item_mod_mut(&mut self, module: &mut ItemMod) {
        if let Some((_, items)) = &mut module.content {
            items.retain(|item| !is_test(item_attrs(item)));
        }
        visit_mut::visit_item_mod_mut(self, module);
    }

    fn visit_item_impl_mut(&mut self, item: &mut ItemImpl) {
        item.items.retain(|inner| !is_test(impl_item_attrs(inner)));
        visit_mut::visit_item_impl_mut(self, item);
    }

    fn visit_item_trait_mut(&mut self, item: &mut ItemTrait) {
        item.items.retain(|inner| !is_test(trait_item_attrs(inner)));
        visit_mut::visit_item_trait_mut(self, item);
    }

    fn visit_item_foreign_mod_mut(&mut self, item: &mut ItemForeignMod) {
        item.items.retain(|inner| match inner {
            syn::ForeignItem::Fn(inner) => !is_test(&inner.attrs),
            syn::ForeignItem::Static(inner) => !is_test(&inner.attrs),
            _ => true,
        });
        visit_mut::visit_item_foreign_mod_mut(self, item);
    }

    fn visit_block_mut(&mut self, block: &mut Block) {
        block.stmts.retain(|stmt| !is_test(stmt_attrs(stmt)));
        visit_mut::visit_block_mut(self, block);
    }

    fn visit_fields_mut(&mut self, fields: &mut Fields) {
        match fields {
            Fields::Named(named) => {
                retain_punctuated(&mut named.named, |field: &Field| &field.attrs)
            }
            Fields::Unnamed(unnamed) => {
                retain_punctuated(&mut unnamed.unnamed, |field: &Field| &field.attrs);
            }
            Fields::Unit => {}
        }
        visit_mut::visit_fields_mut(self, fields);
    }

    fn visit_item_enum_mut(&mut self, item: &mut ItemEnum) {
        retain_punctuated(&mut item.variants, |variant: &Variant| &variant.attrs);
        visit_mut::visit_item_enum_mut(self, item);
    }

    fn visit_expr_struct_mut(&mut self, expr: &mut ExprStruct) {
        retain_punctuated(&mut expr.fields, |field: &FieldValue| &field.attrs);
        visit_mut::visit_expr_struct_mut(self, expr);
    }

    fn visit_expr_match_mut(&mut self, expr: &mut syn::ExprMatch) {
        expr.arms.retain(|arm: &Arm| !is_test(&arm.attrs));
        visit_mut::visit_expr_match_mut(self, expr);
    }
}
