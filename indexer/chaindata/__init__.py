"""The chain's data, from the node's JSON to the tables: fetching a batch (`chain`), where every
key goes (`columns`) and the COPY rows (`rows`), the roots proven (`roots` over `rlp_codec`,
`ordered_trie`, `encodings`, `json_encodings`; `stored_roots` from stored rows), traces as rows
(`traces`), the write (`store`), the link check and what a rollback may delete (`forks`), and
fetching ahead of the writer (`prefetch`).
"""
