#!/usr/bin/env bash
# Plugins (issue 4): the wasm32-wasip2 Rust target, used to build plugins/* from source
# (the plugin tests build them with `cargo build --target wasm32-wasip2`).
set -euo pipefail
if command -v rustup >/dev/null; then
  if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2 >/dev/null
  fi
else
  echo "setup.d/plugins.sh: rustup not found; install the wasm32-wasip2 target by hand" >&2
fi
