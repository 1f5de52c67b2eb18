//! Only for the examples: they declare a few CUDA runtime functions themselves and link
//! `cudart`, so add the CUDA toolkit's library folder to the search path when one is found
//! (CUDA_HOME, CUDA_PATH, CUDA_ROOT, CUDA_TOOLKIT_ROOT_DIR, then /usr/local/cuda).
//! The library crate itself links nothing from CUDA.
//!
//! Also forwards moegemm-sys's finding on the 0.2 API (`DEP_MOEGEMM_API_0_2`) as the cfg
//! `moegemm_0_2`, which gates this crate's tests of that API.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(moegemm_0_2)");
    println!("cargo:rerun-if-env-changed=DEP_MOEGEMM_API_0_2");
    if env::var("DEP_MOEGEMM_API_0_2").map(|v| v != "0").unwrap_or(true) {
        println!("cargo:rustc-cfg=moegemm_0_2");
    }
    let vars = ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR"];
    for v in vars {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let mut roots: Vec<PathBuf> = vars.iter().filter_map(|v| env::var_os(v)).map(PathBuf::from).collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    for root in roots {
        for sub in ["lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"] {
            let dir = root.join(sub);
            if dir.join("libcudart.so").exists() {
                println!("cargo:rustc-link-search=native={}", dir.display());
                return;
            }
        }
    }
}
