/// The server-side hooks `fprep init-remote` installs. `Hooks/` in the
/// source tree holds the same files for people to read; a test keeps them
/// equal.
public enum HookScripts {
    /// Every hook fprep installs, by file name.
    public static let all: [String: String] = ["post-receive": postReceive]

    public static let postReceive = """
        #!/bin/sh
        # fprep post-receive hook: for each pushed ref, fprep extends the size
        # manifest (refs/fprep/sizes) so devices learn the new files' sizes
        # without fetching them, and records the push's affected folders in
        # fprep/outbox.db for the push service ('fprep serve'), which it pokes
        # with one short request. It never fails or holds up a push: fprep logs
        # its own errors to fprep-hook.log in this repository and exits 0.
        fprep=$(git config --get fprep.binary 2>/dev/null)
        [ -x "$fprep" ] || fprep=$(command -v fprep 2>/dev/null)
        [ -n "$fprep" ] || { echo "fprep hook: fprep not found; size manifest and push signals not updated" >&2; exit 0; }
        exec "$fprep" hook post-receive "$@"

        """
}
