import CLibGit2
import Glibc

extension Repository {
    /// The best common ancestor of two commits, or nil when they share
    /// none; wraps `git_merge_base`.
    public func mergeBase(_ a: ObjectID, _ b: ObjectID) throws -> ObjectID? {
        var out = git_oid()
        var left = a.raw, right = b.raw
        do {
            try check(git_merge_base(&out, pointer, &left, &right), "git_merge_base")
        } catch GitError.notFound {
            return nil
        }
        return ObjectID(out)
    }
}

/// A three-way merge of one file's contents, line by line, as `git
/// merge-file` does; wraps `git_merge_file`.
public enum FileMerge {
    /// The merged bytes, and whether the merge was clean (no conflict).
    public static func merge(base: [UInt8], ours: [UInt8], theirs: [UInt8]) throws -> (clean: Bool, content: [UInt8]) {
        LibGit2.ensure()
        var result = git_merge_file_result()
        defer { git_merge_file_result_free(&result) }
        try base.withUnsafeBufferPointer { basePointer in
            try ours.withUnsafeBufferPointer { oursPointer in
                try theirs.withUnsafeBufferPointer { theirsPointer in
                    var ancestor = git_merge_file_input()
                    var our = git_merge_file_input()
                    var their = git_merge_file_input()
                    try check(git_merge_file_input_init(&ancestor, UInt32(GIT_MERGE_FILE_INPUT_VERSION)), "git_merge_file_input_init")
                    try check(git_merge_file_input_init(&our, UInt32(GIT_MERGE_FILE_INPUT_VERSION)), "git_merge_file_input_init")
                    try check(git_merge_file_input_init(&their, UInt32(GIT_MERGE_FILE_INPUT_VERSION)), "git_merge_file_input_init")
                    ancestor.ptr = UnsafeRawPointer(basePointer.baseAddress)?.assumingMemoryBound(to: CChar.self)
                    ancestor.size = base.count
                    our.ptr = UnsafeRawPointer(oursPointer.baseAddress)?.assumingMemoryBound(to: CChar.self)
                    our.size = ours.count
                    their.ptr = UnsafeRawPointer(theirsPointer.baseAddress)?.assumingMemoryBound(to: CChar.self)
                    their.size = theirs.count
                    try check(git_merge_file(&result, &ancestor, &our, &their, nil), "git_merge_file")
                }
            }
        }
        let content = result.ptr.map { Array(UnsafeRawBufferPointer(start: $0, count: result.len)) } ?? []
        return (result.automergeable != 0, content)
    }
}
