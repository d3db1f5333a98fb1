#!/usr/bin/env python3
"""Byte-tokenise text files into nanoGPT-style token files.

Every byte of the text is one token (vocabulary 256), written as
little-endian uint16 ids with no header, the layout of nanoGPT's
prepare.py: OUT/train.bin holds the first 90% of the tokens and OUT/val.bin
the rest. Train on it with examples/gpt.nns's tiny config (vocab 256):

    python3 scripts/make_token_corpus.py docs/*.md README.md -o /tmp/corpus
    nns run examples/gpt.nns --config tiny --set data=...   (or a train block
    with data = token_file("/tmp/corpus/train.bin"))
"""
import argparse
import os
import struct
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("texts", nargs="+", help="text files, concatenated in the order given")
    ap.add_argument("-o", "--out", required=True, help="output folder (train.bin, val.bin)")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--dtype", choices=["uint16", "uint32"], default="uint16")
    args = ap.parse_args()
    data = b"".join(open(p, "rb").read() for p in args.texts)
    split = int(len(data) * (1 - args.val_fraction))
    fmt = "<H" if args.dtype == "uint16" else "<I"
    os.makedirs(args.out, exist_ok=True)
    for name, part in (("train.bin", data[:split]), ("val.bin", data[split:])):
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(b"".join(struct.pack(fmt, b) for b in part))
        print(f"{os.path.join(args.out, name)}: {len(part)} tokens ({args.dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
