#!/usr/bin/env python3
"""Reads TensorBoard event files, written from the formats' definitions
(independently of nns's writer, backend/runtime/tensorboard.cpp):

  TFRecord: uint64 length, uint32 masked CRC-32C of the 8 length bytes, the
  data, uint32 masked CRC-32C of the data; little-endian. CRC-32C is the
  Castagnoli CRC (reflected polynomial 0x82F63B78, init and final xor
  0xFFFFFFFF); mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32).

  Event (tensorflow/core/util/event.proto): wall_time = 1 (double),
  step = 2 (int64), file_version = 3 (string), summary = 5 (Summary).
  Summary: value = 1 (repeated Value). Value: tag = 1 (string),
  simple_value = 2 (float).

Prints one line per scalar, "STEP TAG VALUE" (VALUE with repr), after a
first line "file_version V". Exit 1 with a message on any CRC mismatch,
truncated record or malformed protobuf.

  read_tfevents.py FILE
"""
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(raw):
    at = 0
    while at < len(raw):
        if at + 12 > len(raw):
            sys.exit(f"truncated record header at byte {at}")
        head = raw[at:at + 8]
        (length,) = struct.unpack("<Q", head)
        (crc,) = struct.unpack("<I", raw[at + 8:at + 12])
        if crc != masked(head):
            sys.exit(f"length CRC mismatch at byte {at}")
        data = raw[at + 12:at + 12 + length]
        if len(data) != length or at + 16 + length > len(raw):
            sys.exit(f"truncated record at byte {at}")
        (crc,) = struct.unpack("<I", raw[at + 12 + length:at + 16 + length])
        if crc != masked(data):
            sys.exit(f"data CRC mismatch in the record at byte {at}")
        yield data
        at += 16 + length


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    at = 0

    def varint():
        nonlocal at
        shift = value = 0
        while True:
            if at >= len(buf):
                sys.exit("truncated varint")
            b = buf[at]
            at += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    while at < len(buf):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            yield field, wire, varint()
        elif wire == 1:
            yield field, wire, buf[at:at + 8]
            at += 8
        elif wire == 2:
            n = varint()
            yield field, wire, buf[at:at + n]
            at += n
        elif wire == 5:
            yield field, wire, buf[at:at + 4]
            at += 4
        else:
            sys.exit(f"unsupported wire type {wire}")
        if at > len(buf):
            sys.exit("truncated field")


def main():
    raw = open(sys.argv[1], "rb").read()
    for data in records(raw):
        step = 0
        for field, wire, value in fields(data):
            if field == 2 and wire == 0:
                step = value
            elif field == 3 and wire == 2:
                print("file_version", value.decode())
            elif field == 5 and wire == 2:
                for vf, vw, v in fields(value):
                    if vf != 1 or vw != 2:
                        continue
                    tag, scalar = None, None
                    for f, w, x in fields(v):
                        if f == 1 and w == 2:
                            tag = x.decode()
                        elif f == 2 and w == 5:
                            scalar = struct.unpack("<f", x)[0]
                    if tag is not None and scalar is not None:
                        print(step, tag, repr(scalar))


if __name__ == "__main__":
    main()
