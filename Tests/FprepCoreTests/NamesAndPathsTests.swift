import Foundation
import Testing
@testable import FprepCore

@Suite struct NamesAndPathsTests {
    @Test(arguments: ["..", ".", ".git", ".GIT", ".Git.", ".git ", "git~1", ".fprep", ".FPREP", "a/b", "",
                      ".g\u{200C}it", "GIT~1", ".gIt. . ", ".fPrEp..", "\u{FEFF}.git", "g\u{200D}it~1"])
    func refusesNamesThatCouldEscapeOrReachState(name: String) {
        #expect(EntryNameCheck.problem(with: Array(name.utf8)) != nil)
    }

    @Test(arguments: ["a", "...", ".gitignore", ".gitmodules", "git", "fprep", "x.git", "..a", "über", "Git", "g", ".gi", "git~2", ".gitx", ". git"])
    func acceptsOrdinaryNames(name: String) {
        #expect(EntryNameCheck.problem(with: Array(name.utf8)) == nil)
    }

    /// ASCII names are folded without a String: the same as with one, on
    /// names made of the bytes that matter (case, dots, spaces, '~').
    @Test func asciiFoldingAgreesWithTextFolding() {
        let alphabet = Array(".gGiItT~1 fFpPrReE-x".utf8)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let name = (0..<Int.random(in: 1...8, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            #expect(EntryNameCheck.foldedForComparison(name) == EntryNameCheck.foldedAsText(name), "\(String(decoding: name, as: UTF8.self))")
        }
    }

    /// What a user's path may skip the general resolution with: only a path
    /// that means itself (each part a name), so "." and ".." still walk and
    /// an absolute path is still checked against the replica's root.
    @Test func plainRelativePaths() {
        for plain in ["a", "a/b", "docs/sub/a.txt", "...", ".hidden/x", "a/..b", "a/b.", "..a/b", "caf\u{E9}"] {
            #expect(Replica.plainRelativePath(plain) == RepoPath(plain), "\(plain)")
        }
        for walked in ["", ".", "..", "./a", "a/.", "a/./b", "a/../b", "../a", "a/..", "a//b", "a/", "/a", "/"] {
            #expect(Replica.plainRelativePath(walked) == nil, "\(walked)")
        }
    }

    @Test func pathsAreBytesNotStrings() {
        let composed = RepoPath("caf\u{E9}")
        let decomposed = RepoPath("cafe\u{301}")
        // Equal as Swift Strings, two different items to git.
        #expect(composed.description == decomposed.description)
        #expect(composed != decomposed)
        let latin1 = RepoPath(bytes: [0x61, 0xE9])
        #expect(latin1 != RepoPath("a\u{FFFD}"))
    }

    @Test func pathParts() {
        let path = RepoPath("docs/sub/a.txt")
        #expect(path.parent == RepoPath("docs/sub"))
        #expect(path.name == Array("a.txt".utf8))
        #expect(RepoPath("top").parent.isRoot)
        #expect(path.isWithin(RepoPath("docs")))
        #expect(!RepoPath("docsx/a").isWithin(RepoPath("docs")))
        #expect(RepoPath.root.appending(Array("a".utf8)) == RepoPath("a"))
        #expect(ContainerIdentifier.of(.root) == "NSFileProviderRootContainerItemIdentifier")
    }

    @Test func pageTokensRoundTripAnyName() throws {
        let name: [UInt8] = [0x66, 0xFF, 0x2F, 0x00, 0x7E]
        let token = Replica.encodePageToken(name)
        #expect(try Replica.decodePageToken(token) == name)
        #expect(throws: FprepError.self) { try Replica.decodePageToken("garbage") }
    }

    @Test func domainsAndBranches() {
        #expect(RemoteInfo.isValidDomain("photos-2.main_x"))
        #expect(!RemoteInfo.isValidDomain("a b"))
        #expect(!RemoteInfo.isValidDomain(""))
        #expect(RemoteInfo.defaultDomain(forFolder: "/srv/My Photos.git") == "My-Photos")
        #expect(Remote.isValidBranchName("main"))
        #expect(Remote.isValidBranchName("feature/x"))
        #expect(!Remote.isValidBranchName("a..b"))
        #expect(!Remote.isValidBranchName("-x"))
    }

    @Test func hookScriptsMatchTheHooksFolder() throws {
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        for (name, script) in HookScripts.all {
            let onDisk = try String(contentsOf: packageRoot.appendingPathComponent("Hooks/" + name), encoding: .utf8)
            #expect(onDisk == script, "Hooks/\(name) differs from HookScripts.\(name)")
        }
    }
}

/// Paths made absolute without URL must come out as URL's standardized
/// file paths did before.
struct AbsolutePathTests {
    @Test(arguments: ["/", "/a/b", "/a/b/", "/a//b", "/a/./b", "/a/b/../c", "/a/../../b", "/..", "/a/b/..",
                      "/a/.hidden/..x/...", "relative", "relative/../x", ".", "..", "a/./b/../../c", "/é/日本"])
    func matchesURLStandardization(_ path: String) {
        let expected = (path.hasPrefix("/") ? URL(fileURLWithPath: path)
            : URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(path)).standardizedFileURL.path
        #expect(absolutePath(path) == expected)
    }
}
