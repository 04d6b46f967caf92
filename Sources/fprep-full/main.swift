import FprepCLI
import FprepFullCLI

// Every command, the network service's among them (see FprepCLI's FullCommands).
FullCLI.install()
Fprep.runMain()
