#!/usr/bin/env bash
# Installs fprep for every user of this machine: the release binaries (fprep, and fprep-full
# beside it, which fprep runs for serve, watch, agent and changes --follow), its man page and its
# shell completions for bash, zsh and fish (ArgumentParser generates both from the commands'
# own help, so they never drift from it). PREFIX picks where (default /usr/local); run as root
# for a system prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
prefix="${PREFIX:-/usr/local}"
swift build -c release --static-swift-stdlib --product fprep
swift build -c release --static-swift-stdlib --product fprep-full
swift build --product generate-manual
made=$(mktemp -d)
trap 'rm -rf "$made"' EXIT
.build/release/fprep completions bash > "$made/fprep.bash"
.build/release/fprep completions zsh > "$made/_fprep"
.build/release/fprep completions fish > "$made/fprep.fish"
.build/debug/generate-manual .build/release/fprep --output-directory "$made"
install -D -m 0755 .build/release/fprep-full "$prefix/bin/fprep-full"
install -D -m 0755 .build/release/fprep "$prefix/bin/fprep"
install -D -m 0644 "$made/fprep.1" "$prefix/share/man/man1/fprep.1"
install -D -m 0644 "$made/fprep.bash" "$prefix/share/bash-completion/completions/fprep"
install -D -m 0644 "$made/_fprep" "$prefix/share/zsh/site-functions/_fprep"
install -D -m 0644 "$made/fprep.fish" "$prefix/share/fish/vendor_completions.d/fprep.fish"
echo "installed $prefix/bin/fprep ($("$prefix/bin/fprep" --version)), its man page (man fprep) and completions for bash, zsh and fish"
