#!/usr/bin/env bash
# Puts the few vLLM files that bench/moe_layer.py loads at run time into a git-ignored folder
# (default build-peers/vllm/), so that a GPU machine without network and without the vllm
# package can run vLLM's Triton fused_moe as a peer: carry that folder with the working tree.
# vLLM's code is read from there at run time and never committed to this repository.
#
#   bench/tools/fetch_vllm_fused_moe.sh [--git-dir DIR [--rev REV]] [--version V] [--dest DIR]
#
# Source, first that applies:
#   --git-dir DIR (or VLLM_GIT_DIR): a local git mirror of vllm-project/vllm (bare or not);
#       files are read with `git show REV:path` (REV default HEAD);
#   else the vllm wheel of the given version from PyPI (--version or VLLM_VERSION, default
#       below): `pip download --no-deps`, only the files below are unpacked, the wheel deleted.
# Files: fused_moe.py (fused_moe_kernel, the config lookup), fp8_utils.py (the Triton
# per-token-group fp8 quantization vLLM falls back to), every tuned config JSON of
# fused_moe/configs/ (~1 MB), vLLM's LICENSE, and SOURCE.txt saying where they came from.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest=$root/build-peers/vllm
git_dir=${VLLM_GIT_DIR:-}
rev=HEAD
version=${VLLM_VERSION:-0.33.0}
while [[ $# -gt 0 ]]; do
  case $1 in
    --git-dir) git_dir=$2; shift 2 ;;
    --rev) rev=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --dest) dest=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 1 ;;
  esac
done

files=(vllm/model_executor/layers/fused_moe/fused_moe.py
       vllm/model_executor/layers/quantization/utils/fp8_utils.py)
configs=vllm/model_executor/layers/fused_moe/configs

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$dest.part"' EXIT
rm -rf "$dest.part"
mkdir -p "$dest.part"

if [[ -n $git_dir ]]; then
  g=(git --git-dir="$git_dir")
  [[ -d $git_dir/.git ]] && g=(git --git-dir="$git_dir/.git")
  commit=$("${g[@]}" rev-parse --verify "$rev^{commit}")
  mapfile -t jsons < <("${g[@]}" ls-tree --name-only "$commit" "$configs/" | grep '\.json$')
  for f in "${files[@]}" "${jsons[@]}" LICENSE; do
    mkdir -p "$dest.part/$(dirname "$f")"
    "${g[@]}" show "$commit:$f" > "$dest.part/$f"
  done
  source_line="git mirror $git_dir, commit $commit"
else
  python3 -m pip download -q --no-deps --only-binary :all: -d "$tmp" "vllm==$version"
  wheel=$(ls "$tmp"/vllm-*.whl)
  # zipfile rather than unzip: python3 is on every machine this runs on.
  python3 - "$wheel" "$dest.part" "$configs/" "${files[@]}" <<'EOF'
import sys, zipfile
wheel, dest, configs, files = sys.argv[1], sys.argv[2], sys.argv[3], set(sys.argv[4:])
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name in files or (name.startswith(configs) and name.endswith(".json")):
            z.extract(name, dest)
        elif name.endswith(".dist-info/licenses/LICENSE"):
            open(dest + "/LICENSE", "wb").write(z.read(name))
    missing = [f for f in files if f not in z.namelist()]
    if missing:
        sys.exit("not in the wheel: %s" % " ".join(missing))
EOF
  source_line="PyPI wheel $(basename "$wheel")"
fi

for f in "${files[@]}"; do
  [[ -s $dest.part/$f ]] || { echo "missing after extraction: $f" >&2; exit 1; }
done
{
  echo "source: $source_line"
  echo "version: $([[ -n $git_dir ]] && echo "$rev" || echo "$version")"
  echo "fetched_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "config_files: $(find "$dest.part/$configs" -name '*.json' | wc -l)"
} > "$dest.part/SOURCE.txt"
rm -rf "$dest"
mv "$dest.part" "$dest"
echo "vLLM files in $dest ($(du -sh "$dest" | cut -f1)): $source_line"
