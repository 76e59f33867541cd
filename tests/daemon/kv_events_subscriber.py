"""A KV-cache event subscriber written against vLLM's wire format, as a
router would: Debian's python3-zmq and python3-msgpack, nothing of minfer's.

Subscribes to ENDPOINT for topics starting with PREFIX and prints one JSON
line per message: the topic, the sequence number, and the decoded events
(BlockStored / BlockRemoved / AllBlocksCleared as dicts). It checks every
stored block's hash itself — vLLM's sha256_cbor chain over the event's own
token ids (Debian's python3-cbor2), the parent's digest from an earlier
event or NONE_HASH — and reports "hashes_ok". Prints "ready" once
subscribed (after ZeroMQ's slow-joiner pause). Runs until STOP_FILE exists
or SECONDS pass. With --replay ENDPOINT it then asks for a replay from
sequence 0 (a DEALER socket: the same frames a REQ client gets) and prints
{"replay": [[seq, n_events], ...]}.
"""
import argparse
import hashlib
import json
import os
import sys
import time

import cbor2
import msgpack
import zmq


def sha256_cbor(obj):
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("prefix")
    ap.add_argument("stop_file")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--replay")
    ap.add_argument("--seed", default="vllm-none-hash")
    args = ap.parse_args()

    none_hash = sha256_cbor(args.seed)
    digests = {}  # 64-bit hash -> full digest, from blocks this script hashed

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.connect(args.endpoint)
    sub.setsockopt(zmq.SUBSCRIBE, args.prefix.encode())
    time.sleep(0.3)
    print("ready", flush=True)

    def decode(payload):
        ts, events, rank = msgpack.unpackb(payload, raw=False)
        out = []
        for e in events:
            kind = e[0]
            if kind == "BlockStored":
                hashes, parent, tokens, block_size, lora, medium = e[1:7]
                # Each stored block's hash, recomputed from its tokens.
                ok = True
                pd = none_hash if parent is None else digests.get(parent)
                if pd is None:
                    ok = False
                else:
                    for i, h in enumerate(hashes):
                        block = tokens[i * block_size:(i + 1) * block_size]
                        d = sha256_cbor((pd, tuple(block), None))
                        if int.from_bytes(d, "big") & ((1 << 64) - 1) != h:
                            ok = False
                            break
                        digests[h] = d
                        pd = d
                out.append({"type": kind, "hashes": hashes, "parent": parent,
                            "tokens": tokens, "block_size": block_size,
                            "lora_id": lora, "medium": medium, "hashes_ok": ok})
            elif kind == "BlockRemoved":
                out.append({"type": kind, "hashes": e[1], "medium": e[2]})
            else:
                out.append({"type": kind})
        return {"ts": ts, "rank": rank, "events": out}

    deadline = time.time() + args.seconds
    while time.time() < deadline and not os.path.exists(args.stop_file):
        if sub.poll(50):
            topic, seq, payload = sub.recv_multipart()
            msg = decode(payload)
            msg["topic"] = topic.decode()
            msg["seq"] = int.from_bytes(seq, "big")
            print(json.dumps(msg), flush=True)

    if args.replay:
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(args.replay)
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        got = []
        while dealer.poll(2000):
            frames = dealer.recv_multipart()
            _, seq, payload = frames
            if not payload:
                break
            got.append([int.from_bytes(seq, "big"), len(msgpack.unpackb(payload)[1])])
        print(json.dumps({"replay": got}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
