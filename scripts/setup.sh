#!/usr/bin/env bash
# Installs what fprep needs to build and run on a fresh Debian machine:
# libgit2, SQLite and OpenSSL's libcrypto (headers for the build), pkg-config, git, and attr
# (getfattr, used by the quickstart to show placeholder attributes).
set -euo pipefail
need=()
pkg-config --exists libgit2 2>/dev/null || need+=(libgit2-dev)
pkg-config --exists sqlite3 2>/dev/null || need+=(libsqlite3-dev)
pkg-config --exists libcrypto 2>/dev/null || need+=(libssl-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v git >/dev/null || need+=(git)
command -v getfattr >/dev/null || need+=(attr)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:/opt/swift/bin:$PATH"
command -v swift >/dev/null || { echo "setup: no Swift toolchain on PATH (expected under /opt/swift)" >&2; exit 1; }
