"""Read the records of an offline W&B run file (``run-*.wandb``) for tests.

The file is a LevelDB-style log: a 7-byte file header, then 32 KiB blocks in which every record is
written as one or more fragments, each with a 7-byte header (CRC-32, length, type). A record that
crosses a block boundary is split, so searching the raw bytes for a key only works while the file
is smaller than one block; tests reassemble the records instead.
"""

from __future__ import annotations

import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK_SIZE = 32 * 1024
HEADER_SIZE = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def raw_records(path: Path) -> list[bytes]:
    """The payload of every record, fragments joined."""
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file")
    records: list[bytes] = []
    pending = b""
    pos = HEADER_SIZE
    while pos + HEADER_SIZE <= len(data):
        room = BLOCK_SIZE - pos % BLOCK_SIZE
        if room < HEADER_SIZE:  # the writer zero-pads a block tail too short for a header
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER_SIZE])
        if kind == 0 and length == 0:  # zero padding up to the end of the block
            pos += room
            continue
        chunk = data[pos + HEADER_SIZE : pos + HEADER_SIZE + length]
        pos += HEADER_SIZE + length
        if kind == FULL:
            records.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            records.append(pending + chunk)
            pending = b""
        else:
            raise ValueError(f"unknown fragment type {kind} at byte {pos} of {path}")
    return records


def read_records(path: Path) -> list[wandb_internal_pb2.Record]:
    """Every record of the run file, parsed."""
    parsed = []
    for raw in raw_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        parsed.append(record)
    return parsed


def history_keys(records: list[wandb_internal_pb2.Record]) -> set[str]:
    """All metric names logged with ``run.log``."""
    return {item.key or "/".join(item.nested_key) for r in records if r.HasField("history") for item in r.history.item}
