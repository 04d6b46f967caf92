// The replica: the type every concern extends (Replica: open, recover, paths), and the commands
// on items that need several concerns at once — status, trash and restore, versions, revert, and
// the tags and favorites shared between devices.
// May use: every other folder of FprepCore.
