#!/bin/sh
# anvil with pruned history mines empty blocks about 300 times faster than by default; blocks,
# transactions and receipts stay available. Its genesis is CHAIN_HEIGHT seconds ago, so that the
# chain, a block a second, reaches about now and the blocks mined after it carry real times.
# The healthcheck passes once the chain is built; a block every CHAIN_BLOCK_TIME seconds (0: none)
# follows, for the workers that follow the head (build-chain.mjs). CHAIN_ID tells two such chains
# apart (docker-compose runs two).
set -e
height=${CHAIN_HEIGHT:-2000000}
anvil --host 0.0.0.0 --port 8545 --no-mining --prune-history --hardfork cancun --silent \
    --chain-id "${CHAIN_ID:-31337}" --timestamp "$(( $(date +%s) - height ))" &
node /chain/build-chain.mjs "http://127.0.0.1:8545" "$height" "${CHAIN_BUSY_BLOCKS:-200}" "${CHAIN_BLOCK_TIME:-2}" /tmp/chain-ready
wait
