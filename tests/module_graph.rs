//! The crate's modules import only downward: no two modules import each
//! other, directly or in a circle.
//!
//! The check reads `src/` with `syn`, starting at `src/lib.rs`, and finds
//! every path that names a module of the crate (`use` trees, paths in code
//! and types, and `crate::`/`super::` paths inside macro calls). A path that
//! ends at a re-export (`pub use`) is followed to the module that defines the
//! item. Each reference is then seen at the level where the two modules part:
//! a reference from `a::x::y` to `a::z` is an edge `x → z` among the children
//! of `a`. A module using its own children, or a child using its ancestors'
//! items, is the tree itself and is not an edge. At every level the edges
//! must form no circle; a module that imports the module that wires it (its
//! sibling that uses it) is such a circle.
//!
//! Run it alone with `cargo test --test module_graph`; on failure it names
//! each circle and, for every edge in it, the first place that made it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// A module's path from the crate root, e.g. `["discovery", "kube", "hub"]`.
type ModPath = Vec<String>;

#[derive(Default)]
struct Module {
    children: BTreeSet<String>,
    /// `pub use` re-exports: the name the module gives the item, and the
    /// absolute path of what it names.
    reexports: BTreeMap<String, Vec<String>>,
    /// Every crate-relative path the module's code mentions, made absolute,
    /// with where it was seen.
    references: Vec<(Vec<String>, String)>,
}

struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

fn main_source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut krate = Crate {
            modules: BTreeMap::new(),
        };
        krate.read_file(Vec::new(), &src.join("lib.rs"), src);
        krate
    }

    /// Reads one file holding module `at`; `child_dir` is where its
    /// `mod x;` children live.
    fn read_file(&mut self, at: ModPath, file: &Path, child_dir: &Path) {
        let text = fs::read_to_string(file)
            .unwrap_or_else(|error| panic!("reading {}: {error}", file.display()));
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|error| panic!("parsing {}: {error}", file.display()));
        let shown = file
            .strip_prefix(main_source_dir().parent().unwrap_or(Path::new("")))
            .unwrap_or(file)
            .display()
            .to_string();
        self.read_items(at, &parsed.items, &shown, file, child_dir);
    }

    fn read_items(
        &mut self,
        at: ModPath,
        items: &[syn::Item],
        shown: &str,
        file: &Path,
        child_dir: &Path,
    ) {
        self.module_mut(&at);
        for item in items {
            match item {
                syn::Item::Mod(module) => {
                    let name = module.ident.to_string();
                    let mut child = at.clone();
                    child.push(name.clone());
                    self.module_mut(&at).children.insert(name.clone());
                    match &module.content {
                        Some((_, inner)) => {
                            // An inline module's own `mod x;` children live in
                            // a folder named after it.
                            let dir = child_dir.join(&name);
                            self.read_items(child, inner, shown, file, &dir);
                        }
                        None => {
                            let (child_file, grandchild_dir) = match path_attribute(&module.attrs) {
                                Some(explicit) => {
                                    let base = file.parent().unwrap_or(Path::new(""));
                                    let target = base.join(explicit);
                                    let dir = target.with_extension("");
                                    (target, dir)
                                }
                                None => {
                                    let flat = child_dir.join(format!("{name}.rs"));
                                    if flat.exists() {
                                        (flat, child_dir.join(&name))
                                    } else {
                                        let nested = child_dir.join(&name).join("mod.rs");
                                        (nested, child_dir.join(&name))
                                    }
                                }
                            };
                            self.read_file(child, &child_file, &grandchild_dir);
                        }
                    }
                }
                syn::Item::Use(used) if !matches!(used.vis, syn::Visibility::Inherited) => {
                    let mut flat = Vec::new();
                    flatten_use(&used.tree, &mut Vec::new(), &mut flat);
                    // Kept as written; made absolute once the whole tree is known.
                    for (alias, path) in flat {
                        if let Some(alias) = alias {
                            self.module_mut(&at).reexports.insert(alias, path);
                        }
                    }
                }
                _ => {}
            }
        }
        // The references of this module's own items (not of its inline
        // children, read above with their own module path).
        let mut collector = Collector::default();
        for item in items {
            if !matches!(item, syn::Item::Mod(_)) {
                collector.visit_item(item);
            }
        }
        for (path, line) in collector.paths {
            let reference = (path, format!("{shown}:{line}"));
            self.module_mut(&at).references.push(reference);
        }
    }

    fn module_mut(&mut self, at: &ModPath) -> &mut Module {
        self.modules.entry(at.clone()).or_default()
    }

    fn is_module(&self, path: &[String]) -> bool {
        self.modules.contains_key(path)
    }

    /// The module that defines what `path` (absolute) names: the deepest
    /// module along it, through re-exports.
    fn defining_module(&self, path: &[String], depth: usize) -> Option<ModPath> {
        let mut module: ModPath = Vec::new();
        let mut rest = path;
        while let Some((first, tail)) = rest.split_first() {
            let mut next = module.clone();
            next.push(first.clone());
            if self.is_module(&next) {
                module = next;
                rest = tail;
                continue;
            }
            if depth < 8
                && let Some(target) = self
                    .modules
                    .get(&module)
                    .and_then(|m| m.reexports.get(first))
            {
                let mut followed = target.clone();
                followed.extend(tail.iter().cloned());
                return self.defining_module(&followed, depth + 1);
            }
            break;
        }
        Some(module)
    }

    /// Edges among siblings: parent module → (from child → to child → where).
    fn sibling_edges(&self) -> BTreeMap<ModPath, BTreeMap<(String, String), String>> {
        let mut levels: BTreeMap<ModPath, BTreeMap<(String, String), String>> = BTreeMap::new();
        for (from, module) in &self.modules {
            for (path, place) in &module.references {
                let Some(to) = self.defining_module(path, 0) else {
                    continue;
                };
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    continue; // the tree itself: a parent and its descendant
                }
                levels
                    .entry(from[..common].to_vec())
                    .or_default()
                    .entry((from[common].clone(), to[common].clone()))
                    .or_insert_with(|| place.clone());
            }
        }
        levels
    }
}

fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| {
        if !attr.path().is_ident("path") {
            return None;
        }
        match &attr.meta {
            syn::Meta::NameValue(syn::MetaNameValue {
                value:
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(text),
                        ..
                    }),
                ..
            }) => Some(text.value()),
            _ => None,
        }
    })
}

/// Flattens a use tree into (the name it binds, the full path).
fn flatten_use(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Option<String>, Vec<String>)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut full = prefix.clone();
            let name = n.ident.to_string();
            if name == "self" {
                out.push((prefix.last().cloned(), full));
            } else {
                full.push(name.clone());
                out.push((Some(name), full));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix.clone();
            if r.ident != "self" {
                full.push(r.ident.to_string());
            }
            out.push((Some(r.rename.to_string()), full));
        }
        syn::UseTree::Glob(_) => out.push((None, prefix.clone())),
        syn::UseTree::Group(g) => {
            for inner in &g.items {
                flatten_use(inner, prefix, out);
            }
        }
    }
}

/// Makes a path seen in module `at` absolute, if it names the crate:
/// `crate::`, `super::`, `self::`, or a child module of `at`.
fn absolute(
    at: &[String],
    path: &[String],
    modules: &BTreeMap<ModPath, Module>,
) -> Option<Vec<String>> {
    let (first, _) = path.split_first()?;
    let mut base: Vec<String> = at.to_vec();
    let mut rest = path;
    match first.as_str() {
        "crate" => {
            base.clear();
            rest = &path[1..];
        }
        "self" => rest = &path[1..],
        "super" => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => {
            let mut child = base.clone();
            child.push(first.clone());
            if !modules.contains_key(&child) {
                return None;
            }
        }
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

#[derive(Default)]
struct Collector {
    /// Paths as written (not yet absolute), with the line they start on.
    paths: Vec<(Vec<String>, usize)>,
}

impl Collector {
    fn push(&mut self, path: Vec<String>, line: usize) {
        if matches!(
            path.first().map(String::as_str),
            Some("crate" | "super" | "self")
        ) || path.len() > 1
        {
            self.paths.push((path, line));
        }
    }

    fn scan_tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut index = 0;
        while index < trees.len() {
            if let TokenTree::Group(group) = &trees[index] {
                self.scan_tokens(group.stream());
                index += 1;
                continue;
            }
            let TokenTree::Ident(ident) = &trees[index] else {
                index += 1;
                continue;
            };
            let start = ident.to_string();
            if !matches!(start.as_str(), "crate" | "super") {
                index += 1;
                continue;
            }
            let line = ident.span().start().line;
            let mut path = vec![start];
            index += 1;
            // `:: ident` pairs, the `::` arriving as two `:` puncts.
            while index + 2 < trees.len()
                && matches!(&trees[index], TokenTree::Punct(p) if p.as_char() == ':')
                && matches!(&trees[index + 1], TokenTree::Punct(p) if p.as_char() == ':')
            {
                match &trees[index + 2] {
                    TokenTree::Ident(next) => {
                        path.push(next.to_string());
                        index += 3;
                    }
                    _ => break,
                }
            }
            self.push(path, line);
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = path
            .segments
            .first()
            .map(|s| s.ident.span().start().line)
            .unwrap_or(0);
        self.push(segments, line);
        syn::visit::visit_path(self, path);
    }

    fn visit_item_use(&mut self, used: &'ast syn::ItemUse) {
        let mut flat = Vec::new();
        flatten_use(&used.tree, &mut Vec::new(), &mut flat);
        let line = used.use_token.span.start().line;
        for (_, path) in flat {
            self.push(path, line);
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.scan_tokens(mac.tokens.clone());
    }
}

/// Every circle among the edges of one level, as strongly connected
/// components of more than one module.
fn circles(edges: &BTreeMap<(String, String), String>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
    let reach = |start: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.clone()];
        while let Some(node) = todo.pop() {
            for (a, b) in edges.keys() {
                if *a == node && seen.insert(b.clone()) {
                    todo.push(b.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut found: Vec<Vec<String>> = Vec::new();
    let mut placed = BTreeSet::new();
    for node in &nodes {
        if placed.contains(*node) || !reaches[node].contains(*node) {
            continue;
        }
        let component: Vec<String> = nodes
            .iter()
            .filter(|other| reaches[node].contains(**other) && reaches[**other].contains(*node))
            .map(|n| (*n).clone())
            .collect();
        placed.extend(component.iter().cloned());
        found.push(component);
    }
    found
}

/// Makes every collected path absolute, dropping those that name no module
/// of the crate (std, dependencies, local items).
fn resolve_references(krate: &mut Crate) {
    let shapes: BTreeMap<ModPath, Module> = krate
        .modules
        .keys()
        .map(|k| (k.clone(), Module::default()))
        .collect();
    for (at, module) in krate.modules.iter_mut() {
        module.references = std::mem::take(&mut module.references)
            .into_iter()
            .filter_map(|(path, place)| absolute(at, &path, &shapes).map(|p| (p, place)))
            .collect();
        module.reexports = std::mem::take(&mut module.reexports)
            .into_iter()
            .filter_map(|(alias, path)| absolute(at, &path, &shapes).map(|p| (alias, p)))
            .collect();
    }
}

fn read_crate() -> Crate {
    let mut krate = Crate::read(&main_source_dir());
    resolve_references(&mut krate);
    krate
}

#[test]
fn no_two_modules_import_each_other_directly_or_in_a_circle() {
    let krate = read_crate();
    let mut report = String::new();
    // `STRAIT_MODULE_GRAPH=1` prints every level's edges, circle or not.
    let print_all = std::env::var_os("STRAIT_MODULE_GRAPH").is_some();
    for (parent, edges) in krate.sibling_edges() {
        let name = if parent.is_empty() {
            "crate".to_string()
        } else {
            parent.join("::")
        };
        if print_all {
            println!("{name}:");
            for ((from, to), place) in &edges {
                println!("  {from} → {to}   first at {place}");
            }
        }
        for circle in circles(&edges) {
            report.push_str(&format!(
                "circle among the children of {name}: {circle:?}\n"
            ));
            for ((from, to), place) in &edges {
                if circle.contains(from) && circle.contains(to) {
                    report.push_str(&format!("  {from} → {to}   first at {place}\n"));
                }
            }
        }
    }
    assert!(report.is_empty(), "modules import each other:\n{report}");
}

#[test]
fn the_check_sees_the_crate_and_its_edges() {
    let krate = read_crate();
    // The walk found the tree (not only lib.rs) and real downward edges, so a
    // passing circle check is not one over an empty graph.
    assert!(krate.is_module(&["routing".to_string()]));
    assert!(krate.is_module(&["discovery".to_string(), "kube".to_string()]));
    let root = krate
        .sibling_edges()
        .remove(&Vec::new())
        .unwrap_or_default();
    assert!(
        root.contains_key(&("routing".to_string(), "model".to_string())),
        "routing → model not seen; root edges: {:?}",
        root.keys().collect::<Vec<_>>()
    );
}

#[test]
fn a_circle_is_found_and_a_chain_is_not() {
    let edge = |a: &str, b: &str| ((a.to_string(), b.to_string()), String::new());
    let chain: BTreeMap<_, _> = [edge("a", "b"), edge("b", "c")].into_iter().collect();
    assert!(circles(&chain).is_empty());
    let ring: BTreeMap<_, _> = [
        edge("a", "b"),
        edge("b", "c"),
        edge("c", "a"),
        edge("c", "d"),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&ring), vec![vec!["a", "b", "c"]]);
}
