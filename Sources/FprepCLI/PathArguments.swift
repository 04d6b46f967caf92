import ArgumentParser

/// Long lists of paths on the command line (`fprep materialize $(cat list)`),
/// parsed in time that follows their length.
///
/// ArgumentParser stores each value of a repeated positional argument by
/// copying everything it holds so far, so n paths cost n² (10^3 paths took
/// 60 ms, 10^4 took 3.3 s). Before parsing, every run of more than
/// `keptInRun` tokens that cannot be options (no leading '-', or anything
/// after '--') keeps its first tokens, which may be a subcommand's name or
/// an option's value, and the rest of it becomes one stand-in token; after
/// parsing, the command puts the run back where its stand-in landed. None of
/// these commands' options takes more than one value, so the tokens a
/// stand-in replaces are positional.
enum PathArguments {
    /// Tokens of a run left as they are: the command's name, a subcommand's,
    /// one option's value.
    static let keptInRun = 3
    /// Runs this long or shorter are parsed as they are.
    static let shortestFolded = 32

    /// The replaced runs, by stand-in.
    nonisolated(unsafe) private static var runs: [String: ArraySlice<String>] = [:]

    private static let standInPrefix = "\u{1}fprep-run-"

    /// The commands that take paths, by name.
    static let commands: [any TakesPaths.Type] = [Materialize.self, Evict.self, Pin.self, Unpin.self, Revert.self]

    /// `arguments` (the command's name first) with its long runs of
    /// positional tokens replaced by stand-ins, when the command takes paths.
    static func fold(_ arguments: [String]) -> [String] {
        guard arguments.count > shortestFolded, let name = arguments.first,
              commands.contains(where: { $0.configuration.commandName == name }) else { return arguments }
        var folded: [String] = []
        var i = 0
        func foldRun(_ run: ArraySlice<String>) {
            guard run.count > shortestFolded else { folded += run; return }
            folded += run.prefix(keptInRun)
            let standIn = standInPrefix + String(runs.count)
            runs[standIn] = run.dropFirst(keptInRun)
            folded.append(standIn)
        }
        while i < arguments.count {
            if arguments[i] == "--" {
                folded.append("--")
                foldRun(arguments[(i + 1)...])
                break
            }
            guard !arguments[i].hasPrefix("-") else {
                folded.append(arguments[i])
                i += 1
                continue
            }
            var end = i
            while end < arguments.count, !arguments[end].hasPrefix("-") { end += 1 }
            foldRun(arguments[i..<end])
            i = end
        }
        return folded
    }

    /// The parsed `values` with each stand-in replaced by its run.
    static func unfold(_ values: [String]) -> [String] {
        guard !runs.isEmpty, values.contains(where: { $0.hasPrefix(standInPrefix) }) else { return values }
        var unfolded: [String] = []
        unfolded.reserveCapacity(values.count + runs.values.reduce(0) { $0 + $1.count })
        for value in values {
            if let run = runs[value] { unfolded += run } else { unfolded.append(value) }
        }
        return unfolded
    }

    /// A usage message with a stand-in named by the first token it replaced.
    static func unfoldMessage(_ message: String) -> String {
        var message = message
        for (standIn, run) in runs where message.contains(standIn) {
            message = message.replacingAll(standIn, with: run.first ?? "")
        }
        return message
    }
}

/// A command whose positional arguments are paths (see `PathArguments`).
protocol TakesPaths: ParsableCommand {
    var paths: [String] { get set }
}

extension Materialize: TakesPaths {}
extension Evict: TakesPaths {}
extension Pin: TakesPaths {}
extension Unpin: TakesPaths {}
extension Revert: TakesPaths {}
