"""Talking to the chain's node: the JSON-RPC client (`rpc`) over one HTTP request
(`rpc_transport`), a batch's calls (`rpc_batch`), each endpoint's adaptive rate (`rpc_rate`) and
what a node's errors mean (`rpc_errors`); what each worker learned of its endpoints
(`endpoints`); the new heads a node announces over a WebSocket (`heads`).
"""
