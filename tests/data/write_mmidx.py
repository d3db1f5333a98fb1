#!/usr/bin/env python3
"""Writes a Megatron-LM indexed dataset (PREFIX.bin + PREFIX.idx), from the
format's definition (Megatron's indexed_dataset.py _IndexWriter), for the
tests. Independent of nns's reader on purpose.

    write_mmidx.py PREFIX [--dtype uint16|int32] [--docs N] [--vocab V] [--tokens N]
    write_mmidx.py PREFIX --from-bin FLAT.bin --docs N   (a flat uint16 file split into N documents)

Index layout, little-endian:
    b"MMIDIDX\\x00\\x00"       9-byte magic
    uint64 version = 1
    uint8  dtype code        (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)
    uint64 sequence count
    uint64 document count    (length of the document index list)
    int32  sizes[sequences]  (tokens per sequence)
    int64  pointers[sequences]  (byte offset of each sequence in .bin)
    int64  document_indices[documents]  (0, ..., sequence count)
Here each document is one sequence.
"""
import argparse
import struct
import sys

CODES = {"uint8": (1, "B"), "int16": (3, "h"), "int32": (4, "i"), "int64": (5, "q"), "uint16": (8, "H")}


def write(prefix, docs, dtype):
    code, ch = CODES[dtype]
    width = struct.calcsize("<" + ch)
    sizes, pointers, offset = [], [], 0
    with open(prefix + ".bin", "wb") as b:
        for d in docs:
            b.write(struct.pack("<%d%s" % (len(d), ch), *d))
            sizes.append(len(d))
            pointers.append(offset)
            offset += len(d) * width
    doc_index = list(range(len(docs) + 1))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_index)))
        f.write(struct.pack("<%di" % len(sizes), *sizes))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_index), *doc_index))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix")
    ap.add_argument("--dtype", default="uint16", choices=sorted(CODES))
    ap.add_argument("--docs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=1000, help="tokens in all (generated data)")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--from-bin", help="split this flat uint16 token file into --docs documents")
    a = ap.parse_args()
    if a.from_bin:
        raw = open(a.from_bin, "rb").read()
        stream = list(struct.unpack("<%dH" % (len(raw) // 2), raw))
    else:
        # Token i of the stream is i % vocab: a reader's output is checkable by eye.
        stream = [i % a.vocab for i in range(a.tokens)]
    # Uneven document lengths (a document boundary inside most windows).
    cuts = sorted({len(stream) * (k * k) // (a.docs * a.docs) for k in range(1, a.docs)})
    docs, start = [], 0
    for c in cuts + [len(stream)]:
        docs.append(stream[start:c])
        start = c
    write(a.prefix, docs, a.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
