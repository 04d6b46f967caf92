import ArgumentParser
import FprepCLI
import FprepCore

struct Completions: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "completions",
        abstract: FullCommands.completionsAbstract,
        discussion: """
            scripts/install.sh installs them (and the man page) for every user. By hand:
              fprep completions bash > /usr/share/bash-completion/completions/fprep
              fprep completions zsh > /usr/local/share/zsh/site-functions/_fprep
              fprep completions fish > ~/.config/fish/completions/fprep.fish
            """
    )

    @OptionGroup var output: OutputOptions

    @Argument(help: ArgumentHelp("bash, zsh or fish.", valueName: "SHELL"))
    var shell: String

    func validate() throws {
        guard CompletionShell(rawValue: shell) != nil else { throw ValidationError("no completions for '\(shell)': give bash, zsh or fish") }
    }

    func run() throws {
        guard let kind = CompletionShell(rawValue: shell) else { return }
        Console.output(Fprep.completionScript(for: kind) + "\n")
    }
}
