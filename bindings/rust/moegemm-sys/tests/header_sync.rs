//! Keeps `src/lib.rs` in sync with `include/moegemm/moegemm.h` (and `version.h`):
//! - every `MOEGEMM_API ... moegemm_xxx(...)` of the header is declared in src/lib.rs with the
//!   same number of parameters, and src/lib.rs declares no function the header lacks;
//! - every enumerator and integer `#define MOEGEMM_*` of the headers has a Rust constant of
//!   the same name and value;
//! - the fields of `moegemm_problem_t` appear in the same order with the same names.
//! Plain text parsing: no dependency, no C compiler.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

fn repo_root() -> PathBuf {
    // bindings/rust/moegemm-sys -> repo root
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = here.join("../../..");
    assert!(
        root.join("include/moegemm/moegemm.h").is_file(),
        "cannot find include/moegemm/moegemm.h from {}",
        here.display()
    );
    root
}

fn read(p: PathBuf) -> String {
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// Removes /* */ and // comments.
fn strip_c_comments(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && i + 1 < b.len() && b[i + 1] == b'*' {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
            out.push(' ');
        } else if b[i] == b'/' && i + 1 < b.len() && b[i + 1] == b'/' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// Counts top-level comma-separated parameters in `params` (the text between the parens).
/// `void` alone and the empty list count 0; a trailing comma is ignored.
fn count_params(params: &str) -> usize {
    let mut depth = 0i32;
    let mut pieces = vec![String::new()];
    for c in params.chars() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            pieces.push(String::new());
        } else {
            pieces.last_mut().unwrap().push(c);
        }
    }
    pieces
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty() && *p != "void")
        .count()
}

