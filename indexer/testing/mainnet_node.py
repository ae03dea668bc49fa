"""A JSON-RPC node for benchmarks that serves deterministic blocks with Ethereum mainnet's shape,
at almost no cost, so that a backfill benchmark measures the indexer rather than the node (on a
dense anvil chain anvil itself takes most of the machine).

Blocks `first..last`, each of the era its height falls in (`ERAS`): transaction types, calldata
sizes, logs per transaction (topics, data sizes), receipts (a state root before Byzantium, a
status since), base fee, withdrawals (16 a block since Shanghai), blob and EIP-7702 fields as
mainnet had them at that height. Every block passes the indexer's own checks: it links to the
one below by `parentHash`, its transactions, receipts and logs name its hash and number, each
transaction hash is the keccak of its signed encoding, and transactionsRoot, receiptsRoot,
withdrawalsRoot and every logs bloom are computed with `indexer.chaindata.roots` (so
INDEXER_VERIFY_ROOTS=true proves every block). Not real: signatures (r and s are random, `from`
is not what they recover), stateRoot, and the block hash, which is keccak of the height rather
than of the header (so that any block can be served without its ancestors; the height is in
its last 8 bytes, which lets eth_getBlockByHash find it).

How it stays cheap: each era has `templates` pre-built blocks (64 by default), each serialised
once to JSON with markers where a block's own values go. Block n takes one of them (a hash of
n picks which) and fills in its number, timestamp, hash, parent hash, state root, and the last
8 bytes of every transaction's `r` (its height): so every transaction of every block is
distinct, and its hash is the keccak of an encoding spliced from the template's. That keccak
per transaction and the transactions trie are the expensive part (about 4.5 ms of CPU for a
block of the Shanghai era: keccak is eth-hash's, through pycryptodome); `precompute()`
(`--precompute`) does it for every block before serving, in a forked process per core, after
which serving costs about
0.7 ms of CPU a block (its three answers: header, full block, receipts) in the node itself
and 1.3 to 1.6 ms with its HTTP server (BENCHMARKS.md). Without it, the hashes of the last `cache_blocks` blocks
served are kept. Receipts do not depend on transaction hashes, so the receipts root and
blooms are the template's; withdrawal indices grow by 16 a block and their root is
recomputed.

The figures (ERAS), and which are estimates:
- Transactions per block: Etherscan's "Ethereum Daily Transactions" chart
  (etherscan.io/chart/tx) read at each era's sample date, divided by blocks per day
  (etherscan.io/chart/blocks: about 5,800 a day before the Merge in 2017-2021, 7,150 after it
  with 12-second slots). Approximate readings, rounded: ESTIMATES.
- Shanghai and later: the shape of each transaction (type, contract creation or not, calldata
  size, its logs' topic counts and data sizes, failed or not) is sampled from the 94
  transactions of the recorded mainnet block 18,000,000 (tests/fixtures/mainnet-18000000.json:
  83 EIP-1559 and 11 legacy transactions, 291 logs, 16 withdrawals, about 940 KB of JSON with
  its receipts). Measured, not estimated; only the count per block is an estimate.
- Earlier eras: a mix of plain transfers (no calldata, no logs), ERC-20 transfers (68 bytes of
  calldata, one Transfer log: 3 topics, 32 bytes of data), contract calls, DEX swaps (4 to 8
  logs) and contract creations, weighted by era: ESTIMATES, guided by the recorded blocks
  47218/47219 and 1755635 (two legacy transfers each, the latter's with an ERC-20 Transfer log).
- Transaction types: legacy only before Berlin (EIP-155 signatures from Spurious Dragon,
  2,675,000), a few EIP-2930 after Berlin, about half EIP-1559 just after London and 88% in
  block 18,000,000 (recorded), blob transactions (EIP-4844) after Cancun and set-code
  transactions (EIP-7702) after Prague at the per-block rates in ERAS: ESTIMATES.
- Fork heights (Homestead 1,150,000, Byzantium 4,370,000, Berlin 12,244,000, London
  12,965,000, the Merge 15,537,394, Shanghai 17,034,870, Cancun 19,426,587, Prague 22,431,084)
  are mainnet's; timestamps are 14.5 s a block before the Merge (an average, estimate) and 12 s
  after it.

Traces (issue 26): `debug_traceBlockByHash` and `debug_traceBlockByNumber` with
`{"tracer": "callTracer"}` (a list of `{"txHash", "result": frame}`, frames nested in `calls`) and
`debug_traceTransaction` (the frame alone), consistent with the blocks so that
`indexer.chaindata.traces.check_against_block` passes: the top frame is the transaction's from, to (for a
creation a CREATE to the receipt's contractAddress, none when it failed), value and input, with
the receipt's gasUsed, and `error` exactly when the receipt's status is 0x0; each log's address
is the account a CALL that was not undone ran in. The shape is measured from the recorded mainnet
block 24,298,763 (tests/fixtures/traces/erigon-rpc-tests-debug_traceBlockByNumber-callTracer-
24298763.json: Erigon's callTracer answer, 361 transactions, 1,758 frames): a transaction without
calldata gets its top frame alone (all 89 such there are one frame); one with calldata (272
there, 6.1 frames on average, 169 of them one frame, up to 199 frames and 14 deep; 962 CALL, 455
STATICCALL, 338 DELEGATECALL, 2 CREATE, 1 CREATE2 in the block, 18 frames failed) gets the tree of
one of them at random: its types, nesting, errors and revert reasons, gas figures and which keys
it has, and the sizes of every input and output (inner frames: 145 bytes of input, 27 of output
on average), with fresh addresses and data. The accounts its CALLs ran in take the addresses of
the transaction's logs; a log address left over (the blocks' logs come from more accounts than
mainnet's: 70% from a fresh address, an estimate) gets a CALL frame of its own below the top one.
So a tree has about 6.7 frames a transaction on the Shanghai-era blocks (against 4.9 in the
recorded block) and its JSON about 8.6 KB a transaction, most of it the top frames' input: the
transaction's calldata, 2.9 KB on average in block 18,000,000 (rollup batches before blobs)
against 243 bytes in 24,298,763. Earlier eras use the same trees: an ESTIMATE. Each template's
trees are built the first time one of its blocks is traced (about 0.5 s for an era's 64; before
serving with `--traces`) and kept as JSON: serving a block's traces costs splicing in its
transaction hashes; `debug_traceTransaction` finds its transaction by scanning, as
eth_getTransactionReceipt does. No `trace_block`.

    scripts/mainnet_node --first 18000000 --blocks 2000 --port 8545 [--precompute] [--traces]

(or `python -m indexer.testing.mainnet_server ...`: `mainnet_server.py`); it prints its URL once it serves, and stops on
SIGTERM or Ctrl-C.
"""


