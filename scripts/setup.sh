#!/usr/bin/env bash
# Installs what fprep needs to build and run on a fresh Debian machine:
# libgit2, SQLite and OpenSSL's libcrypto (headers and the static archives fprep links: the
# -dev packages; libgit2-dev brings those of zlib, mbedTLS, libssh2, http-parser and PCRE2),
# git, and attr (getfattr, used by the quickstart to show placeholder attributes). The tests
# also use e2fsprogs (a small ext4 image for the full-disk tests: mkfs.ext4, chattr), strace
# (to hold a program inside the swap a race test needs), gdb (the test run's watchdog shows a
# hung run's stacks with it), python3 (mmap and append writers) and
# lighttpd (a real web server in front of git http-backend for the smart-HTTP tests), openssl (the
# TLS tests make a test CA and certificates with it), curl (checks HTTP/2 and HTTP/1.1 by ALPN),
# nghttp2-server (nghttpd: an HTTP/2 server of another make for the APNs client) and postgresql
# (the server programs: the tests of `fprep serve --database` make and start a cluster of their
# own in a temporary folder).
set -euo pipefail
need=()
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
for package in libgit2-dev libsqlite3-dev libssl-dev; do
  installed "$package" || need+=("$package")
done
command -v git >/dev/null || need+=(git)
command -v getfattr >/dev/null || need+=(attr)
command -v mkfs.ext4 >/dev/null || [ -x /sbin/mkfs.ext4 ] || need+=(e2fsprogs)
command -v strace >/dev/null || need+=(strace)
[ -x /usr/bin/python3 ] || need+=(python3)
# scripts/watchdog.sh shows where a hung test run waits (its threads' stacks) before it kills it.
command -v gdb >/dev/null || need+=(gdb)
# The smart-HTTP tests serve git http-backend through a real web server.
command -v lighttpd >/dev/null || [ -x /usr/sbin/lighttpd ] || need+=(lighttpd)
# The TLS and APNs tests: certificates made at test time, an HTTP/2 client, and nghttp2's
# HTTP/2 server (nghttpd), a second implementation that the APNs client is checked against.
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
[ -x /usr/sbin/nghttpd ] || need+=(nghttp2-server)
# Debian's postgresql: initdb and postgres in /usr/lib/postgresql/N/bin.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  # The tests start their own lighttpd on 127.0.0.1; the packaged service is not needed.
  if [[ " ${need[*]} " == *" lighttpd "* ]] && command -v systemctl >/dev/null; then
    $sudo systemctl disable --now lighttpd >/dev/null 2>&1 || true
  fi
  # The package makes and starts a cluster of its own (port 5432); the tests start theirs.
  if [[ " ${need[*]} " == *" postgresql "* ]]; then
    if command -v systemctl >/dev/null; then $sudo systemctl disable --now postgresql >/dev/null 2>&1 || true; fi
    if command -v pg_lsclusters >/dev/null; then
      pg_lsclusters --no-header 2>/dev/null | while read -r version cluster _; do
        $sudo pg_ctlcluster "$version" "$cluster" stop >/dev/null 2>&1 || true
      done
    fi
  fi
fi
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:/opt/swift/bin:$PATH"
command -v swift >/dev/null || { echo "setup: no Swift toolchain on PATH (expected under /opt/swift)" >&2; exit 1; }
