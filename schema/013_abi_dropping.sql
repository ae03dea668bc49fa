-- `indexer abi drop` marks an ABI first, in a short transaction of its own: from then on no
-- decode window uses it. It then drops the ABI's tables a bounded number per transaction
-- (indexer/abi.py), so that a large ABI never needs more of the server's lock table than that;
-- a drop interrupted half-way leaves the ABI marked, and is finished by running it again.
ALTER TABLE abis ADD COLUMN dropping boolean NOT NULL DEFAULT false;
