"""Decoding what is stored, without the node: token transfers (`token_transfers`) and any
contract's events through its registered ABI (`abi`: the registry; `abi_parse`: an ABI read
within bounds; `abi_decode`: logs into the events' tables; `abi_names`: safe names).
"""
