// Builds a chain on a running anvil (started with --no-mining, its genesis HEIGHT seconds ago): two
// contracts that emit logs, BUSY blocks of transfers and calls, then empty blocks, a second apart,
// up to HEIGHT - 1, which is about now. Then it writes READY_FILE and, unless BLOCK_TIME is 0,
// keeps the chain growing for the workers that follow its head: a block every BLOCK_TIME seconds,
// stamped with the clock's time, each holding a transfer of ether and one of a token (a log that
// the indexer decodes into token_transfers). Forever.
//   node build-chain.mjs URL HEIGHT BUSY BLOCK_TIME READY_FILE
import { writeFileSync } from "node:fs";

const [url, height, busy, blockTime, readyFile] = process.argv.slice(2).map((v, i) => (i && i < 4 ? Number(v) : v));
if (!Number.isInteger(blockTime) || blockTime < 0) {
  console.error(`chain: CHAIN_BLOCK_TIME must be a whole number of seconds (0: no block after the build), not '${process.argv[5]}'`);
  process.exit(2);
}

// Runtime: LOG2(calldata, topic0 = first calldata word, topic1 = caller), then LOG1.
const EMITTER = "0x6015600c60003960156000f3" + "36600060003733600051366000a23460206000a100";
// Runtime: LOG3(data = calldata word 3, topics = words 0, 1 and 2): called with the Transfer
// event's signature, two addresses and an amount, it logs an ERC-20 transfer.
const TOKEN = "0x6015600c60003960156000f3" + "60603560005260403560203560003560206000a300";
const TRANSFER = "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"; // keccak("Transfer(address,address,uint256)")
const word = (hex) => hex.replace(/^0x/, "").padStart(64, "0");

async function rpc(method, ...params) {
  for (let attempt = 0; ; attempt++) {
    try {
      const res = await fetch(url, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
      });
      const body = await res.json();
      if (body.error) throw new Error(`${method}: ${JSON.stringify(body.error)}`);
      return body.result;
    } catch (err) {
      if (attempt > 100 || !String(err).includes("fetch failed")) throw err;
      await new Promise((r) => setTimeout(r, 200)); // anvil still starting
    }
  }
}

// Block b's i-th transaction: a transfer, or a call of the emitter (two logs).
function transaction(accounts, emitter, b, i) {
  const from = accounts[(b + i) % accounts.length];
  const tx = i % 2
    ? { from, to: accounts[(b * 7 + i) % accounts.length], value: "0x" + (b * 1000 + i + 1).toString(16) }
    : { from, to: emitter, data: "0x" + b.toString(16).padStart(64, "0") + i.toString(16).padStart(64, "0") };
  return { ...tx, gas: "0x1d4c0" };
}

const accounts = await rpc("eth_accounts");
await rpc("eth_sendTransaction", { from: accounts[0], data: EMITTER, gas: "0x30d40" });
await rpc("eth_sendTransaction", { from: accounts[1], data: TOKEN, gas: "0x30d40" });
await rpc("evm_mine");
const [emitter, token] = (await rpc("eth_getBlockReceipts", "latest")).map((r) => r.contractAddress);
const toMine = Math.min(busy, Math.max(0, height - 2));
for (let b = 0; b < toMine; b++) {
  for (let i = 0; i < 8; i++) await rpc("eth_sendTransaction", transaction(accounts, emitter, b, i));
  await rpc("evm_mine");
}
let head = Number(await rpc("eth_blockNumber"));
if (head < height - 1) await rpc("anvil_mine", "0x" + (height - 1 - head).toString(16), "0x1");
head = Number(await rpc("eth_blockNumber"));
console.log(`chain built: head ${head}`);
writeFileSync(readyFile, "");
if (blockTime > 0) {
  // anvil's clock started at the genesis: set to now, new blocks carry real times (and the
  // following's lag in seconds is real).
  await rpc("evm_setTime", Math.floor(Date.now() / 1000));
  const sendPair = async (b) => {
    await rpc("eth_sendTransaction", transaction(accounts, emitter, b, 1));
    const [from, to] = [accounts[b % accounts.length], accounts[(b + 1) % accounts.length]];
    const data = "0x" + TRANSFER + word(from) + word(to) + word((b + 1).toString(16));
    await rpc("eth_sendTransaction", { from, to: token, data, gas: "0x1d4c0" });
  };
  await sendPair(head + 1); // waits in the pool for the first block
  await rpc("evm_setIntervalMining", blockTime);
  console.log(`mining a block every ${blockTime} s`);
  for (;;) {
    while (Number(await rpc("eth_blockNumber")) <= head) await new Promise((r) => setTimeout(r, 200));
    head = Number(await rpc("eth_blockNumber"));
    await sendPair(head + 1); // mined within BLOCK_TIME s, in the next block
  }
}
