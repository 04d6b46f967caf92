// swift-tools-version:6.0
import PackageDescription

/// libgit2 and the libraries under it, linked from their static archives
/// (each comes with the -dev package the README installs: libgit2-dev pulls
/// in zlib, mbedTLS, libssh2, http-parser and PCRE2; libssl-dev gives
/// libcrypto). Loading libgit2.so with its 17 shared libraries, OpenSSL's
/// among them, cost every fprep command about 3 ms before its first line,
/// as long as git's whole `diff-tree`. In dependency order: a static archive
/// only resolves what the ones before it left open.
let staticCLibraries: [LinkerSetting] = [
    "git2", "ssh2", "mbedtls", "mbedx509", "mbedcrypto", "http_parser", "pcre2-8", "z", "crypto",
].map { .linkedLibrary(":lib\($0).a") } + [
    // libgit2's init skips its network stack (fprep's network is the git
    // command): Sources/CLibGit2Support/network_init.c.
    .unsafeFlags(["-Xlinker", "--wrap=git_mbedtls_stream_global_init", "-Xlinker", "--wrap=git_transport_ssh_global_init"]),
]

/// How both executables link.
let executableLinking: [LinkerSetting] = [.unsafeFlags([
    // The static Swift runtime's link exports every symbol of the program;
    // nothing looks them up, and the runtime's start-up (the backtracer
    // finding its own path with dladdr) scans all 16,900 of them on every
    // command.
    "-Xlinker", "--no-export-dynamic",
    // Relative relocations packed (RELR, glibc 2.36; gold cannot write
    // them, lld can): the loader read 3.4 MB of them, 147,000 entries for
    // the program's metadata, on every start, 4 ms of a `fprep changes`
    // that took 20 (git's `diff-tree` takes 7-9). A position-dependent
    // executable would save 1-2 ms more but give up address randomization
    // in the root agent.
    "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
    // The C++ runtime and GCC's unwinder from their static archives (see
    // the linker scripts there).
    "-L" + Context.packageDirectory + "/Sources/fprep/Linker",
])]

