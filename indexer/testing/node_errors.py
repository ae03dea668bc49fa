"""What real nodes and providers answer when they refuse a call, verbatim, each with its source:
the replay node (`replay.py`) and the fault proxy answer with these.
"""

# go-ethereum rpc/errors.go (methodNotFoundError): code -32601, "the method %s does not
# exist/is not available".
METHOD_NOT_FOUND = -32601
# go-ethereum rpc/errors.go: errcodeResponseTooLarge = -32003, errMsgResponseTooLarge; rpc/handler.go
# answers each call of a batch left once the batch's responses pass BatchResponseMaxSize with it.
RESPONSE_TOO_LARGE = {"code": -32003, "message": "response too large"}
# go-ethereum rpc/errors.go errMsgBatchTooLarge, an invalidRequestError (-32600); rpc/handler.go
# respondWithBatchTooLarge sends it once, in a batch of one, with the id of the first call.
BATCH_TOO_LARGE = {"code": -32600, "message": "batch too large"}
# go-ethereum core/history/historymode.go PrunedHistoryError (since v1.15.8, PR #31361), returned
# by eth/api_backend.go for blocks below the history pruning cutoff.
PRUNED_HISTORY = {"code": 4444, "message": "pruned history unavailable"}
# Infura's answer over its request rate: code -32005 ("exceeded project rate limit" in alloy-rs/alloy
# crates/json-rpc/src/response/payload.rs, whose retry policy keys on it) with this message, which
# public clients' retry code matches verbatim; "Limit exceeded" is EIP-1474's name for -32005.
INFURA_RATE_LIMITED = {"code": -32005, "message": "project ID request rate exceeded"}
# Alchemy answers HTTP 429 over its compute-unit rate (alchemy.com/docs/reference/throughput),
# with this error, quoted verbatim in BobTheBuidler/eth_retry eth_retry/eth_retry.py.
ALCHEMY_RATE_LIMITED = {
    "code": 429,
    "message": "Your app has exceeded its compute units per second capacity. If you have retries "
               "enabled, you can safely ignore this message. If not, check out "
               "https://docs.alchemy.com/reference/throughput",
}
# go-ethereum rpc/json.go / handler.go texts for malformed requests.
PARSE_ERROR = {"code": -32700, "message": "parse error"}
EMPTY_BATCH = {"code": -32600, "message": "empty batch"}
INVALID_REQUEST = {"code": -32600, "message": "invalid request"}
