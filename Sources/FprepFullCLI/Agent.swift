import ArgumentParser
import FprepAgent
import FprepCLI
import FprepCore
import FprepServer

/// The push service's stream is one of the worker's remote signals.
extension PushFollower: RemoteSignals {}

struct AgentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: FullCommands.agentAbstract,
        discussion: """
            Watches every placeholder of a replica with a fanotify pre-content mark (Linux 6.14 or later, as root). The first open, read, write, mmap or exec of a placeholder waits until its content is fetched and written in place (at its open: a program never holds a placeholder whose content is not there, so a copier that skips holes cannot copy zeros); the file is then materialized, as 'fprep materialize' leaves it. When the content cannot be had within the timeout (offline, say), the program's call fails with EIO instead of reading zeros. Root is needed for fanotify only: git, the replica's state and every file written run in a worker process as the replica's owner. Logs one timestamped line per hydration on standard error; stops on SIGTERM or Ctrl-C.

            It also syncs each replica by itself (unless 'git config fprep.agent.sync false' there): about half a second after a program closes a file it changed (never while one still has it open for writing), on each push signal when a push service is recorded ('fprep watch --service URL' once), and when 'git ls-remote' shows the remote moved (every minute). The replica's git config tunes it: fprep.agent.syncDelay (500 ms), fprep.agent.pollSeconds (60; 0 never).

            With -C DIR it serves that replica in the foreground. Without it ('fprep agent run'), it serves every replica registered with 'fprep agent add' and follows the registry while it runs (see the systemd unit in contrib/systemd). Without a running agent a placeholder reads as zeros, and 'fprep materialize' brings content explicitly.

            Examples: sudo fprep agent -C ~/work; sudo fprep agent add ~/work; sudo fprep agent status
            """,
        subcommands: [AgentRun.self, AgentAdd.self, AgentRemove.self, AgentList.self, AgentStatusCommand.self, AgentWorkerCommand.self]
    )

    @OptionGroup var replica: ReplicaOptions
    @OptionGroup var serving: AgentServingOptions

    func validate() throws { try serving.validate() }

    func run() throws {
        try refusingInOneLine {
            if replica.replica != nil {
                try Agent.serve(replicaAt: replica.baseDirectory, timeout: serving.timeout)
            } else {
                try AgentDaemon.run(registry: AgentRegistry(option: serving.state.stateDir), timeout: serving.timeout)
            }
        }
    }
}

/// Where the agent keeps its registry, pid and status.
struct AgentStateOptions: ParsableArguments {
    @Option(name: .customLong("state-dir"),
            help: ArgumentHelp("The agent's state folder: its registry of replicas, pid and status (default: $\(AgentRegistry.environmentVariable), else \(AgentRegistry.defaultFolder)).", valueName: "DIR"))
    var stateDir: String?

    var registry: AgentRegistry { AgentRegistry(option: stateDir) }
}

/// What a serving agent takes.
struct AgentServingOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Fail an access with EIO when its content takes longer than SECONDS, plus a second per 4 MiB of the file.", valueName: "SECONDS"))
    var timeout: Double = 10

    @OptionGroup var state: AgentStateOptions

    func validate() throws {
        guard timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout must be between 0 and 3600 seconds") }
    }
}

/// Refusals (no privilege, no kernel support) are one line already.
private func refusingInOneLine(_ body: () throws -> Void) throws {
    do {
        try body()
    } catch let refusal as AgentRefusal {
        printError(refusal.description)
        throw ExitCode(1)
    }
}

struct AgentRun: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Serve every registered replica until stopped (what the systemd unit runs).",
        discussion: "Registered replicas are served each with its own fanotify group; 'fprep agent add' and 'remove' take effect while it runs. A replica that cannot be served is logged and tried again every 30 s."
    )

    @OptionGroup var output: OutputOptions

    @OptionGroup var serving: AgentServingOptions

    func validate() throws { try serving.validate() }

    func run() throws {
        try refusingInOneLine {
            try AgentDaemon.run(registry: serving.state.registry, timeout: serving.timeout)
        }
    }
}

struct AgentAdd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Register a replica with the agent (a running agent starts serving it at once)."
    )

    @OptionGroup var output: OutputOptions

    @Argument(help: ArgumentHelp("The replica (its folder, or any folder inside it).", valueName: "DIR"))
    var folder: String

    @OptionGroup var state: AgentStateOptions

    func run() throws {
        let registry = state.registry
        let (root, added) = try registry.add(folder)  // refuses a folder outside any replica
        let running = AgentDaemonStatus.current(stateFolder: registry.folder)
        let serving = running.map { "the agent (pid \($0.pid)) serves it" }
            ?? "no agent runs: start it with 'sudo systemctl start fprep-agent' or 'sudo fprep agent run'"
        print(added ? "added \(root); \(serving)" : "\(root) is registered already; \(serving)")
    }
}

struct AgentRemove: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Unregister a replica (a running agent stops serving it at once)."
    )

    @OptionGroup var output: OutputOptions

    @Argument(help: ArgumentHelp("The replica as registered (it may be gone), or any folder inside it.", valueName: "DIR"))
    var folder: String

    @OptionGroup var state: AgentStateOptions

    func run() throws {
        let registry = state.registry
        guard let root = try registry.remove(folder) else {
            throw FprepError(.usage, "'\(folder)' is not registered with the agent; 'fprep agent list' shows the registered replicas")
        }
        print("removed \(root)")
    }
}