/// Text between the '(' at `open` and its matching ')'.
fn paren_body(s: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &s[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses after offset {open}");
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `moegemm_xxx` -> parameter count, for every `MOEGEMM_API` declaration.
fn header_functions(h: &str) -> BTreeMap<String, usize> {
    let mut fns = BTreeMap::new();
    let mut rest = h;
    while let Some(pos) = rest.find("MOEGEMM_API") {
        let decl_start = pos + "MOEGEMM_API".len();
        let after = &rest[decl_start..];
        // Skip the macro's own definition lines (`#define MOEGEMM_API ...`).
        let line_start = rest[..pos].rfind('\n').map(|i| i + 1).unwrap_or(0);
        if rest[line_start..pos].trim_start().starts_with('#') {
            rest = after;
            continue;
        }
        let open = after.find('(').expect("MOEGEMM_API without '('");
        let before = after[..open].trim_end();
        let name_start = before.rfind(|c: char| !is_ident(c)).map(|i| i + 1).unwrap_or(0);
        let name = &before[name_start..];
        assert!(name.starts_with("moegemm_"), "unexpected exported name {name:?}");
        let params = paren_body(after, open);
        let prev = fns.insert(name.to_string(), count_params(params));
        assert!(prev.is_none(), "{name} declared twice in the header");
        rest = &after[open..];
    }
    fns
}

/// Functions of the `extern "C"` blocks of lib.rs: name -> parameter count.
fn rust_functions(rs: &str) -> BTreeMap<String, usize> {
    let mut fns = BTreeMap::new();
    let mut rest = rs;
    while let Some(pos) = rest.find("pub fn ") {
        let after = &rest[pos + "pub fn ".len()..];
        let open = after.find('(').unwrap();
        let name = after[..open].trim().to_string();
        let params = paren_body(after, open);
        // Only the FFI declarations: `pub fn moegemm_*(..) -> ..;` without a body.
        let tail = &after[open + params.len() + 2..];
        let end = tail.find(|c| c == ';' || c == '{').unwrap();
        if name.starts_with("moegemm_") && tail.as_bytes()[end] == b';' {
            let prev = fns.insert(name.clone(), count_params(params));
            assert!(prev.is_none(), "{name} declared twice in src/lib.rs");
        }
        rest = &after[open..];
    }
    fns
}

fn parse_int(v: &str) -> Option<i64> {
    let v = v.trim().trim_end_matches(|c| c == 'u' || c == 'U' || c == 'l' || c == 'L');
    if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        i64::from_str_radix(hex, 16).ok()
    } else {
        v.parse().ok()
    }
}

/// Enumerators (`MOEGEMM_X = 3,`) and integer `#define MOEGEMM_X 3u`.
fn header_constants(h: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for line in h.lines() {
        let l = line.trim();
        if let Some(def) = l.strip_prefix("#define ") {
            let mut it = def.split_whitespace();
            if let (Some(name), Some(val)) = (it.next(), it.next()) {
                if name.starts_with("MOEGEMM_") && !name.contains('(') {
                    if let Some(v) = parse_int(val) {
                        out.insert(name.to_string(), v);
                    }
                }
            }
            continue;
        }
        if l.starts_with("MOEGEMM_") {
            if let Some((name, val)) = l.split_once('=') {
                let name = name.trim();
                let val = val.trim().trim_end_matches(',');
                if name.chars().all(is_ident) {
                    let v = parse_int(val)
                        .unwrap_or_else(|| panic!("enumerator {name} has non-literal value {val}"));
                    out.insert(name.to_string(), v);
                }
            }
        }
    }
    out
}

/// `pub const NAME: T = literal;` of lib.rs.
fn rust_constants(rs: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for line in rs.lines() {
        let l = line.trim();
        if let Some(c) = l.strip_prefix("pub const ") {
            let (name, rest) = c.split_once(':').unwrap();
            if let Some((_, val)) = rest.split_once('=') {
                if let Some(v) = parse_int(val.trim().trim_end_matches(';')) {
                    out.insert(name.trim().to_string(), v);
                }
            }
        }
    }
    out
}

/// Field names of `typedef struct <tag> { ... }` in the (comment-free) header.
fn header_struct_fields(h: &str, tag: &str) -> Vec<String> {
    let start = h
        .find(&format!("typedef struct {tag} {{"))
        .unwrap_or_else(|| panic!("{tag} not found in the header"));
    let body_start = start + h[start..].find('{').unwrap() + 1;
    let body_end = body_start + h[body_start..].find('}').unwrap();
    h[body_start..body_end]
        .split(';')
        .map(|d| d.trim())
        .filter(|d| !d.is_empty())
        .map(|d| {
            let i = d.rfind(|c: char| !is_ident(c)).map(|i| i + 1).unwrap_or(0);
            d[i..].to_string()
        })
        .collect()
}

/// Field names of `pub struct <name> { ... }` in lib.rs.
fn rust_struct_fields(rs: &str, name: &str) -> Vec<String> {
    let start = rs
        .find(&format!("pub struct {name} {{"))
        .unwrap_or_else(|| panic!("Rust {name} not found"));
    let body_start = start + rs[start..].find('{').unwrap() + 1;
    let body_end = body_start + rs[body_start..].find('}').unwrap();
    rs[body_start..body_end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .map(|l| l.split(':').next().unwrap().trim().to_string())
        .collect()
}

fn header_problem_fields(h: &str) -> Vec<String> {
    header_struct_fields(h, "moegemm_problem")
}

fn rust_problem_fields(rs: &str) -> Vec<String> {
    rust_struct_fields(rs, "moegemm_problem_t")
}

fn load() -> (String, String) {
    let root = repo_root();
    let mut h = strip_c_comments(&read(root.join("include/moegemm/moegemm.h")));
    h.push('\n');
    h.push_str(&strip_c_comments(&read(root.join("include/moegemm/version.h"))));
    let rs = read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"));
    (h, rs)
}

#[test]
fn parser_self_check() {
    assert_eq!(count_params("void"), 0);
    assert_eq!(count_params(""), 0);
    assert_eq!(count_params("int a, void (*f)(int, int), char* b"), 3);
    assert_eq!(count_params("a: *const i32,\n b: Option<fn(i32, i32)>,\n"), 2);
    let h = "MOEGEMM_API int moegemm_x(void);\nMOEGEMM_API const char* moegemm_y(int a,\n int b);";
    let f = header_functions(h);
    assert_eq!(f.get("moegemm_x"), Some(&0));
    assert_eq!(f.get("moegemm_y"), Some(&2));
}

#[test]
fn every_header_function_is_declared_with_the_same_arity() {
    let (h, rs) = load();
    let hf = header_functions(&h);
    let rf = rust_functions(&rs);
    assert!(hf.len() >= 16, "parsed only {} header functions: {hf:?}", hf.len());
    let mut errors = Vec::new();
    for (name, n) in &hf {
        match rf.get(name) {
            None => errors.push(format!("{name} ({n} params) is in the header but not in src/lib.rs")),
            Some(m) if m != n => errors.push(format!("{name}: header has {n} params, src/lib.rs {m}")),
            _ => {}
        }
    }
    for name in rf.keys() {
        if !hf.contains_key(name) {
            errors.push(format!("{name} is declared in src/lib.rs but not in the header"));
        }
    }
    assert!(errors.is_empty(), "header/FFI drift:\n  {}", errors.join("\n  "));
}

#[test]
fn every_header_constant_matches() {
    let (h, rs) = load();
    let hc = header_constants(&h);
    let rc = rust_constants(&rs);
    assert!(hc.contains_key("MOEGEMM_STATUS_INTERNAL_ERROR"), "parsed constants: {hc:?}");
    assert!(hc.contains_key("MOEGEMM_LOG_TRACE"));
    assert!(hc.contains_key("MOEGEMM_SIZES_CLAMPED_CAPACITY"));
    let mut errors = Vec::new();
    for (name, v) in &hc {
        match rc.get(name) {
            None => errors.push(format!("{name} = {v} missing in src/lib.rs")),
            Some(r) if r != v => errors.push(format!("{name}: header {v}, src/lib.rs {r}")),
            _ => {}
        }
    }
    assert!(errors.is_empty(), "constant drift:\n  {}", errors.join("\n  "));
}

#[test]
fn problem_struct_fields_match() {
    let (h, rs) = load();
    let hf = header_problem_fields(&h);
    assert_eq!(hf.first().map(String::as_str), Some("struct_size"));
    assert_eq!(hf, rust_problem_fields(&rs), "moegemm_problem_t fields differ (name or order)");
}

#[test]
fn every_header_struct_is_mirrored_field_by_field() {
    let (h, rs) = load();
    let mut tags = Vec::new();
    let mut rest = h.as_str();
    while let Some(pos) = rest.find("typedef struct ") {
        let after = &rest[pos + "typedef struct ".len()..];
        let tag: String = after.chars().take_while(|&c| is_ident(c)).collect();
        if after[tag.len()..].trim_start().starts_with('{') {
            tags.push(tag);
        }
        rest = after;
    }
    for want in ["moegemm_problem", "moegemm_tensors", "moegemm_moe_problem", "moegemm_moe_tensors"] {
        assert!(tags.iter().any(|t| t == want), "{want} not parsed from the header: {tags:?}");
    }
    for tag in &tags {
        let hf = header_struct_fields(&h, tag);
        assert_eq!(hf.first().map(String::as_str), Some("struct_size"), "{tag}");
        assert_eq!(hf, rust_struct_fields(&rs, &format!("{tag}_t")), "{tag}_t fields differ (name or order)");
    }
}

#[test]
fn struct_size_agrees_with_the_library() {
    let mut p = std::mem::MaybeUninit::<moegemm_sys::moegemm_problem_t>::zeroed();
    assert_eq!(unsafe { moegemm_sys::moegemm_problem_init(p.as_mut_ptr()) }, 0);
    let p = unsafe { p.assume_init() };
    assert_eq!(p.struct_size, std::mem::size_of::<moegemm_sys::moegemm_problem_t>());
    assert_eq!(p.struct_size, moegemm_sys::MOEGEMM_PROBLEM_SIZE_0_2);
}

#[test]
fn runtime_version_matches_header() {
    let v = unsafe { moegemm_sys::moegemm_get_version() };
    assert_eq!(v, moegemm_sys::MOEGEMM_VERSION);
    let s = unsafe { std::ffi::CStr::from_ptr(moegemm_sys::moegemm_get_version_string()) };
    let want = format!(
        "{}.{}.{}",
        moegemm_sys::MOEGEMM_VERSION_MAJOR,
        moegemm_sys::MOEGEMM_VERSION_MINOR,
        moegemm_sys::MOEGEMM_VERSION_PATCH
    );
    assert_eq!(s.to_str().unwrap(), want);
}

#[test]
fn status_names_match_constants() {
    let (h, _) = load();
    for (name, v) in header_constants(&h) {
        if name.starts_with("MOEGEMM_STATUS_") {
            let got = unsafe { std::ffi::CStr::from_ptr(moegemm_sys::moegemm_status_name(v as i32)) };
            assert_eq!(got.to_str().unwrap(), name);
        }
    }
}
