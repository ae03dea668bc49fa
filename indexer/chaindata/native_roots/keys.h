/* The keys of the node's JSON that the encodings read. Part of _native_roots.c. */

#ifndef NATIVE_ROOTS_KEYS_H
#define NATIVE_ROOTS_KEYS_H

#include <Python.h>

/* The JSON keys read, interned once: a lookup then compares by pointer first. */
static PyObject *K_type, *K_nonce, *K_gas, *K_gasPrice, *K_maxFeePerGas, *K_maxPriorityFeePerGas,
    *K_maxFeePerBlobGas, *K_to, *K_value, *K_input, *K_data, *K_v, *K_r, *K_s, *K_yParity, *K_chainId,
    *K_accessList, *K_address, *K_storageKeys, *K_blobVersionedHashes, *K_authorizationList, *K_sourceHash,
    *K_from, *K_mint, *K_isSystemTx, *K_root, *K_status, *K_cumulativeGasUsed, *K_logs, *K_logsBloom,
    *K_topics, *K_depositNonce, *K_depositReceiptVersion, *K_index, *K_validatorIndex, *K_amount,
    *K_number, *K_transactions, *K_transactionsRoot, *K_receiptsRoot, *K_withdrawalsRoot, *K_withdrawals;

#define KEY(name) if ((K_##name = PyUnicode_InternFromString(#name)) == NULL) return -1

static int init_keys(void)
{
    KEY(type); KEY(nonce); KEY(gas); KEY(gasPrice); KEY(maxFeePerGas); KEY(maxPriorityFeePerGas);
    KEY(maxFeePerBlobGas); KEY(to); KEY(value); KEY(input); KEY(data); KEY(v); KEY(r); KEY(s); KEY(yParity);
    KEY(chainId); KEY(accessList); KEY(address); KEY(storageKeys); KEY(blobVersionedHashes);
    KEY(authorizationList); KEY(sourceHash); KEY(from); KEY(mint); KEY(isSystemTx); KEY(root); KEY(status);
    KEY(cumulativeGasUsed); KEY(logs); KEY(logsBloom); KEY(topics); KEY(depositNonce);
    KEY(depositReceiptVersion); KEY(index); KEY(validatorIndex); KEY(amount); KEY(number); KEY(transactions);
    KEY(transactionsRoot); KEY(receiptsRoot); KEY(withdrawalsRoot); KEY(withdrawals);
    return 0;
}

#undef KEY

#endif
