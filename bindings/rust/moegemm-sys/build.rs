//! Finds libmoegemm without any crate from outside (no `pkg-config` crate):
//!
//! 1. `MOEGEMM_LIB_DIR`: a folder holding libmoegemm.so (for instance the CMake build folder);
//!    `MOEGEMM_STATIC=1` links `libmoegemm.a` from it instead.
//! 2. the `pkg-config` program (`$PKG_CONFIG`, default `pkg-config`):
//!    `pkg-config --libs-only-L --libs-only-l moegemm`, honouring `PKG_CONFIG_PATH`.
//! 3. otherwise links `-lmoegemm` from the linker's default paths and warns.
//!
//! `DOCS_RS` set: nothing is linked (docs.rs has no libmoegemm).
//!
//! The 0.2 API (epilogues, gathers, the MoE layer, autotuning): when the library found in a
//! folder is read with `nm` (`$NM`, default `nm`) and lacks `moegemm_moe_execute`,
//! `moegemm_plan_autotune` or `moegemm_moe_plan_autotune` (a library built before the 0.2
//! API, or before its last part), the build warns and leaves out the cfg `moegemm_0_2`, which
//! gates the tests of that API here and in the `moegemm` crate (through
//! `DEP_MOEGEMM_API_0_2`), so that the rest still links and runs. When it cannot tell (no
//! `nm`, the library in the linker's default paths) the cfg is set.

use std::env;
use std::path::Path;
use std::process::Command;

/// Functions of the 0.2 API whose presence `exports_0_2` checks: the MoE layer and the last
/// ones added (autotuning, of a plan and of a layer), so that a library built between them
/// counts as older.
const API_0_2_PROBES: [&str; 3] =
    ["moegemm_moe_execute", "moegemm_plan_autotune", "moegemm_moe_plan_autotune"];

/// Whether the library in `dir` exports the 0.2 API: `None` when it cannot tell.
fn exports_0_2(dir: &Path, static_link: bool) -> Option<bool> {
    let file = dir.join(if static_link { "libmoegemm.a" } else { "libmoegemm.so" });
    if !file.is_file() {
        return None;
    }
    println!("cargo:rerun-if-changed={}", file.display());
    let nm = env::var("NM").unwrap_or_else(|_| "nm".to_string());
    let mut cmd = Command::new(nm);
    if !static_link {
        cmd.arg("-D");
    }
    let out = cmd.arg("--defined-only").arg(&file).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(API_0_2_PROBES.iter().all(|probe| text.split_whitespace().any(|w| w == *probe)))
}

/// Sets the cfg `moegemm_0_2` (and `DEP_MOEGEMM_API_0_2` for dependents) unless the library
/// is known to lack the 0.2 API.
fn announce_api(found: Option<bool>, dir: &str) {
    if found == Some(false) {
        println!(
            "cargo:warning=libmoegemm in {dir} does not export the 0.2 API (moegemm_moe_execute, \
             moegemm_moe_plan_autotune, ...): built from an older source? The tests of that API \
             are left out; rebuild the library to run them"
        );
        println!("cargo:api_0_2=0");
    } else {
        println!("cargo:rustc-cfg=moegemm_0_2");
        println!("cargo:api_0_2=1");
    }
}

fn main() {
    for var in [
        "MOEGEMM_LIB_DIR",
        "MOEGEMM_STATIC",
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
        "DOCS_RS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-check-cfg=cfg(moegemm_0_2)");

    if env::var_os("DOCS_RS").is_some() {
        announce_api(None, "");
        return;
    }

    let static_link = env::var("MOEGEMM_STATIC").map(|v| v == "1").unwrap_or(false);
    let kind = if static_link { "static" } else { "dylib" };

    // 1. Explicit override.
    if let Some(dir) = env::var_os("MOEGEMM_LIB_DIR").filter(|d| !d.is_empty()) {
        let dir = std::path::PathBuf::from(dir);
        if !dir.is_dir() {
            println!(
                "cargo:warning=MOEGEMM_LIB_DIR={} is not a directory; linking will likely fail",
                dir.display()
            );
        }
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-lib={kind}=moegemm");
        if static_link {
            // The static library needs what the shared one hides (moegemm.pc's Libs.private).
            for lib in ["cublasLt", "cudart", "stdc++", "m"] {
                println!("cargo:rustc-link-lib=dylib={lib}");
            }
        }
        // Exposed to dependents as DEP_MOEGEMM_LIB_DIR (thanks to `links = "moegemm"`).
        println!("cargo:lib_dir={}", dir.display());
        announce_api(exports_0_2(&dir, static_link), &dir.display().to_string());
        return;
    }

    // 2. The pkg-config program.
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let mut args = vec!["--libs-only-L", "--libs-only-l"];
    if static_link {
        args.push("--static");
    }
    args.push("moegemm");
    match Command::new(&pkg_config).args(&args).output() {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let mut found_lib = false;
            let mut api = None;
            for tok in text.split_whitespace() {
                if let Some(dir) = tok.strip_prefix("-L") {
                    println!("cargo:rustc-link-search=native={dir}");
                    println!("cargo:lib_dir={dir}");
                    if api.is_none() {
                        api = exports_0_2(Path::new(dir), static_link).map(|f| (f, dir.to_string()));
                    }
                } else if let Some(lib) = tok.strip_prefix("-l") {
                    let k = if lib == "moegemm" { kind } else { "dylib" };
                    println!("cargo:rustc-link-lib={k}={lib}");
                    found_lib |= lib == "moegemm";
                }
            }
            if !found_lib {
                println!("cargo:rustc-link-lib={kind}=moegemm");
            }
            match api {
                Some((found, dir)) => announce_api(Some(found), &dir),
                None => announce_api(None, ""),
            }
            return;
        }
        Ok(out) => {
            println!(
                "cargo:warning=`{pkg_config} {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Err(e) => {
            println!("cargo:warning=could not run `{pkg_config}`: {e}");
        }
    }

    // 3. Fallback.
    println!(
        "cargo:warning=libmoegemm not located (set MOEGEMM_LIB_DIR or PKG_CONFIG_PATH); \
         linking -lmoegemm from the default library paths"
    );
    println!("cargo:rustc-link-lib={kind}=moegemm");
    announce_api(None, "");
}
