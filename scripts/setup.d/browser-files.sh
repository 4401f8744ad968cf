#!/usr/bin/env bash
# The browser (issue 5): Chromium for JavaScript pages, tesseract for OCR of images, and libpdfium.so for
# PDF text (no Debian package: taken from the `pypdfium2` wheel on PyPI, which ships a
# self-contained build depending only on libc/libm/libgcc). Idempotent and quiet.
set -euo pipefail
apt_install tesseract-ocr tesseract-ocr-eng unzip chromium
PDFIUM_DIR=/opt/sibyl/lib
PDFIUM_VERSION=5.15.2
if [ ! -s "$PDFIUM_DIR/libpdfium.so" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  py=$(command -v python3 || true)
  if [ -z "$py" ]; then apt_install python3 python3-pip; py=python3; fi
  "$py" -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_17_x86_64 --python-version 3.11 \
    -d "$tmp" "pypdfium2==$PDFIUM_VERSION" >/dev/null
  whl=$(ls "$tmp"/pypdfium2-*.whl | head -n1)
  unzip -q -o -j "$whl" 'pypdfium2_raw/libpdfium.so' -d "$tmp/out"
  $SUDO mkdir -p "$PDFIUM_DIR"
  $SUDO install -m 0644 "$tmp/out/libpdfium.so" "$PDFIUM_DIR/libpdfium.so"
fi
