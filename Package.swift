// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "fprep",
    products: [
        .executable(name: "fprep", targets: ["fprep"]),
        .executable(name: "fprep-bench", targets: ["fprep-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        // The push service's HTTP server and client (FprepServer); no Foundation.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // HMAC-SHA256 webhook signatures and ES256 APNs provider tokens (FprepServer).
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
    ],
    targets: [
        // libgit2 from the system (Debian: libgit2-dev); only FprepGit imports it.
        .systemLibrary(
            name: "CLibGit2",
            pkgConfig: "libgit2",
            providers: [.apt(["libgit2-dev"])]
        ),
        // SQLite from the system (Debian: libsqlite3-dev) for the replica's state.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // OpenSSL's libcrypto (Debian: libssl-dev), already loaded by libgit2:
        // the SHA-1 checksum of the index file fprep reads and writes itself.
        .systemLibrary(
            name: "CLibCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // Linux calls Glibc's Swift overlay does not expose (openat2, fallocate flags, syncfs).
        .target(name: "CFprepSys"),
        .target(name: "FprepGit", dependencies: ["CLibGit2", "CLibCrypto"]),
        .target(name: "FprepCore", dependencies: ["FprepGit", "CSQLite", "CFprepSys"]),
        // Push signals: the hook's outbox, the delivery service, the device's watcher.
        .target(
            name: "FprepServer",
            dependencies: [
                "FprepCore", "FprepGit", "CSQLite",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .target(
            name: "FprepCLI",
            dependencies: [
                "FprepCore", "FprepServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(name: "fprep", dependencies: ["FprepCLI"]),
        .executableTarget(
            name: "fprep-bench",
            dependencies: [
                "CFprepSys", "FprepServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "FprepGitTests", dependencies: ["FprepGit"]),
        .testTarget(name: "FprepCoreTests", dependencies: ["FprepCore", "FprepGit"]),
        .testTarget(name: "FprepServerTests", dependencies: ["FprepServer", "FprepCore", "FprepGit"]),
        .testTarget(name: "FprepEndToEndTests", dependencies: ["FprepCore", "FprepGit", "fprep"]),
    ],
    swiftLanguageModes: [.v6]
)
