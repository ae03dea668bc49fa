"""The bounds of what `indexer abi add` accepts, which `abi_parse.py` checks as it reads a file.
They stand apart from the parser so that the command line can state them in its help without
importing eth-abi (a third of a second of every command's start)."""

# Events, the file's entries of type "event" (anonymous ones and repeats included): each is a
# table, and PostgreSQL's lock table is the whole server's, sized for max_locks_per_transaction
# (64) times its connections and processes (122 by default): 7,808 locks, and what its shared
# memory has to spare. `abi add` creates every table in one transaction, at 6 locks a table (the
# table, its key's index and constraint, its TOAST table and index, its row type): 3,000 at the
# bound, which leaves a default server room for its other sessions. (`abi drop` takes 7 a table,
# DROP_BATCH tables a transaction; a decode window 2 for every registered table.) The largest
# ABIs of deployed contracts (diamonds, explorers' merged proxy ABIs) have a few hundred events;
# most have under fifty.
MAX_EVENTS = 500
# Parameters of an event, and components of a tuple: Solidity's stack limits an event to about
# sixteen without via-IR, and at 64 columns a row stays well within a page, however wide its
# values (each value moved to TOAST still takes its 18-byte pointer).
MAX_PARAMS = 64
# Tuples within tuples, and the dimensions of one array: real events nest structs two or three
# deep and arrays two. eth-abi parses a type recursively; 5,000 dimensions took it 23 s of CPU.
MAX_DEPTH = 8
MAX_DIMENSIONS = 8
# The 32-byte words of a parameter's fixed-size arrays, their sizes multiplied out through every
# dimension and tuple: 65,536 words are 2 MiB of log data, 17 million gas at 8 gas a byte, half a
# mainnet block. Real events' fixed-size arrays hold a handful of values.
MAX_STATIC_WORDS = 65_536
# The characters of an event's parameter types, as its signature writes them: Seaport's
# OrderFulfilled, with two arrays of structs, has 109. It bounds eth-abi's parsing of a whole ABI:
# 500 events of 2,048 characters of distinct types took it 0.6 s of CPU.
MAX_TYPE_CHARS = 2_048
# The file: compilers' artifacts, which hold the ABI with the bytecode and the sources' syntax
# trees, reach a few MB.
MAX_FILE_BYTES = 64 << 20
