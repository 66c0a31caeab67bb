#!/bin/sh
# Unpack Debian's prometheus package into DIR (default .cache/prometheus) without installing it:
# no service, no user, no files outside DIR.  Used by `make prometheus` and the test fixture.
set -eu
dir="${1:-.cache/prometheus}"
command -v apt-get >/dev/null 2>&1 || { echo "fetch_prometheus: no apt-get here" >&2; exit 1; }
command -v dpkg >/dev/null 2>&1 || { echo "fetch_prometheus: no dpkg here" >&2; exit 1; }
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# A fresh machine may have no package lists yet; refresh them once if the download fails.
if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
  apt-get update -qq >/dev/null 2>&1 || true
  (cd "$tmp" && apt-get download prometheus >/dev/null) || {
    echo "fetch_prometheus: apt-get download prometheus failed" >&2; exit 1; }
fi
dpkg -x "$tmp"/prometheus_*.deb "$dir"
"$dir/usr/bin/prometheus" --version 2>&1 | head -1
