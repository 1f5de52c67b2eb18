//! Finds libmoegemm without any crate from outside (no `pkg-config` crate):
//!
//! 1. `MOEGEMM_LIB_DIR`: a folder holding libmoegemm.so (for instance the CMake build folder);
//!    `MOEGEMM_STATIC=1` links `libmoegemm.a` from it instead.
//! 2. the `pkg-config` program (`$PKG_CONFIG`, default `pkg-config`):
//!    `pkg-config --libs-only-L --libs-only-l moegemm`, honouring `PKG_CONFIG_PATH`.
//! 3. otherwise links `-lmoegemm` from the linker's default paths and warns.
//!
//! `DOCS_RS` set: nothing is linked (docs.rs has no libmoegemm).

use std::env;
use std::process::Command;

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

    if env::var_os("DOCS_RS").is_some() {
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
            for tok in text.split_whitespace() {
                if let Some(dir) = tok.strip_prefix("-L") {
                    println!("cargo:rustc-link-search=native={dir}");
                    println!("cargo:lib_dir={dir}");
                } else if let Some(lib) = tok.strip_prefix("-l") {
                    let k = if lib == "moegemm" { kind } else { "dylib" };
                    println!("cargo:rustc-link-lib={k}={lib}");
                    found_lib |= lib == "moegemm";
                }
            }
            if !found_lib {
                println!("cargo:rustc-link-lib={kind}=moegemm");
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
}
