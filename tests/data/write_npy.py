#!/usr/bin/env python3
"""Writes .npy files (format 1.0, C order) without NumPy, for the tests.

    write_npy.py OUT.npy DESCR SHAPE VALUES...   e.g. write_npy.py x.npy '<f4' 4,2 1 2 3 4 5 6 7 8
    write_npy.py --regression DIR ROWS DIM     x.npy (f32 sin pattern) and y.npy = 0.5 * x (a learnable target)
"""
import math
import struct
import sys

PACK = {"<f4": "f", "<f2": "e", "<i4": "i", "<i8": "q", "|u1": "B", "<u2": "H", ">f4": "f"}


def write(path, descr, shape, values, fortran=False, version=1):
    shape_text = "(%d,)" % shape[0] if len(shape) == 1 else "(" + ", ".join("%d" % d for d in shape) + ")"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, "True" if fortran else "False", shape_text)
    prefix_len = 10 if version == 1 else 12
    pad = (64 - (prefix_len + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    order = ">" if descr.startswith(">") else "<"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + bytes([version, 0]))
        f.write(struct.pack("<H" if version == 1 else "<I", len(header)))
        f.write(header.encode("latin1"))
        f.write(struct.pack(order + "%d%s" % (len(values), PACK[descr]), *values))


def main(argv):
    if argv[1] == "--regression":
        out, rows, dim = argv[2], int(argv[3]), int(argv[4])
        xs = [math.sin(0.37 * i + 0.11 * (i // dim)) for i in range(rows * dim)]
        write(out + "/x.npy", "<f4", [rows, dim], xs)
        write(out + "/y.npy", "<f4", [rows, dim], [0.5 * v for v in xs])
        return 0
    path, descr, shape = argv[1], argv[2], [int(d) for d in argv[3].split(",")]
    conv = float if descr.endswith(("f4", "f2")) else int
    write(path, descr, shape, [conv(v) for v in argv[4:]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
