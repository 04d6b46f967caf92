#!/usr/bin/env bash
# Sets the machine up, builds fprep, and walks through its main job against a
# local remote: init-remote from sample files, clone, ls, materialize, evict,
# status. Everything happens in a temporary folder (kept, and printed, so you
# can look around; pass a folder to use that one instead).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
swift build -c release --static-swift-stdlib --product fprep
fprep="$PWD/.build/release/fprep"
work="${1:-$(mktemp -d /tmp/fprep-quickstart.XXXXXX)}"
mkdir -p "$work" && cd "$work"
rm -rf sample remote.git replica

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

# Some sample files: text, a larger binary, an executable, a symlink, folders.
mkdir -p sample/docs/notes sample/photos sample/bin
printf 'fprep keeps a dataless replica of a git remote.\n' > sample/README.txt
for i in 1 2 3; do printf 'note %s\n' "$i" > "sample/docs/notes/note-$i.md"; done
head -c 3000000 /dev/urandom > sample/photos/holiday.jpg
printf '#!/bin/sh\necho hello from the replica\n' > sample/bin/hello.sh && chmod +x sample/bin/hello.sh
ln -s docs/notes/note-1.md sample/latest-note

step "$fprep" init-remote remote.git --domain quickstart
step "$fprep" import-tree sample --into remote.git -m "Sample files"
step "$fprep" clone remote.git replica
cd replica
step ls -ls photos docs/notes
step getfattr -e hex -d photos/holiday.jpg
step "$fprep" ls
step "$fprep" ls photos --json
step "$fprep" status
step "$fprep" materialize photos bin
step ls -ls photos
step ./bin/hello.sh
step "$fprep" status
step "$fprep" evict photos
step ls -ls photos
step "$fprep" status
step git status --short --branch
# Work offline, then reconcile: the change is committed and pushed to the remote.
printf 'written in the replica\n' > docs/notes/from-replica.md
step "$fprep" status
step "$fprep" sync
step git log --oneline
step git --git-dir=../remote.git log --oneline
printf '\nThe replica is at %s/replica\n' "$work"
