/// One seeded change set on top of the base tree: what a push would bring
/// (modelled on gen-repo.py's `mutate`, with exact renames only).
///
/// Of K changes: one small leaf folder (3…max(3, K/20) files) moved into
/// another folder as a whole (same tree id, so it is a folder rename), 15%
/// exact renames of files across folders, 20% deletions, 20% additions (a
/// quarter of them in new folders, one nested in another) and the rest,
/// about 40%, modified in place. Renamed, deleted and modified files are
/// non-empty regular files: empty files share one blob id, which would make
/// exact renames ambiguous.
struct MutationPlan {
    /// A new file: where it goes and what it holds.
    struct Addition {
        var path: String
        var size: Int
        var binary: Bool
    }

    let changes: Int
    let seed: UInt64
    var modified: [TreeEntry] = []
    var added: [Addition] = []
    var deleted: [TreeEntry] = []
    /// Files renamed across folders, with their new path.
    var renamed: [(entry: TreeEntry, to: String)] = []
    /// The folder moved as a whole, and the files it holds.
    var folderRename: (from: String, to: String)?
    var folderFiles: [TreeEntry] = []
    /// Folders the additions create, parents before children.
    var newFolders: [String] = []
    /// How many additions land in `newFolders`.
    var addedInNewFolders = 0

    /// Draws the plan from the base tree; the same tree, K and seed give the same plan.
    init(tree: [TreeEntry], changes k: Int, seed: UInt64) throws {
        changes = k
        self.seed = seed
        var rng = SeededRandom(seed: seed ^ 0x3D_7A_11_C5)
        var filesIn: [String: [TreeEntry]] = [:]
        var children: [String: Set<String>] = [:]
        var parents = Set<String>()
        for entry in tree {
            let (dir, name) = Layout.split(entry.path)
            filesIn[String(dir), default: []].append(entry)
            children[String(dir), default: []].insert(String(name))
            // Register the folder in its parent, up to the first one already known.
            var folder = String(dir)
            while !folder.isEmpty {
                let (up, last) = Layout.split(folder)
                parents.insert(String(up))
                guard children[String(up), default: []].insert(String(last)).inserted else { break }
                folder = String(up)
            }
        }
        var folders = filesIn.keys.sorted()
        var used = Set<String>()
        func join(_ dir: String, _ name: String) -> String { dir.isEmpty ? name : dir + "/" + name }

        // 1. A small leaf folder moved under another folder.
        if k >= 10 {
            let limit = max(3, k / 20)
            let candidates = folders.filter { !$0.isEmpty && !parents.contains($0) && (3...limit).contains(filesIn[$0]?.count ?? 0) }
            if !candidates.isEmpty, folders.count > 1 {
                let from = rng.pick(candidates)
                var parent = rng.pick(folders)
                while parent == from { parent = rng.pick(folders) }
                let name = Layout.unique(String(Layout.split(from).1) + "_moved", in: &children[parent, default: []])
                folderRename = (from, join(parent, name))
                folderFiles = filesIn[from] ?? []
                used.formUnion(folderFiles.map(\.path))
                folders.removeAll { $0 == from }
            }
        }

        // 2. Files to modify, delete and rename, drawn without repeats.
        let rest = k - folderFiles.count
        let renames = k * 15 / 100, deletions = k * 20 / 100, additions = k * 20 / 100
        let modifications = max(0, rest - renames - deletions - additions)
        var pool = tree.filter { $0.isRegularFile && $0.size > 0 && !used.contains($0.path) }
        let need = modifications + deletions + renames
        guard need <= pool.count else {
            throw BenchError.message("--changes \(k): the tree has only \(pool.count) non-empty regular files for \(need) modifications, deletions and renames")
        }
        for i in 0..<need { pool.swapAt(i, i + rng.below(pool.count - i)) }
        modified = Array(pool[0..<modifications])
        deleted = Array(pool[modifications..<(modifications + deletions)])
        guard folders.count > 1 || renames == 0 else { throw BenchError.message("the tree has too few folders to rename files across them") }
        for entry in pool[(modifications + deletions)..<need] {
            let (dir, name) = Layout.split(entry.path)
            var target = rng.pick(folders)
            while target == dir { target = rng.pick(folders) }
            renamed.append((entry, join(target, Layout.unique(String(name), in: &children[target, default: []]))))
        }

        // 3. New files: a quarter in new folders (every other one nested in the previous), the rest anywhere.
        addedInNewFolders = additions >= 4 ? additions / 4 : 0
        for i in 0..<(addedInNewFolders == 0 ? 0 : (addedInNewFolders + 1) / 2) {
            let parent = i % 2 == 1 ? newFolders[i - 1] : rng.pick(folders)
            newFolders.append(join(parent, Layout.unique("new_\(seed)_\(i)", in: &children[parent, default: []])))
        }
        for i in 0..<additions {
            let dir = i < addedInNewFolders ? newFolders[i % newFolders.count] : rng.pick(folders)
            var (size, binary) = Layout.rawSize(&rng)
            if !binary { size = min(size, 200 * 1024) }
            let ext = binary ? rng.pick(Layout.binaryExtensions) : Layout.textExtension(&rng)
            let name = Layout.unique(Content.word(&rng, syllables: rng.between(2, 4)) + ext, in: &children[dir, default: []])
            added.append(Addition(path: join(dir, name), size: size, binary: binary))
        }
    }

