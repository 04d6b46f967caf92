import Foundation

/// The synthetic tree: folders and files with their names, modes and sizes,
/// all drawn from one seeded PRNG before any content is written.
struct Layout {
    /// Git file modes the generator emits.
    enum Mode: String {
        case regular = "100644"
        case executable = "100755"
        case symlink = "120000"
    }

    struct File {
        var path: String
        var mode: Mode
        /// Blob size in bytes (for a symlink: its target's length).
        var size: Int
        var binary: Bool
        /// Set for symlinks: a sibling's name (or "missing"), like real repos' relative links.
        var linkTarget: String?
    }

    /// Tree shape knobs; the defaults match gen-repo.py, whose figures the README quotes.
    struct Shape {
        var filesPerFolder = 10
        var maxDepth = 6
        /// A few huge folders, as real trees have (generated code, assets, vendored sets).
        var largeFolderFiles = 2000
        /// 3 per 100,000 files; none below 5,000 files.
        func largeFolders(files: Int) -> Int { files >= 5000 ? max(1, files * 3 / 100_000) : 0 }
    }

    static let folderNames = ["src", "lib", "include", "test", "tests", "docs", "tools", "scripts",
                              "core", "util", "common", "api", "internal", "pkg", "cmd", "app", "web",
                              "assets", "config", "data", "build", "vendor", "third_party", "modules",
                              "plugins", "components", "services", "models", "views", "handlers",
                              "drivers", "net", "fs", "io", "crypto", "proto", "gen", "res", "i18n"]
    /// Text extensions with their weights (C-ish code bases dominate).
    static let textExtensions: [(String, Int)] = [
        (".c", 14), (".h", 10), (".py", 10), (".js", 8), (".ts", 8), (".go", 6),
        (".rs", 5), (".java", 6), (".md", 6), (".txt", 4), (".json", 6),
        (".yaml", 4), (".html", 3), (".css", 3), (".cc", 5), (".sh", 2)]
    static let binaryExtensions = [".png", ".jpg", ".bin", ".jar", ".so", ".pdf", ".zip", ".woff2"]

    /// Folder paths; index 0 is the root ("").
    var folders: [String]
    var files: [File]
    var maxFolderDepth: Int

    /// Draws the whole tree. `totalSize` > 0 scales every non-empty file so the
    /// blobs add up to about that many bytes.
    init(files count: Int, totalSize: Int, seed: UInt64, shape: Shape = Shape()) throws {
        var rng = SeededRandom(seed: seed)
        let largeCount = shape.largeFolders(files: count)
        let smallFiles = count - largeCount * shape.largeFolderFiles
        guard smallFiles >= 1 else { throw BenchError.message("--files \(count) is too small for the tree shape") }

        // Folders: breadth-first growth with a branching factor b chosen so that
        // b + b² + … + b^maxDepth ≈ the folder count, giving depths 1…maxDepth.
        let folderTarget = max(1, Int((Double(smallFiles) / Double(shape.filesPerFolder)).rounded()) - 1)
        let branching = max(1.2, Layout.branching(for: folderTarget, depth: shape.maxDepth))
        var folders: [(path: String, depth: Int)] = [("", 0)]
        var taken: [Set<String>] = [[]]
        var queue: [Int] = [0]
        var head = 0
        while folders.count - 1 < folderTarget {
            if head == queue.count {
                queue = folders.indices.filter { folders[$0].depth < shape.maxDepth }
                head = 0
                if queue.isEmpty { break }
            }
            let parent = queue[head]
            head += 1
            let (path, depth) = folders[parent]
            if depth >= shape.maxDepth { continue }
            var children = rng.between(0, Int((2 * branching).rounded()))
            if depth == 0 { children = max(children, 6) }
            for _ in 0..<children where folders.count - 1 < folderTarget {
                let base = rng.unit() < 0.5 ? rng.pick(Layout.folderNames)
                                            : Content.word(&rng, syllables: rng.between(2, 4))
                let name = Layout.unique(base, in: &taken[parent])
                folders.append((path.isEmpty ? name : path + "/" + name, depth + 1))
                taken.append([])
                queue.append(folders.count - 1)
            }
        }

        // Files per folder: uniform 1…2k-1 (mean k), then nudged to the exact total.
        var perFolder = folders.map { _ in rng.between(1, 2 * shape.filesPerFolder - 1) }
        var sum = perFolder.reduce(0, +)
        while sum > smallFiles {
            let j = rng.below(perFolder.count)
            if perFolder[j] > 0 { perFolder[j] -= 1; sum -= 1 }
        }
        while sum < smallFiles {
            perFolder[rng.below(perFolder.count)] += 1
            sum += 1
        }
        var candidates = folders.indices.filter { (2...4).contains(folders[$0].depth) }
        if candidates.isEmpty { candidates = Array(folders.indices) }
        for k in 0..<min(largeCount, candidates.count) {
            // Partial Fisher–Yates: a seeded sample without repeats.
            candidates.swapAt(k, k + rng.below(candidates.count - k))
            perFolder[candidates[k]] += shape.largeFolderFiles
        }

        var files: [File] = []
        files.reserveCapacity(count)
        for (i, folder) in folders.enumerated() {
            for _ in 0..<perFolder[i] {
                let (size, binary) = Layout.rawSize(&rng)
                let ext = binary ? rng.pick(Layout.binaryExtensions) : Layout.textExtension(&rng)
                let name = Layout.unique(Content.word(&rng, syllables: rng.between(2, 4)) + ext, in: &taken[i])
                var mode = Mode.regular
                let x = rng.unit()
                if ext == ".sh" || x < 0.005 {
                    mode = .executable
                } else if x < 0.0055 && !binary {
                    mode = .symlink
                }
                files.append(File(path: folder.path.isEmpty ? name : folder.path + "/" + name,
                                  mode: mode, size: size, binary: binary, linkTarget: nil))
            }
        }

        // Scale sizes to the requested total (symlinks keep their own size).
        let rawTotal = files.reduce(0) { $0 + ($1.mode == .symlink ? 0 : $1.size) }
        let scale = totalSize > 0 && rawTotal > 0 ? Double(totalSize) / Double(rawTotal) : 1.0
        for j in files.indices where files[j].mode != .symlink && files[j].size > 0 {
            files[j].size = max(1, Int(Double(files[j].size) * scale))
        }
        // Symlinks point at a sibling in the same folder.
        var siblings: [Substring: [Substring]] = [:]
        for f in files {
            let (dir, name) = Layout.split(f.path)
            siblings[dir, default: []].append(name)
        }
        for j in files.indices where files[j].mode == .symlink {
            let (dir, name) = Layout.split(files[j].path)
            let others = (siblings[dir] ?? []).filter { $0 != name }
            let target = "./" + (others.isEmpty ? "missing" : String(rng.pick(others)))
            files[j].linkTarget = target
            files[j].size = target.utf8.count
        }

        self.folders = folders.map(\.path)
        self.files = files
        self.maxFolderDepth = folders.map(\.depth).max() ?? 0
    }