from __future__ import annotations

import multiprocessing
import os
import threading
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler
from typing import Any

import orjson

from ..chaindata import rlp_codec
from .loopback import LoopbackServer, gzip_accepted, send
from .mainnet_blocks import TX_MARKERS, WITHDRAWAL_MARKERS, Template, block_hashes, pick_template, render
from .mainnet_eras import (CHAIN_ID, ERAS, WITHDRAWALS_PER_BLOCK, Shape, block_hash, era_of, recorded_shapes,
                           timestamp_of)


# Blocks a forked process computes at a time (`precompute`).
PRECOMPUTE_CHUNK = 1_000
_NODE: MainnetNode | None = None  # in a process forked by `precompute`, the node it computes for


def _forked(node: MainnetNode) -> None:
    global _NODE
    _NODE = node


def _compute_forked(numbers: range) -> list[tuple[bytes, bytes, bytes]]:
    assert _NODE is not None
    return _NODE._compute(numbers)


class MainnetNode:
    """Blocks `first..last` (eth_blockNumber is `last`, and so are "latest", "finalized" and
    "safe"), served on loopback at `port` (0: a free one) from a thread of its own. Methods:
    eth_chainId, net_version, eth_blockNumber, eth_getBlockByNumber and eth_getBlockByHash (full
    or hashes only), eth_getBlockReceipts (by hash, number, tag or EIP-1898 object),
    eth_getTransactionReceipt (of a block served recently), debug_traceBlockByHash,
    debug_traceBlockByNumber and debug_traceTransaction (callTracer only). A block outside the
    range is null (its traces an error); another method is go-ethereum's -32601."""

    def __init__(self, first: int, last: int, *, templates: int = 64, port: int = 0, cache_blocks: int = 4096) -> None:
        if first < 0 or last < first:
            raise ValueError(f"blocks {first}..{last}: the range is empty or negative")
        if templates < 1:
            raise ValueError(f"templates must be at least 1, not {templates}")
        self.first, self.last, self.templates = first, last, templates
        self._templates: dict[str, list[Template]] = {}
        self._shapes: list[Shape] | None = None
        self._computed: OrderedDict[int, tuple[bytes, bytes, bytes]] = OrderedDict()  # block -> `_hashes`
        self.cache_blocks: int | None = cache_blocks  # None: every block kept (`precompute`)
        self.lock = threading.Lock()
        self.loopback = LoopbackServer(self._serve, port=port)
        self.url = self.loopback.url

    def _serve(self, request: BaseHTTPRequestHandler, body: bytes) -> None:
        answers = self.answers(body)
        if gzip_accepted(request):
            # Compressed as go-ethereum does whenever asked: the node's CPU a block then counts it.
            return send(request, 200, b"".join(p for answer in answers for p in answer))
        try:
            request.send_response(200)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(sum(len(p) for answer in answers for p in answer)))
            request.end_headers()
            for answer in answers:  # an answer at a time: no copy of the whole batch
                request.wfile.write(b"".join(answer))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout)

    def close(self) -> None:
        self.loopback.close()

    def __enter__(self) -> "MainnetNode":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- blocks -----------------------------------------------------------------------------------

    def template(self, number: int) -> Template:
        era = era_of(number)
        with self.lock:
            built = self._templates.get(era.name)
            if built is None:
                if era.recorded and self._shapes is None:
                    self._shapes = recorded_shapes()
                built = [Template(era, i, self._shapes or []) for i in range(self.templates)]
                self._templates[era.name] = built
        return pick_template(built, number)

    def precompute(self, processes: int | None = None) -> None:
        """Computes every block's hashes and roots now (about 4 ms of CPU a block of 150
        transactions), in `processes` forked processes (one a core by default), so that serving
        them costs only the filling in of the markers; kept for the node's life (about 10 KB a
        block). The templates are built here first: a forked process only computes, taking no
        lock (one a request thread held at the fork would never be released there) and keeping
        nothing."""
        with self.lock:
            self.cache_blocks = None  # before computing: a bounded cache would keep only the last blocks
        for era in ERAS:
            if self.first <= max(era.start, self.first) <= self.last:
                self.template(max(era.start, self.first))
        numbers = range(self.first, self.last + 1)
        processes = min(processes or os.cpu_count() or 1, max(1, len(numbers) // PRECOMPUTE_CHUNK))
        chunks = [numbers[i:i + PRECOMPUTE_CHUNK] for i in range(0, len(numbers), PRECOMPUTE_CHUNK)]
        if processes == 1:
            computed = map(self._compute, chunks)
        else:
            pool = multiprocessing.get_context("fork").Pool(processes, initializer=_forked, initargs=(self,))
            computed = pool.imap(_compute_forked, chunks)
        try:
            for chunk, hashes in zip(chunks, computed):
                with self.lock:
                    self._computed.update(zip(chunk, hashes))
        finally:
            if processes > 1:
                pool.terminate()

    def _compute(self, numbers: range) -> list[tuple[bytes, bytes, bytes]]:
        """`block_hashes` of each block, the templates built already (`precompute`)."""
        built = self._templates
        return [block_hashes(pick_template(built[era_of(n).name], n), n) for n in numbers]

    def _hashes(self, number: int) -> tuple[bytes, bytes, bytes]:
        """`block_hashes` of block `number`, kept for the next time."""
        with self.lock:
            cached = self._computed.get(number)
            if cached is not None:
                if self.cache_blocks is not None:
                    self._computed.move_to_end(number)
                return cached
        computed = block_hashes(self.template(number), number)
        with self.lock:
            self._computed[number] = computed
            while self.cache_blocks is not None and len(self._computed) > self.cache_blocks:
                self._computed.popitem(last=False)
        return computed

    def values(self, number: int) -> dict[bytes, bytes]:
        """What block `number`'s markers stand for."""
        transactions_root, withdrawals_root, hashes = self._hashes(number)
        r8 = number.to_bytes(8, "big")
        values = {
            b"bh": block_hash(number).encode(), b"ph": block_hash(number - 1).encode(), b"bn": hex(number).encode(),
            b"ts": hex(timestamp_of(number)).encode(),
            b"sr": ("0x" + rlp_codec.keccak(b"mainnet-node state" + r8).hex()).encode(),
            b"tr": transactions_root, b"r8": r8.hex().encode(), b"wr": withdrawals_root,
        }
        for i in range(len(hashes) // 66):
            values[TX_MARKERS[i] if i < len(TX_MARKERS) else b"t%d" % i] = hashes[66 * i:66 * i + 66]
        if withdrawals_root:
            first_index = WITHDRAWALS_PER_BLOCK * (number - 17_034_870)
            for k in range(WITHDRAWALS_PER_BLOCK):
                values[WITHDRAWAL_MARKERS[k]] = hex(first_index + k).encode()
        return values

    def block(self, number: int, full: bool) -> bytes:
        return b"".join(self._block(number, full))

    def receipts(self, number: int) -> bytes:
        return b"".join(self._receipts(number))

    def _block(self, number: int, full: bool) -> list[bytes]:
        if not self.first <= number <= self.last:
            return [b"null"]
        template = self.template(number)
        return render(template.full if full else template.hashes, self.values(number))

    def _receipts(self, number: int) -> list[bytes]:
        if not self.first <= number <= self.last:
            return [b"null"]
        return render(self.template(number).receipts, self.values(number))

    def _find(self, tx_hash: str) -> tuple[int, int] | None:
        """The block and position of a transaction of a block computed so far: found by
        scanning, which is slow but rare (the indexer asks by transaction only as a fallback)."""
        wanted = tx_hash.lower().encode()
        with self.lock:
            computed = list(self._computed.items())
        for number, (_, _, hashes) in computed:
            at = hashes.find(wanted)
            if at >= 0 and at % 66 == 0:
                return number, at // 66
        return None

    def receipt(self, tx_hash: str) -> bytes:
        """The receipt of a transaction of a block computed so far (a fallback the indexer uses
        only where eth_getBlockReceipts is missing)."""
        found = self._find(tx_hash)
        if found is None:
            return b"null"
        return orjson.dumps(orjson.loads(self.receipts(found[0]))[found[1]])

    # --- traces -----------------------------------------------------------------------------------

    def trace_frames(self, number: int) -> list[bytes]:
        """The callTracer frame of each transaction of block `number`, as JSON."""
        template = self.template(number)
        with self.lock:
            return template.trace_frames()

    def prepare_traces(self) -> None:
        """Builds the call trees of every template built so far (`Template.trace_frames`), so that
        the first blocks traced do not pay for them."""
        with self.lock:
            for built in self._templates.values():
                for template in built:
                    template.trace_frames()

    def _block_traces(self, number: int) -> list[bytes]:
        """`debug_traceBlockByHash` with `callTracer`: `[{"txHash", "result": frame}, ...]`."""
        if not self.first <= number <= self.last:
            raise ValueError(f"block {number} not found")
        frames = self.trace_frames(number)
        hashes = self._hashes(number)[2]
        out = [b"["]
        for i, frame in enumerate(frames):
            out += [b'{"txHash":"', hashes[66 * i:66 * i + 66], b'","result":', frame, b"},"]
        if frames:
            out[-1] = b"}"
        out.append(b"]")
        return out

    def _transaction_trace(self, tx_hash: str) -> list[bytes]:
        found = self._find(tx_hash)
        if found is None:
            raise ValueError(f"transaction {tx_hash} not found")
        return [self.trace_frames(found[0])[found[1]]]

    # --- JSON-RPC ---------------------------------------------------------------------------------

    def handle(self, body: bytes) -> bytes:
        """The answer to one POSTed body."""
        return b"".join(p for answer in self.answers(body) for p in answer)

    def answers(self, body: bytes) -> list[list[bytes]]:
        """The answer to one POSTed body, as the pieces of each call's answer (with the batch's
        brackets and commas)."""
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return [[b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}']]
        if not isinstance(request, list):
            return [self._answer(request)]
        answers = [self._answer(call) for call in request]
        for answer in answers[:-1]:
            answer.append(b",")
        return [[b"["], *answers, [b"]"]]

    def _answer(self, call: Any) -> list[bytes]:
        id_ = orjson.dumps(call.get("id") if isinstance(call, dict) else None)
        try:
            result = self._result(call["method"], call.get("params") or [])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            error = {"code": -32602, "message": f"invalid argument: {exc}"}
            return [b'{"jsonrpc":"2.0","id":' + id_ + b',"error":' + orjson.dumps(error) + b"}"]
        if result is None:
            error = {"code": -32601, "message": f"the method {call['method']} does not exist/is not available"}
            return [b'{"jsonrpc":"2.0","id":' + id_ + b',"error":' + orjson.dumps(error) + b"}"]
        return [b'{"jsonrpc":"2.0","id":' + id_ + b',"result":', *result, b"}"]

    def _result(self, method: str, params: list[Any]) -> list[bytes] | None:
        if method == "eth_getBlockByNumber":
            return self._block(self._number(params[0]), bool(params[1]))
        if method == "eth_getBlockByHash":
            return self._block(self._by_hash(params[0]), bool(params[1]))
        if method == "eth_getBlockReceipts":
            which = params[0]
            if isinstance(which, dict):
                which = which.get("blockHash") or which["blockNumber"]
            return self._receipts(self._by_hash(which) if len(which) == 66 else self._number(which))
        if method == "eth_getTransactionReceipt":
            return [self.receipt(params[0])]
        if method in ("debug_traceBlockByHash", "debug_traceBlockByNumber", "debug_traceTransaction"):
            options = params[1] if len(params) > 1 else {}
            if not isinstance(options, dict) or options.get("tracer") != "callTracer":
                raise ValueError("only the callTracer is served here ({\"tracer\": \"callTracer\"})")
            if method == "debug_traceTransaction":
                return self._transaction_trace(params[0])
            return self._block_traces(self._by_hash(params[0]) if method == "debug_traceBlockByHash"
                                      else self._number(params[0]))
        if method == "eth_blockNumber":
            return [b'"%s"' % hex(self.last).encode()]
        if method == "eth_chainId":
            return [b'"%s"' % hex(CHAIN_ID).encode()]
        if method == "net_version":
            return [b'"%d"' % CHAIN_ID]
        return None

    def _number(self, value: str) -> int:
        if value in ("latest", "finalized", "safe", "pending"):
            return self.last
        if value == "earliest":
            return self.first
        return int(value, 16)

    def _by_hash(self, value: str) -> int:
        """The height a hash of `block_hash` carries, or -1 if it is none of them."""
        number = int(value[-16:], 16)
        return number if block_hash(number) == value.lower() else -1