    /// Writes the plan as one commit on top of `base` into `reference` with
    /// `git fast-import` (the remote's branches are not touched) and returns its id.
    func write(remote: String, base: String, reference: String, subprocess: Subprocess) throws -> String {
        let content = Content(seed: seed)
        var rng = SeededRandom(seed: seed ^ 0xED_17_5E_ED)
        let old = try readBlobs(modified.map(\.oid), remote: remote, subprocess: subprocess)
        // --force: the reference may hold a mutation made with other arguments.
        let child = try StreamingChild(Command(["git", "-C", remote, "fast-import", "--quiet", "--done", "--force"]),
                                       subprocess: subprocess)
        let message = "fprep-bench mutation: \(changes) changes, seed \(seed)\n"
        let when = Generator.epoch + 3600
        try child.write("commit \(reference)\n")
        try child.write("author \(Generator.ident) \(when) +0000\n")
        try child.write("committer \(Generator.ident) \(when) +0000\n")
        try child.write("data \(message.utf8.count)\n\(message)from \(base)\n")
        // Generated names never contain spaces, quotes or newlines, so paths go unquoted.
        if let move = folderRename { try child.write("R \(move.from) \(move.to)\n") }
        for entry in deleted { try child.write("D \(entry.path)\n") }
        for (entry, to) in renamed { try child.write("R \(entry.path) \(to)\n") }
        for entry in modified {
            guard let data = old[entry.oid] else { throw BenchError.message("blob \(entry.oid) of \(entry.path) was not read") }
            try write(content.edit(&rng, data), mode: entry.mode, path: entry.path, to: child)
        }
        for file in added {
            let data = file.binary ? Content.binary(&rng, count: file.size) : content.text(&rng, count: file.size)
            try write(data, mode: "100644", path: file.path, to: child)
        }
        try child.write("done\n")
        try child.finish()
        let commit = try subprocess.run(Command(["git", "-C", remote, "rev-parse", "--verify", reference + "^{commit}"]))
            .stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        return commit
    }

    private func write(_ data: [UInt8], mode: String, path: String, to child: StreamingChild) throws {
        try child.write("M \(mode) inline \(path)\ndata \(data.count)\n")
        try data.withUnsafeBufferPointer { try child.write($0) }
        try child.write("\n")
    }

    /// `count` regular files to materialize before the sync, so it has content
    /// to update, move and delete: up to a fifth modified, a tenth renamed,
    /// two in the moved folder and a sixteenth deleted; the rest untouched.
    func materializeSample(tree: [TreeEntry], count: Int) throws -> [String] {
        var rng = SeededRandom(seed: seed ^ 0x0A_7E_21_A1)
        var chosen: [String] = []
        func take(_ entries: [TreeEntry], _ n: Int) {
            var pool = entries.filter(\.isRegularFile)
            for i in 0..<min(n, pool.count) {
                pool.swapAt(i, i + rng.below(pool.count - i))
                chosen.append(pool[i].path)
            }
        }
        take(modified, count / 5)
        take(renamed.map(\.entry), count / 10)
        take(folderFiles, min(2, count / 10))
        take(deleted, count / 16)
        let touched = Set(chosen).union(modified.map(\.path)).union(deleted.map(\.path))
            .union(renamed.map(\.entry.path)).union(folderFiles.map(\.path))
        let untouched = tree.filter { !touched.contains($0.path) }
        guard untouched.filter(\.isRegularFile).count >= count - chosen.count else {
            throw BenchError.message("--materialize \(count) exceeds the tree's untouched regular files")
        }
        take(untouched, count - chosen.count)
        return chosen.sorted()
    }
}
