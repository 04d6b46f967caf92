import Foundation
import FprepCore
import FprepGit
import Testing

@Suite("push signals")
struct PushSignalsTests {
    /// A commit of `files` (path → content) in `repository`, built with libgit2.
    func commit(_ files: [String: String], parent: ObjectID?, in repository: Repository) throws -> ObjectID {
        func tree(_ entries: [String: String]) throws -> ObjectID {
            var folders: [String: [String: String]] = [:]
            let builder = try repository.treeBuilder()
            for (path, content) in entries {
                if let slash = path.firstIndex(of: "/") {
                    folders[String(path[..<slash]), default: [:]][String(path[path.index(after: slash)...])] = content
                } else {
                    let blob = try Array(content.utf8).withUnsafeBytes { try repository.writeBlob($0) }
                    try builder.insert(name: Array(path.utf8), id: blob, mode: .blob)
                }
            }
            for (name, children) in folders { try builder.insert(name: Array(name.utf8), id: try tree(children), mode: .tree) }
            return try builder.write()
        }
        let signature = Signature(name: "t", email: "t@t", time: 1_700_000_000)
        return try repository.writeCommit(tree: try tree(files), parents: parent.map { [$0] } ?? [], message: "c",
                                          author: signature, committer: signature)
    }

    @Test("parents of changed items and both parents of a move; the root by its literal")
    func containers() throws {
        let folder = NSTemporaryDirectory() + "fprep-push-signals-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let repository = try Repository(creatingBareAt: folder, initialBranch: "main")
        let first = try commit(["top.txt": "1", "docs/a.md": "moving", "docs/keep.md": "k", "src/deep/x.c": "x",
                                "gone/old.txt": "o"], parent: nil, in: repository)
        let second = try commit(["top.txt": "2", "docs/keep.md": "k", "src/a.md": "moving", "src/deep/x.c": "x2",
                                 "new/n.txt": "n"], parent: first, in: repository)
        let containers = try PushSignals.containers(repository, from: first, to: second)
        // top.txt changed (root), docs/a.md → src/a.md (docs, src), src/deep/x.c changed (src/deep),
        // gone/ deleted and new/ added (root), their files (gone, new).
        #expect(containers == [ContainerIdentifier.root, "docs", "gone", "new", "src", "src/deep"])
        // A new branch: everything is new.
        #expect(try PushSignals.containers(repository, from: .zero, to: first).first == ContainerIdentifier.root)
    }
}
