// Builds a chain on a running anvil (started with --no-mining): a contract that emits logs,
// CHAIN_BUSY_BLOCKS blocks of transfers and calls, then empty blocks up to CHAIN_HEIGHT - 1.
const [url, height, busy] = process.argv.slice(2).map((v, i) => (i ? Number(v) : v));

// Runtime: LOG2(calldata, topic0 = first calldata word, topic1 = caller), then LOG1.
const EMITTER = "0x6015600c60003960156000f3" + "36600060003733600051366000a23460206000a100";

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

const accounts = await rpc("eth_accounts");
await rpc("eth_sendTransaction", { from: accounts[0], data: EMITTER, gas: "0x30d40" });
await rpc("evm_mine");
const [{ contractAddress: emitter }] = await rpc("eth_getBlockReceipts", "latest");
const toMine = Math.min(busy, Math.max(0, height - 2));
for (let b = 0; b < toMine; b++) {
  for (let i = 0; i < 8; i++) {
    const from = accounts[(b + i) % accounts.length];
    const tx = i % 2
      ? { from, to: accounts[(b * 7 + i) % accounts.length], value: "0x" + (b * 1000 + i + 1).toString(16) }
      : { from, to: emitter, data: "0x" + b.toString(16).padStart(64, "0") + i.toString(16).padStart(64, "0") };
    await rpc("eth_sendTransaction", { ...tx, gas: "0x1d4c0" });
  }
  await rpc("evm_mine");
}
const head = Number(await rpc("eth_blockNumber"));
if (head < height - 1) await rpc("anvil_mine", "0x" + (height - 1 - head).toString(16), "0x1");
console.log(`chain built: head ${Number(await rpc("eth_blockNumber"))}`);