let package = Package(
    name: "fprep",
    products: [
        .executable(name: "fprep", targets: ["fprep"]),
        .executable(name: "fprep-full", targets: ["fprep-full"]),
        .executable(name: "fprep-bench", targets: ["fprep-bench"]),
        .executable(name: "fprep-model", targets: ["fprep-model"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        // The push service's HTTP server and client (FprepServer); no Foundation.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // HMAC-SHA256 webhook signatures and ES256 APNs provider tokens (FprepServer).
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        // APNs speaks HTTP/2 only (FprepServer's APNs client), and the service
        // serves HTTP/2 beside HTTP/1.1 by ALPN (`fprep serve --tls-cert`).
        .package(url: "https://github.com/apple/swift-nio-http2", from: "1.46.0"),
        // TLS: to APNs, for the service's own API (`--tls-cert/--tls-key`),
        // and for devices that verify it (`fprep watch --ca`) (FprepServer).
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // `fprep serve --database postgres://…`: several instances on one
        // PostgreSQL database (FprepServicePostgres only).
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        // libgit2 from the system (Debian: libgit2-dev); only FprepGit imports it.
        // The module map gives its headers; FprepGit links it (see below).
        .systemLibrary(
            name: "CLibGit2",
            providers: [.apt(["libgit2-dev"])]
        ),
        // SQLite from the system (Debian: libsqlite3-dev) for the replica's state.
        .systemLibrary(
            name: "CSQLite",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // OpenSSL's libcrypto (Debian: libssl-dev), which libssh2 under libgit2
        // needs anyway: the SHA-1 checksum of the index file fprep reads and
        // writes itself.
        .systemLibrary(
            name: "CLibCrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // Linux calls Glibc's Swift overlay does not expose (openat2, fallocate flags, syncfs).
        .target(name: "CFprepSys"),
        // What libgit2's static archive needs besides its libraries: an init
        // without its network stack, and no GSSAPI.
        .target(name: "CLibGit2Support"),
        .target(
            name: "FprepGit",
            dependencies: ["CLibGit2", "CLibCrypto", "CLibGit2Support"],
            linkerSettings: staticCLibraries
        ),
        // The state database's VFS: SQLite's unix VFS with its wal-index
        // file's blocks allocated before use (no SIGBUS on a full disk).
        .target(name: "CFprepSQLite", dependencies: ["CSQLite"]),
        .target(name: "FprepCore", dependencies: ["FprepGit", "CSQLite", "CFprepSQLite", "CFprepSys"],
                linkerSettings: [.linkedLibrary(":libsqlite3.a")]),
        // The hook's side of push signals (outbox, spool, poke): no network
        // stack, since every `fprep` command may run it.
        .target(name: "FprepPush", dependencies: ["FprepCore", "FprepGit"]),
        // Push signals: the delivery service, the device's watcher.
        .target(
            name: "FprepServer",
            dependencies: [
                "FprepPush", "FprepCore", "FprepGit", "CSQLite",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // The push service's state in PostgreSQL, shared by several
        // `fprep serve` instances that wake each other with LISTEN/NOTIFY.
        .target(
            name: "FprepServicePostgres",
            dependencies: [
                "FprepServer", "FprepCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // `fprep serve --mirror`: a hosted remote's webhook, its local mirror,
        // sizes and push signals for it (a companion of the service).
        .target(
            name: "FprepMirror",
            dependencies: [
                "FprepServer", "FprepCore", "FprepGit",
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // Hydration on access: `fprep agent`, on fanotify pre-content events.
        .target(name: "FprepAgent", dependencies: ["FprepCore", "FprepGit", "CFprepSys"]),
        // The command line `fprep` runs: no network stack (FullCommands).
        .target(
            name: "FprepCLI",
            dependencies: [
                "FprepCore", "FprepPush", "FprepAgent",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            plugins: ["BuildInfo"]
        ),
        // What `fprep-full` adds: serve, watch, agent, changes --follow, completions.
        .target(
            name: "FprepFullCLI",
            dependencies: [
                "FprepCLI", "FprepCore", "FprepServer", "FprepServicePostgres", "FprepMirror", "FprepAgent",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // `fprep --version` names the commit it was built from: the plugin
        // runs this tool, which reads the checkout's HEAD (no git process).
        .executableTarget(name: "fprep-build-info"),
        .plugin(name: "BuildInfo", capability: .buildTool(), dependencies: ["fprep-build-info"]),
        .executableTarget(
            name: "fprep",
            dependencies: ["FprepCLI"],
            exclude: ["Linker"],
            linkerSettings: executableLinking
        ),
        // Every command, the network service's among them; `fprep` runs it for those.
        .executableTarget(
            name: "fprep-full",
            dependencies: ["FprepCLI", "FprepFullCLI"],
            linkerSettings: executableLinking
        ),
        .executableTarget(
            name: "fprep-bench",
            dependencies: [
                "CFprepSys", "FprepServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The randomized model test: seeded cases run against the real binary
        // and git (issue 9). Only Foundation and SQLite's integrity check.
        .target(name: "FprepModel", dependencies: ["CSQLite"], linkerSettings: [.linkedLibrary(":libsqlite3.a")]),
        .executableTarget(
            name: "fprep-model",
            dependencies: ["FprepModel", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // What the test targets share: whether a server they started (not
        // another test's) listens on its port.
        .target(name: "FprepTestSupport", path: "Tests/FprepTestSupport"),
        .testTarget(name: "FprepGitTests", dependencies: ["FprepGit", "FprepModel"]),
        .testTarget(name: "FprepCoreTests", dependencies: ["FprepCore", "FprepGit", "FprepTestSupport"]),
        // The APNs tests' peer is a real HTTP/2 server over TLS, written with the same NIO stack.
        .testTarget(name: "FprepServerTests", dependencies: [
            "FprepServer", "FprepPush", "FprepCore", "FprepGit", "FprepTestSupport",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOEmbedded", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "NIOHTTP2", package: "swift-nio-http2"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
        ]),
        .testTarget(name: "FprepEndToEndTests", dependencies: ["FprepCore", "FprepGit", "FprepTestSupport", "FprepModel", "fprep", "fprep-full", .product(name: "Crypto", package: "swift-crypto")],
                    exclude: ["Golden"]),
        .testTarget(name: "FprepModelTests", dependencies: ["FprepModel", "fprep", "fprep-full"], exclude: ["Cases"]),
    ],
    swiftLanguageModes: [.v6]
)
