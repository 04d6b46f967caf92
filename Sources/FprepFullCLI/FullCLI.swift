import ArgumentParser
import FprepCLI

/// What `fprep-full` adds to the command line before it runs it.
public enum FullCLI {
    public static func install() {
        FullCommands.commands = [Serve.self, Watch.self, AgentCommand.self, Completions.self]
        FullCommands.followChanges = { location, from, container, show in
            try ChangesFollower(replica: location, from: from, container: container, show: show).run()
        }
    }
}
