// FprepServicePostgres: the push service's state in PostgreSQL (`fprep serve --database
// postgres://…`), for several instances on one database; LISTEN/NOTIFY wakes them.
// May use: FprepServer (the storage protocols it defines), FprepCore, postgres-nio, SwiftNIO.
