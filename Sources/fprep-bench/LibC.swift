import Glibc

/// Linux calls that Swift's Glibc module does not import (they sit behind
/// `_GNU_SOURCE` or in headers the module map leaves out), looked up once in
/// the C library with `dlsym`. This keeps the floors' loops as lean as a C loop
/// without changing the shared `CFprepSys` target, whose helpers do more work
/// (several xattrs, mtimes) than a floor may do.
struct LibC: Sendable {
    typealias FSetXattr = @convention(c) (Int32, UnsafePointer<CChar>, UnsafeRawPointer?, Int, Int32) -> Int32
    typealias FAllocate = @convention(c) (Int32, Int32, Int64, Int64) -> Int32
    typealias AddChdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    /// fsetxattr(2).
    let fsetxattr: FSetXattr
    /// fallocate(2); glibc's `fallocate64` takes a 64-bit offset on every ABI.
    let fallocate: FAllocate
    /// posix_spawn_file_actions_addchdir_np (glibc ≥ 2.29): a child's working
    /// directory without changing ours.
    let addChdir: AddChdir

    /// From <linux/falloc.h>, which the Glibc module does not import.
    static let punchHole: Int32 = 0x02
    static let keepSize: Int32 = 0x01

    /// Resolves the symbols; fails with a clear message on a C library without them.
    static func load() throws -> LibC {
        guard let handle = dlopen(nil, RTLD_NOW) else {
            throw BenchError.message("dlopen of the running program failed")
        }
        func symbol<T>(_ name: String, as type: T.Type) throws -> T {
            guard let raw = dlsym(handle, name) else {
                throw BenchError.message("the C library has no \(name) (glibc ≥ 2.29 needed)")
            }
            return unsafeBitCast(raw, to: type)
        }
        return LibC(
            fsetxattr: try symbol("fsetxattr", as: FSetXattr.self),
            fallocate: try symbol("fallocate64", as: FAllocate.self),
            addChdir: try symbol("posix_spawn_file_actions_addchdir_np", as: AddChdir.self)
        )
    }
}

/// Seconds on the monotonic clock: wall-clock intervals that NTP cannot bend.
func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}

/// Text of the current errno, for error messages.
func errnoText(_ code: Int32 = errno) -> String {
    String(cString: strerror(code))
}