struct AgentList: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the replicas registered with the agent."
    )

    @OptionGroup var output: OutputOptions

    @OptionGroup var state: AgentStateOptions

    @Flag(help: "Print the list as JSON.")
    var json = false

    private struct Listing: Encodable { let replicas: [String] }

    func run() throws {
        let roots = try state.registry.read()
        if json { return try JSONOutput.print(Listing(replicas: roots)) }
        for root in roots { print(root) }
    }
}

struct AgentStatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show whether the agent runs, and per replica: placeholders watched, hydrations served and failed, last sync, last error."
    )

    @OptionGroup var output: OutputOptions

    @OptionGroup var state: AgentStateOptions

    @Flag(help: "Print the report as JSON.")
    var json = false

    /// 60 → "60 s", 0.5 → "0.5 s".
    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }

    private struct Report: Encodable {
        let running: Bool
        let pid: Int32?
        let started: String?
        let stateFolder: String
        let replicas: [ReplicaStatus]
    }

    func run() throws {
        let registry = state.registry
        var report: Report
        if let status = AgentDaemonStatus.current(stateFolder: registry.folder) {
            report = Report(running: true, pid: status.pid, started: status.started.isEmpty ? nil : status.started,
                            stateFolder: registry.folder, replicas: status.replicas)
        } else {
            let roots = try registry.read()
            report = Report(running: false, pid: nil, started: nil, stateFolder: registry.folder,
                            replicas: roots.map { ReplicaStatus(path: $0, state: .notServed) })
        }
        // A replica this agent does not serve may be served by another ('fprep agent -C').
        let replicas = report.replicas.map { replica -> ReplicaStatus in
            var replica = replica
            if replica.state != .serving { replica.servedBy = InPlaceHydration.servingAgent(replicaRoot: replica.path) }
            return replica
        }
        report = Report(running: report.running, pid: report.pid, started: report.started, stateFolder: report.stateFolder, replicas: replicas)
        if json { return try JSONOutput.print(report) }
        if let pid = report.pid {
            print("agent:  running, pid \(pid)\(report.started.map { " since \($0)" } ?? "") (state folder \(report.stateFolder))")
        } else {
            print("agent:  not running (state folder \(report.stateFolder)); start it with 'sudo systemctl start fprep-agent' or 'sudo fprep agent run'")
        }
        if report.replicas.isEmpty { print("no replica registered (add one with 'fprep agent add DIR')") }
        for replica in report.replicas {
            var line = "\(replica.path): \(replica.state.rawValue)"
            if replica.state == .serving { line += ", \(count(replica.placeholders, "placeholder")) watched" }
            if replica.state == .failed { line += " (tried again every 30 s)" }
            if replica.state == .serving || replica.hydrated + replica.failed > 0 {
                line += ", \(replica.hydrated) hydrated, \(replica.failed) failed"
            }
            if let other = replica.servedBy { line += "; served by another agent (pid \(other), 'fprep agent -C')" }
            print(line)
            if let last = replica.lastSync {
                let how = replica.lastSyncFailed == true ? "failed" : "done"
                print("  last sync (\(count(replica.syncs ?? 0, "sync")) so far) \(how) at \(last): \(replica.lastSyncResult ?? "")")
                if let waiting = replica.waitingToSync, waiting > 0 {
                    print("  \(count(waiting, "local change")) waiting (open for writing)")
                }
            }
            if let remote = replica.remoteChanges {
                let poll = remote.pollSeconds > 0 ? "polls the remote every \(Self.seconds(remote.pollSeconds))" : "never polls the remote (fprep.agent.pollSeconds 0)"
                if let service = remote.service {
                    let since = remote.since.map { " since \($0)" } ?? ""
                    if remote.connected {
                        print("  push service \(service): connected\(since); the agent also \(poll)")
                    } else {
                        print("  push service \(service): not connected\(since)\(remote.lost.map { " (\($0))" } ?? ""); the agent \(poll)")
                    }
                } else {
                    print("  no push service (set one with 'fprep watch --service URL'); the agent \(poll)")
                }
            }
            if let ignored = replica.changesIgnored {
                print("  changes only to ignored items: \(count(ignored, "time")) (no sync started)")
            }
            if let error = replica.lastError {
                print("  last error\(replica.lastErrorAt.map { " at \($0)" } ?? ""): \(error)")
            }
        }
    }
}

/// The agent's worker for one replica, started by the agent as the
/// replica's owner (see `WorkerClient`); not for people to run.
struct AgentWorkerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "The agent's worker for one replica, run as its owner (started by the agent).",
        shouldDisplay: false
    )

    @Argument(help: ArgumentHelp("The replica's root.", valueName: "ROOT"))
    var root: String

    func run() throws {
        try AgentWorker.serve(root: root) { root, onPush, connection, note in
            try PushFollower.start(root: root, onPush: onPush, connection: connection, note: note)
        }
    }
}
