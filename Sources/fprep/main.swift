import FprepCLI

Fprep.runMain()
