"""vLLM's sha256_cbor block hashes, computed independently of minfer.

Reads a JSON list of chains (the first argument), each {"seed": str, "ns": str,
"blocks": [[token ids], ...]}, and prints a JSON list of each chain's block
hashes (the digest's last 8 bytes as a big-endian unsigned integer, vLLM's
integer block hashes). Uses Debian's python3-cbor2 (canonical CBOR) and
hashlib, as vLLM's hash_block_tokens does: the first block's parent is
NONE_HASH = sha256(cbor(seed)); a first block in a namespace carries the
extra keys (ns,), vLLM's cache_salt.
"""
import hashlib
import json
import sys

import cbor2


def sha256_cbor(obj):
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def main():
    out = []
    for chain in json.loads(sys.argv[1]):
        parent = sha256_cbor(chain["seed"])
        hashes = []
        for i, tokens in enumerate(chain["blocks"]):
            extra = (chain["ns"],) if i == 0 and chain["ns"] else None
            parent = sha256_cbor((parent, tuple(tokens), extra))
            hashes.append(int.from_bytes(parent, "big") & ((1 << 64) - 1))
        out.append(hashes)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
