import Glibc
import PairCtlCommands

exit(Pairctl.run(Array(CommandLine.arguments.dropFirst())))