    /// Unscaled size mixture: 1% empty, 12% 64 B–1 KiB, 79% 1–20 KiB, 7.9% 20–100 KiB
    /// and 0.1% 1–8 MiB binaries (the long tail that dominates real repos' bytes).
    static func rawSize(_ rng: inout SeededRandom) -> (Int, Bool) {
        let x = rng.unit()
        if x < 0.01 { return (0, false) }
        if x < 0.13 { return (rng.logUniform(64, 1024), false) }
        if x < 0.92 { return (rng.logUniform(1024, 20 * 1024), false) }
        if x < 0.999 { return (rng.logUniform(20 * 1024, 100 * 1024), false) }
        return (rng.logUniform(1024 * 1024, 8 * 1024 * 1024), true)
    }

    static func textExtension(_ rng: inout SeededRandom) -> String {
        let total = textExtensions.reduce(0) { $0 + $1.1 }
        var r = rng.below(total)
        for (ext, weight) in textExtensions {
            if r < weight { return ext }
            r -= weight
        }
        return ".txt"
    }

    /// `name`, or `stem_2.ext`, `stem_3.ext`… when the folder already has it
    /// (folders and files share one namespace per folder).
    static func unique(_ name: String, in taken: inout Set<String>) -> String {
        if taken.insert(name).inserted { return name }
        let dot = name.firstIndex(of: ".")
        let stem = dot.map { String(name[..<$0]) } ?? name
        let ext = dot.map { String(name[$0...]) } ?? ""
        var i = 2
        while true {
            let candidate = "\(stem)_\(i)\(ext)"
            if taken.insert(candidate).inserted { return candidate }
            i += 1
        }
    }

    /// Branching factor b with b + b² + … + b^depth ≈ folders (bisection).
    static func branching(for folders: Int, depth: Int) -> Double {
        var lo = 1.0, hi = 1000.0
        for _ in 0..<60 {
            let b = (lo + hi) / 2
            var sum = 0.0, power = 1.0
            for _ in 1...depth { power *= b; sum += power }
            if sum < Double(folders) { lo = b } else { hi = b }
        }
        return (lo + hi) / 2
    }

    /// ("a/b", "c.txt") for "a/b/c.txt"; ("", "c.txt") at the root.
    static func split(_ path: String) -> (Substring, Substring) {
        guard let slash = path.lastIndex(of: "/") else { return ("", path[...]) }
        return (path[..<slash], path[path.index(after: slash)...])
    }
}
