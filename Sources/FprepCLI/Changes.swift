import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct Changes: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "changes",
        abstract: "Enumerate the changes since a sync anchor.",
        discussion: """
            Reports what changed between anchor --from and --to (default: the replica's anchor): 'updated' items with full metadata (as 'ls' gives them), 'deleted' identifiers, 'moved' items (old and new identifier), the 'anchor' the batch reaches and 'moreComing'. When --limit cuts a batch, the anchor is a continuation token: pass it as --from to get the rest.

            --container narrows to one folder's children (its identifier, or NSFileProviderRootContainerItemIdentifier) or to the working set (NSFileProviderWorkingSetContainerItemIdentifier).

            An anchor that is unknown or not an ancestor of the current one (history rewritten) has expired: exit status 65, and the consumer must re-enumerate from scratch.

            --stdin keeps one process answering: each line read is an anchor (as --from takes it), and each answer is one line of JSON, the batch or {"error": MESSAGE, "status": CODE} with the exit status the single command would have had. --to, --container and --limit apply to every request. It ends at the end of the input. A consumer that asks often saves the start of a process on every request.
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Option(help: ArgumentHelp("The anchor to start from (a commit id or a continuation token).", valueName: "ANCHOR"))
    var from: String?

    @Option(help: ArgumentHelp("The anchor to end at (default: the replica's).", valueName: "ANCHOR"))
    var to: String?

    @Option(help: ArgumentHelp("Only changes of this container's items.", valueName: "ID"))
    var container: String?

    @Option(help: "At most this many changes in the batch.")
    var limit: Int?

    @Flag(help: "Print the batch as JSON.")
    var json = false

    @Flag(help: "Keep printing a batch after each sync until interrupted (an active enumerator for the push service).")
    var follow = false

    @Flag(help: "Answer one anchor a line from standard input, one JSON line each, until the input ends.")
    var stdin = false

    func run() throws {
        try ChangesRequest(location: replica.location, from: from, to: to, container: container, limit: limit,
                           json: json, follow: follow, stdin: stdin).run()
    }
}

/// One `changes` command: the values of its options, however its command
/// line was parsed.
struct ChangesRequest: Equatable {
    var location = ReplicaLocation()
    var from: String?
    var to: String?
    var container: String?
    var limit: Int?
    var json = false
    var follow = false
    var stdin = false

    func run() throws {
        if stdin {
            guard from == nil, !follow else { throw FprepError(.usage, "--stdin reads its anchors from standard input: it takes neither --from nor --follow") }
            return answerRequests()
        }
        guard let from else { throw FprepError(.usage, "missing --from ANCHOR (or --stdin to read anchors from standard input)") }
        if follow {
            guard to == nil, limit == nil else { throw FprepError(.usage, "--follow takes neither --to nor --limit") }
            // fprep-full's (`fprep` hands `changes --follow` to it).
            guard let follow = FullCommands.followChanges else { FullCommands.execute() }
            return try follow(location, from, container, show)
        }
        let opened = try location.open("changes", exclusive: false)
        try show(try opened.changes(from: from, to: to, container: container, limit: limit))
        Trace.mark("output")
        // Nothing is left to write: closing the database
        // and freeing libgit2's caches would only spend time (0.2-0.4 ms)
        // on what the process's end releases anyway.
        fflush(nil)
        withExtendedLifetime(opened) { Glibc.exit(0) }
    }

    /// `--stdin`: the replica is opened for each request (so a sync can
    /// run between two), the process and its libraries only once.
    private func answerRequests() {
        struct Failure: Encodable {
            let error: String
            let status: Int32
        }
        while let line = readLine() {
            guard let anchor = line.split(whereSeparator: \.isWhitespace).first.map(String.init) else { continue }
            do {
                let opened = try location.open("changes", exclusive: false)
                let batch = try opened.changes(from: anchor, to: to, container: container, limit: limit)
                Self.printJSON(batch, pretty: false)
            } catch let error as FprepError {
                try? JSONOutput.printLine(Failure(error: error.message, status: error.exitCode))
            } catch {
                try? JSONOutput.printLine(Failure(error: ErrorRendering.unexpected(error) ?? "\(error)", status: 1))
            }
            fflush(nil)
        }
    }

    func show(_ batch: ChangeBatch) throws {
        if json { return Self.printJSON(batch, pretty: true) }
        for path in batch.deleted { print("deleted  \(path)") }
        for move in batch.moved { print("moved    \(move.from) → \(move.to)") }
        for item in batch.updated { print("updated  \(item.identifier)\(item.kind == "folder" ? "/" : "")  \(item.size.map(String.init) ?? "-")  \(item.state.rawValue)") }
        print(batch.moreComing ? "more: \(batch.anchor)" : "anchor: \(batch.anchor)")
    }

    /// The batch as one JSON text and a newline (see `ChangeBatch.json`).
    private static func printJSON(_ batch: ChangeBatch, pretty: Bool) {
        Console.output(Data(batch.json(pretty: pretty) + [0x0A]))
    }

    /// The command line of an enumerator's request, `changes` with each of
    /// its options at most once as `--name VALUE` (or a flag), read without
    /// ArgumentParser: a File Provider host asks this many times a second,
    /// and ArgumentParser's reflection costs each process 1.4 ms in a binary
    /// this size (a third of git's whole diff). nil for any other
    /// command line (`--name=VALUE`, help, a mistake, another command):
    /// ArgumentParser parses those and gives its usual messages.
    static func quickParse(_ arguments: [String]) -> ChangesRequest? {
        guard arguments.first == "changes" else { return nil }
        var request = ChangesRequest()
        // An array, not a Set: a Set of strings would be the process's
        // first, and its generic metadata costs more than this whole loop.
        var seen: [String] = []
        var rest = arguments.dropFirst()
        while let option = rest.popFirst() {
            let name = option == "--replica" ? "-C" : option
            guard !seen.contains(name) else { return nil }
            seen.append(name)
            switch option {
            case "--json": request.json = true
            case "--follow": request.follow = true
            case "--stdin": request.stdin = true
            case "--no-wait": request.location.noWait = true
            case "--verbose": request.location.verbose = true
            case "-C", "--replica", "--from", "--to", "--container", "--limit":
                guard let value = rest.popFirst(), !value.hasPrefix("-"), !value.isEmpty else { return nil }
                switch option {
                case "--from": request.from = value
                case "--to": request.to = value
                case "--container": request.container = value
                case "--limit":
                    guard let limit = Int(value) else { return nil }
                    request.limit = limit
                default: request.location.replica = value
                }
            default: return nil
            }
        }
        return request
    }
}

struct Anchor: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "anchor", abstract: "Print the replica's current sync anchor (a commit id).")

    @OptionGroup var replica: ReplicaOptions

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let anchor = try replica.open("anchor", exclusive: false).currentAnchor()
        if json { return try JSONOutput.print(["anchor": anchor]) }
        print(anchor)
    }
}
