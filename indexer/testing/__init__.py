"""The test kit shared by tests/ and scripts/: anvil nodes and chains, a fault-injecting proxy,
a PostgreSQL cluster of one's own, `indexer work` pools and their processes, waiting, and
comparing what was indexed with the node. The indexer itself never imports it."""
